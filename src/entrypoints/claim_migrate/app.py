"""Settings and the HTTPS listener of ``ljrk claim-migrate``.

The listener is the shared webhook listener (``entrypoints._shared.webhook``: the bounded server over TLS with
``--tls-cert``/``--tls-key``). Routes:

* ``POST /mutate`` — an AdmissionReview v1 of a Pod CREATE (:mod:`.review`); 200 with the answer (a JSONPatch when
  the pod is migrated), 400 (text) for a malformed review or body, 404 for another path, 500 for a bug;
* ``GET /healthz``, ``/readyz`` (200 while serving), ``/metrics`` (reviews answered, by verdict).
"""

from __future__ import annotations

import ssl

import attrs

from entrypoints._shared.webhook import WebhookApp, WebhookEndpoint
from entrypoints._shared.webhookcli import WebhookSettings
from services.claim_migrate.migrator import ClaimMigrator

from .review import review

WEBHOOK_PATH = "/mutate"
"""The path the MutatingWebhookConfiguration posts to."""


@attrs.frozen
class ClaimMigrateSettings(WebhookSettings):
    """Settings of ``ljrk claim-migrate`` (flags in ``__main__``): the webhook's, nothing more."""


class ClaimMigrateEndpoint(WebhookEndpoint):
    """The webhook listener on ``host:port`` (port 0 picks a free one) with ``tls``, answering reviews with
    ``migrator``. Raises OSError when the address cannot be bound."""

    def __init__(self, host: str, port: int, *, migrator: ClaimMigrator, tls: ssl.SSLContext) -> None:
        self.migrator = migrator
        super().__init__(host, port, name="claim-migrate", path=WEBHOOK_PATH, answer=self._answer, tls=tls,
                         metric="ljrk_claim_migrate", what="Pod creations reviewed")

    def _answer(self, body: bytes) -> bytes:
        return review(body, self.migrator)


class ClaimMigrateApp(WebhookApp):
    """Serves the claim-migrate ``endpoint`` until stopped."""

    def __init__(self, endpoint: ClaimMigrateEndpoint) -> None:
        super().__init__(endpoint)
        self.endpoint: ClaimMigrateEndpoint = endpoint
