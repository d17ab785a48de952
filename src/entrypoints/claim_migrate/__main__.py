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

import argparse
import ssl
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from adapters.protocolfile import ProtocolFileError
from domain.errors import InvalidRequestError
from entrypoints._shared.command import EXIT_FAILED, EXIT_OK, EXIT_USAGE, failing, serve, shutting_down
from entrypoints._shared.flags import KUBECONFIG, LOG_LEVEL, PROTOCOL, cli, flag
from entrypoints._shared.httpserver import parse_listen

from .app import DEFAULT_LISTEN, ClaimMigrateSettings
from .containers import ClaimMigrateContainer

__all__ = ["CLI", "main"]


def _listen(args: argparse.Namespace) -> Mapping[str, Any]:
    host, port = args.listen
    return {"host": host, "port": port}


CLI = cli(
    "ljrk claim-migrate",
    "Mutating admission webhook: a pod asking the classic GPU resources in a namespace opted in is admitted with "
    "DRA claims in their place (ResourceClaimTemplates it creates), or refused with what to do.",
    ClaimMigrateSettings,
    flag("--listen", setting=None, type=parse_listen, default=parse_listen(DEFAULT_LISTEN), metavar="HOST:PORT",
         help=f"HTTPS address of /mutate, /healthz and /metrics (default: {DEFAULT_LISTEN})"),
    flag("--tls-cert", type=Path, required=True, metavar="FILE", help="serving certificate (PEM)"),
    flag("--tls-key", type=Path, required=True, metavar="FILE", help="its private key (PEM)"),
    KUBECONFIG.but(help="kubeconfig (default: in-cluster)"),
    PROTOCOL.but(help="protocol.yaml (default: built-in constants)"),
    LOG_LEVEL,
    derived=_listen,
)
"""The command line (module docstring)."""


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk claim-migrate",
         stop: threading.Event | None = None) -> int:
    """Run until a signal (or ``stop``, for tests); returns the exit code (module docstring)."""
    return CLI.main(argv, prog, lambda settings: _run(settings, stop))


def _run(settings: ClaimMigrateSettings, stop: threading.Event | None) -> int:
    container = ClaimMigrateContainer(settings=settings)
    with shutting_down(container):
        with failing(Exception, code=EXIT_FAILED, prefix="cannot start: "):
            container.init_resources()
        with failing(ProtocolFileError, InvalidRequestError, code=EXIT_USAGE):
            container.protocol()
        with failing(OSError, ssl.SSLError, code=EXIT_FAILED,
                     prefix=f"--listen {settings.host}:{settings.port} / --tls-cert {settings.tls_cert}: "):
            app = container.app()
        serve(app, stop)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
