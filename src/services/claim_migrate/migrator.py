"""The claim migrator: answers the review of one pod CREATE in a namespace opted into migration.

The mapping is the domain's (:func:`domain.dra.migrate.plan_migration`); this adds the one side effect: each
template the pod's claims name is created in the pod's namespace before the pod is admitted (an existing one
must ask what its name stands for: one left by an older protocol, or made by hand, refuses the pod naming both),
except on a dry run (the webhook is registered ``sideEffects: NoneOnDryRun``). :class:`Answer`:

* allowed, no patch: the pod asks no classic GPU resource;
* allowed with the patch: the pod is migrated and its templates exist;
* refused: the domain's message (what to do is in it); or a template cannot be created (fail closed, as the
  webhook's ``failurePolicy: Fail`` does when the webhook cannot be reached: a pod admitted with a claim whose
  template is missing would wait for it with no word why).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs

from domain.dra.migrate import MigrationRefusedError, PodFacts, describe, plan_migration
from domain.kube.protocol import ProtocolConstants
from ports.claim_templates import ClaimTemplatesApi, ClusterError

log = logging.getLogger(__name__)


@attrs.frozen
class Answer:
    """The answer: ``allowed``; when refused, ``message`` (one line for the user); when migrated, ``patch``
    (JSONPatch operations)."""

    allowed: bool
    message: str = ""
    patch: tuple[Mapping[str, Any], ...] = ()


class ClaimMigrator:
    """Reviews pod CREATEs (module docstring) under ``protocol``, creating templates through ``templates``."""

    def __init__(self, *, protocol: ProtocolConstants, templates: ClaimTemplatesApi) -> None:
        self._protocol = protocol
        self._templates = templates

    def review(self, facts: PodFacts, *, dry_run: bool = False) -> Answer:
        """The answer for ``facts``' pod; ``dry_run``: create nothing (module docstring)."""
        try:
            migration = plan_migration(facts, self._protocol)
        except MigrationRefusedError as error:
            log.info("claim migrate: refused: %s", error)
            return Answer(False, str(error))
        if not migration.changes:
            return Answer(True)
        namespace = facts.pod.namespace
        for shape in migration.templates if not dry_run else ():
            try:
                created = self._templates.create_template(namespace, shape)
                existing = None if created else self._templates.read_template(namespace, shape.template_name)
            except ClusterError as error:
                log.warning("claim migrate: pod %s refused: template %s: %s", facts.label, shape.template_name, error)
                return Answer(False, f"pod {facts.label}: ResourceClaimTemplate {namespace}/{shape.template_name} "
                                     f"cannot be created or read, so the pod is refused for now; create it again: "
                                     f"{error}")
            if created:
                log.info("claim migrate: created ResourceClaimTemplate %s/%s", namespace, shape.template_name)
            elif existing != shape:
                return Answer(False, f"pod {facts.label}: ResourceClaimTemplate {namespace}/{shape.template_name} "
                                     f"exists but does not ask {describe(shape)} (it asks "
                                     f"{'something else' if existing is None else describe(existing)}); delete it, "
                                     "the webhook makes it again")
        log.info("claim migrate: pod %s migrated: %s", facts.label,
                 ", ".join(f"{c} -> {s.template_name}" for c, s in migration.claims.items()))
        return Answer(True, patch=migration.patch)
