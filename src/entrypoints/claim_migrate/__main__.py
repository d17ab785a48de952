"""``ljrk claim-migrate`` (also ``python -m entrypoints.claim_migrate``): the mutating admission webhook that turns
the classic GPU requests of pods into DRA claims (docs/migrate.md).

``ljrk claim-migrate --tls-cert FILE --tls-key FILE [--listen HOST:PORT] [--kubeconfig FILE] [--protocol FILE]
[--log-level LEVEL]``

Serves ``POST /mutate`` over HTTPS on ``--listen`` (default ``0.0.0.0:8443``): kube-apiserver calls it for each
Pod CREATE asking a classic GPU resource in a namespace labelled ``dra.claim-migrate=enabled``
(``deploy/claim-migrate``); the pod is admitted with its classic resources replaced by claims of ResourceClaimTemplates
the webhook creates in its namespace, or refused with a message saying what to do (``services.claim_migrate``).
Stateless: any number of replicas.

Exit codes: 0 stopped by a signal; 1 cannot run (certificate unreadable, address in use, kubeconfig unreadable);
2 bad command line or protocol file. Errors are one line ``ljrk claim-migrate: error: …`` on stderr.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

from entrypoints._shared.flags import LOG_LEVEL, cli
from entrypoints._shared.webhookcli import listen, run_webhook, webhook_flags

from .app import ClaimMigrateSettings
from .containers import ClaimMigrateContainer

__all__ = ["CLI", "main"]

CLI = cli(
    "ljrk claim-migrate",
    "Mutating admission webhook: a pod asking the classic GPU resources in a namespace opted in is admitted with "
    "DRA claims in their place (ResourceClaimTemplates it creates), or refused with what to do.",
    ClaimMigrateSettings,
    *webhook_flags("/mutate"),
    LOG_LEVEL,
    derived=listen,
)
"""The command line (module docstring)."""


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk claim-migrate",
         stop: threading.Event | None = None) -> int:
    """Run until a signal (or ``stop``, for tests); returns the exit code (module docstring)."""
    return CLI.main(argv, prog, lambda settings: _run(settings, stop))


def _run(settings: ClaimMigrateSettings, stop: threading.Event | None) -> int:
    container = ClaimMigrateContainer(settings=settings)
    return run_webhook(container, settings, stop, protocol=container.protocol, app=container.app)


if __name__ == "__main__":
    sys.exit(main())
