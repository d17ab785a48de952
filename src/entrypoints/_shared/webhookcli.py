"""The command line and run loop our admission webhooks share (``ljrk claim-quota``, ``ljrk claim-migrate``).

Every webhook takes ``--listen HOST:PORT`` (default :data:`DEFAULT_LISTEN`), ``--tls-cert``/``--tls-key`` (PEM
serving certificate and key, required), ``--kubeconfig`` (default in-cluster), ``--protocol`` (default built-in
constants) and ``--log-level`` into a :class:`WebhookSettings` (or a subclass adding its own settings), and runs the
same way (:func:`run_webhook`): resources, protocol, listener, then serve until a signal. Exit codes: 0 stopped by a
signal; 1 cannot run (certificate unreadable, address in use, kubeconfig unreadable); 2 bad command line or protocol
file.
"""

from __future__ import annotations

import argparse
import ssl
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from adapters.protocolfile import ProtocolFileError
from domain.errors import InvalidRequestError

from .command import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Resources, Runnable, failing, serve, shutting_down
from .flags import KUBECONFIG, PROTOCOL, Flag, flag
from .httpserver import parse_listen

DEFAULT_LISTEN = "0.0.0.0:8443"


@attrs.frozen
class WebhookSettings:
    """Validated settings of a webhook: ``host``/``port`` of ``--listen``, ``tls_cert``/``tls_key`` (PEM files),
    ``kubeconfig`` (None: in-cluster), ``protocol_file`` (None: built-in constants), ``log_level``."""

    tls_cert: Path
    tls_key: Path
    host: str = "0.0.0.0"
    port: int = 8443
    kubeconfig: Path | None = None
    protocol_file: Path | None = None
    log_level: str = "INFO"


def webhook_flags(route: str) -> tuple[Flag, ...]:
    """The shared flags (module docstring), ``--listen``'s help naming the webhook's ``route``."""
    return (
        flag("--listen", setting=None, type=parse_listen, default=parse_listen(DEFAULT_LISTEN), metavar="HOST:PORT",
             help=f"HTTPS address of {route}, /healthz and /metrics (default: {DEFAULT_LISTEN})"),
        flag("--tls-cert", type=Path, required=True, metavar="FILE", help="serving certificate (PEM)"),
        flag("--tls-key", type=Path, required=True, metavar="FILE", help="its private key (PEM)"),
        KUBECONFIG.but(help="kubeconfig (default: in-cluster)"),
        PROTOCOL.but(help="protocol.yaml (default: built-in constants)"),
    )


def listen(args: argparse.Namespace) -> Mapping[str, Any]:
    """``host`` and ``port`` of the parsed ``--listen`` (a :class:`~.flags.Cli`'s ``derived``)."""
    host, port = args.listen
    return {"host": host, "port": port}


def run_webhook(container: Resources, settings: WebhookSettings, stop: threading.Event | None, *,
                protocol: Callable[[], object], app: Callable[[], Runnable[None]]) -> int:
    """Initialise ``container``, load its ``protocol``, build its ``app`` (the listener) and serve it until a signal
    (or ``stop``); shut the resources down however it ends. Returns :data:`EXIT_OK`; the failures of the module
    docstring are :class:`~.command.CommandError`."""
    with shutting_down(container):
        with failing(Exception, code=EXIT_FAILED, prefix="cannot start: "):
            container.init_resources()
        with failing(ProtocolFileError, InvalidRequestError, code=EXIT_USAGE):
            protocol()
        with failing(OSError, ssl.SSLError, code=EXIT_FAILED,
                     prefix=f"--listen {settings.host}:{settings.port} / --tls-cert {settings.tls_cert}: "):
            served = app()
        serve(served, stop)
    return EXIT_OK
