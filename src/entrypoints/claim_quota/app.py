"""Settings, the HTTPS listener and the serving loop of ``ljrk claim-quota``.

The listener is the shared webhook listener (``entrypoints._shared.webhook``: the bounded server over TLS with
``--tls-cert``/``--tls-key``). Routes:

* ``POST /validate`` — an AdmissionReview v1 (:mod:`.review`); 200 with the review's answer, 400 (text) for a
  malformed review or body, 404 for another path, 500 for a bug;
* ``GET /healthz``, ``/readyz`` (200 while serving), ``/metrics`` (reviews answered, by verdict; pending approvals).
"""

from __future__ import annotations

import logging
import ssl

import attrs

from entrypoints._shared.command import SettingsError
from entrypoints._shared.webhook import WebhookApp, WebhookEndpoint
from entrypoints._shared.webhookcli import WebhookSettings
from services.claim_quota.gate import PENDING_TTL_S, ClaimQuotaGate

from .review import review

log = logging.getLogger(__name__)

WEBHOOK_PATH = "/validate"
"""The path the ValidatingWebhookConfiguration posts to."""


@attrs.frozen
class ClaimQuotaSettings(WebhookSettings):
    """Validated settings of ``ljrk claim-quota`` (flags in ``__main__``): the webhook's (``WebhookSettings``) and
    ``pending_ttl_s`` (seconds an approved allocation counts before a list shows it, > 0). Raises
    :class:`SettingsError` naming the flag."""

    pending_ttl_s: float = PENDING_TTL_S

    def __attrs_post_init__(self) -> None:
        if not 0 < self.pending_ttl_s <= 3600:  # also refuses NaN
            raise SettingsError(f"--pending-ttl {self.pending_ttl_s}: must be > 0 and at most 3600 seconds")


class ClaimQuotaEndpoint(WebhookEndpoint):
    """The webhook listener on ``host:port`` (port 0 picks a free one) with ``tls``, answering reviews with
    ``gate``. Raises OSError when the address cannot be bound."""

    def __init__(self, host: str, port: int, *, gate: ClaimQuotaGate, tls: ssl.SSLContext) -> None:
        self.gate = gate
        super().__init__(host, port, name="claim-quota", path=WEBHOOK_PATH, answer=self._answer, tls=tls,
                         metric="ljrk_claim_quota", what="Allocations reviewed", extra_metrics=self._pending)

    def _answer(self, body: bytes) -> bytes:
        return review(body, self.gate.review)

    def _pending(self) -> str:
        return ("# HELP ljrk_claim_quota_pending Approved allocations no list shows yet.\n"
                "# TYPE ljrk_claim_quota_pending gauge\n"
                f"ljrk_claim_quota_pending {self.gate.pending}\n")


class ClaimQuotaApp(WebhookApp):
    """Serves the claim quota ``endpoint`` until stopped."""

    def __init__(self, endpoint: ClaimQuotaEndpoint) -> None:
        super().__init__(endpoint)
        self.endpoint: ClaimQuotaEndpoint = endpoint
