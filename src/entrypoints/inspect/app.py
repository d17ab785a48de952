"""The ``inspect`` use case: list the cluster (one node or all), read the scheduler's view when asked, build the
report (:func:`domain.inspection.report.build_report`).

With a node name only that node and the pods bound to it are listed (``spec.nodeName`` field selector), so
inspecting one node of a large cluster stays cheap; the scheduler's view is restricted to it. Failures a user can
act on raise :class:`InspectError` with one line naming what failed: the API server unreachable or refusing, an
unknown node, an unreachable scheduler. With a claims port the ResourceClaims are listed too (the scheduler counts
their DRA allocations of our driver in its books); an API server that does not serve them (404, before 1.34) counts
as none. With a Namespace port (and the slices port) the report also holds the DRA claim quotas: every Namespace
carrying a quota label, its limits, use and claims (:mod:`domain.inspection.quota`), whole devices read from the
driver's ResourceSlices of the pools the claims use.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import attrs

from domain.dra.claims import ClaimAllocation
from domain.dra.quota import device_facts
from domain.dra.slices import ResourceSlice
from domain.inspection.quota import ClaimQuotaReport, claim_quotas
from domain.inspection.report import InspectionReport, build_report
from domain.inspection.view import SchedulerView, only
from domain.kube.annotations import MIG_STRATEGIES
from domain.kube.objects import NodeObject, PodObject
from domain.kube.protocol import ProtocolConstants
from domain.mig.gpu import PlacementMode
from ports.cluster import ClusterError, NodesApi, NotFoundError, PodsApi
from ports.namespaces import NamespacesApi
from ports.resource_claims import ResourceClaimsWatch
from ports.resource_slices import ResourceSlicesApi
from ports.scheduler_view import SchedulerViewError, SchedulerViewSource

OUTPUTS = ("table", "wide", "json")


class InspectError(Exception):
    """The report cannot be made; the message is the one-line explanation (exit code 2)."""


@attrs.frozen
class InspectSettings:
    """Validated settings of ``ljrk inspect``: ``node`` (empty: all), ``output`` (``table``, ``wide``, ``json``),
    ``kubeconfig`` (None: in-cluster service account), ``protocol_file`` (None: embedded defaults), ``scheduler``
    (the scheduler's URL, empty: not read), ``mig_strategy`` (the scheduler's, ``static`` or ``dynamic``),
    ``timeout_s`` (seconds per API or scheduler request, > 0). Raises :class:`InspectError` naming the setting."""

    node: str = ""
    output: str = "table"
    kubeconfig: Path | None = None
    protocol_file: Path | None = None
    scheduler: str = ""
    mig_strategy: str = "static"
    timeout_s: float = 10.0

    def __attrs_post_init__(self) -> None:
        if self.output not in OUTPUTS:
            raise InspectError(f"output={self.output!r}: must be one of {', '.join(OUTPUTS)}")
        if self.mig_strategy not in MIG_STRATEGIES:
            raise InspectError(f"mig_strategy={self.mig_strategy!r}: must be one of {', '.join(MIG_STRATEGIES)}")
        if not 0 < self.timeout_s <= 3600:  # also refuses NaN
            raise InspectError(f"timeout={self.timeout_s!r}: must be > 0 and at most 3600 seconds")


class InspectCluster(NodesApi, PodsApi, Protocol):
    """The cluster roles the inspection reads: nodes and pods."""


class InspectApp:
    """Makes the report of ``settings`` from ``cluster`` and, when given, the scheduler's ``view`` source, at the
    time ``clock`` gives (epoch seconds)."""

    def __init__(self, *, settings: InspectSettings, cluster: InspectCluster, protocol: ProtocolConstants,
                 view: SchedulerViewSource | None, clock: Callable[[], float],
                 claims: ResourceClaimsWatch | None = None, namespaces: NamespacesApi | None = None,
                 slices: ResourceSlicesApi | None = None) -> None:
        self.settings = settings
        self.claims = claims
        self.namespaces = namespaces
        self.slices = slices
        self.cluster = cluster
        self.protocol = protocol
        self.view = view
        self.clock = clock

    def _listing(self) -> tuple[list[NodeObject], list[PodObject]]:
        node = self.settings.node
        try:
            if not node:
                return list(self.cluster.list_nodes().items), list(self.cluster.list_pods().items)
            try:
                found = self.cluster.get_node(node)
            except NotFoundError:
                raise InspectError(f"node {node!r} not found") from None
            return [found], list(self.cluster.list_pods(field_selector=f"spec.nodeName={node}").items)
        except ClusterError as error:
            raise InspectError(f"cannot list the cluster: {error}") from error

    def _claims(self) -> tuple[ClaimAllocation, ...]:
        if self.claims is None:
            return ()
        try:
            return self.claims.list_claims().items
        except NotFoundError:
            return ()  # resource.k8s.io/v1 not served: no DRA claims
        except ClusterError as error:
            raise InspectError(f"cannot list ResourceClaims: {error}") from error

    def _scheduler_view(self) -> SchedulerView | None:
        if self.view is None:
            return None
        try:
            view = self.view.fetch()
        except SchedulerViewError as error:
            raise InspectError(f"cannot read the scheduler's view: {error}") from error
        return only(view, {self.settings.node}) if self.settings.node else view

    def _quotas(self, claims: tuple[ClaimAllocation, ...]) -> tuple[ClaimQuotaReport, ...]:
        if self.namespaces is None:
            return ()
        names = self.protocol.dra
        try:
            labels = self.namespaces.list_namespace_labels()
        except ClusterError as error:
            raise InspectError(f"cannot list Namespaces (DRA claim quotas): {error}") from error
        quota_keys = (names.claim_quota_cores, names.claim_quota_memory)
        limited = {ns for ns, found in labels.items() if any(key in found for key in quota_keys)}
        pools = {r.pool for c in claims if c.namespace in limited for r in c.results if r.driver == names.driver}
        found_slices: list[ResourceSlice] = []
        if self.slices is not None:
            try:
                for pool in sorted(pools):
                    found_slices.extend(self.slices.list_resource_slices(driver=names.driver, node=pool))
            except NotFoundError:
                found_slices = []  # resource.k8s.io/v1 not served
            except ClusterError as error:
                raise InspectError(f"cannot list ResourceSlices (DRA claim quotas): {error}") from error
        devices = device_facts(found_slices, driver=names.driver)
        return claim_quotas(labels, claims, devices, names)

    def report(self) -> InspectionReport:
        """List, read, build (module docstring). Raises :class:`InspectError`."""
        nodes, pods = self._listing()
        claims = self._claims()
        view = self._scheduler_view()
        report = build_report(nodes, pods, self.protocol, now=self.clock(), view=view,
                              mig_mode=PlacementMode(self.settings.mig_strategy), claims=claims)
        return attrs.evolve(report, claim_quotas=self._quotas(claims))
