"""``ljrk claim-quota`` (also ``python -m entrypoints.claim_quota``): the validating admission webhook enforcing
per-namespace quotas on what DRA claims of our driver consume (docs/quota.md, "DRA claims").

``ljrk claim-quota --tls-cert FILE --tls-key FILE [--listen HOST:PORT] [--kubeconfig FILE] [--protocol FILE]
[--pending-ttl SECONDS] [--log-level LEVEL]``

Serves ``POST /validate`` over HTTPS on ``--listen`` (default ``0.0.0.0:8443``): kube-apiserver calls it for each
UPDATE of ``resourceclaims/status`` that adds an allocation in a namespace carrying a quota label
(``deploy/claim-quota``); an allocation that would take the namespace over ``dra.claim-quota-cores`` or
``dra.claim-quota-memory`` is refused with a message saying ``over quota`` (``services.claim_quota.gate``). Run one
replica: decisions are serialised in one process.

Exit codes: 0 stopped by a signal; 1 cannot run (certificate unreadable, address in use, kubeconfig unreadable);
2 bad command line or protocol file. Errors are one line ``ljrk claim-quota: error: …`` on stderr.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

from entrypoints._shared.flags import LOG_LEVEL, cli, flag
from entrypoints._shared.webhookcli import listen, run_webhook, webhook_flags
from services.claim_quota.gate import PENDING_TTL_S

from .app import ClaimQuotaSettings
from .containers import ClaimQuotaContainer

__all__ = ["CLI", "main"]

CLI = cli(
    "ljrk claim-quota",
    "Validating admission webhook: refuses a DRA claim allocation of our driver that would take its namespace "
    "over the quota its Namespace labels set (cores in percent of one GPU, memory).",
    ClaimQuotaSettings,
    *webhook_flags("/validate"),
    flag("--pending-ttl", dest="pending_ttl_s", type=float, default=PENDING_TTL_S, metavar="SECONDS",
         help=f"seconds an approved allocation counts before the API lists it (default: {PENDING_TTL_S:g})"),
    LOG_LEVEL,
    derived=listen,
)
"""The command line (module docstring)."""


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk claim-quota",
         stop: threading.Event | None = None) -> int:
    """Run until a signal (or ``stop``, for tests); returns the exit code (module docstring)."""
    return CLI.main(argv, prog, lambda settings: _run(settings, stop))


def _run(settings: ClaimQuotaSettings, stop: threading.Event | None) -> int:
    container = ClaimQuotaContainer(settings=settings)
    return run_webhook(container, settings, stop, protocol=container.protocol, app=container.app)


if __name__ == "__main__":
    sys.exit(main())
