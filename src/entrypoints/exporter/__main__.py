"""``ljrk exporter`` (also ``python -m entrypoints.exporter``): Runtime data to Prometheus metrics.

``ljrk exporter --node-name NAME --runtime-socket PATH --listen HOST:PORT [--pod-resources-socket PATH]
[--kubeconfig FILE] [--protocol FILE] [--interval SECONDS] [--deadline SECONDS] [--runtime-wait SECONDS]
[--log-level LEVEL]``

``--kubeconfig`` (else the pod's in-cluster config) lets the detector write Kubernetes Events on the node
(``domain.exporter.detector``); when neither config can be loaded, Events are off (one log line) and the
exporter serves metrics as before.

Serves until SIGTERM or SIGINT. Exit codes: 0 stopped by a signal; 1 cannot run (Runtime unreachable or without
the ``exporter-data`` feature, listener cannot bind); 2 bad command line. Errors are one line
``ljrk exporter: error: …`` on stderr; logs are JSON lines on stderr.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from adapters.protocolfile import ProtocolFileError
from domain.runtime.errors import UnsupportedFeatureError
from entrypoints._shared.command import EXIT_FAILED, EXIT_OK, EXIT_USAGE, failing, serve, shutting_down
from entrypoints._shared.flags import (
    KUBECONFIG,
    LOG_LEVEL,
    NODE_NAME,
    PROTOCOL,
    RUNTIME_SOCKET,
    RUNTIME_WAIT,
    cli,
    flag,
)
from ports.runtime import NodeRuntimeError

from .app import ExporterSettings
from .containers import ExporterContainer

__all__ = ["CLI", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main", "settings_from_args"]


CLI = cli(
    "ljrk exporter",
    "Prometheus exporter: per-GPU, per-container and per-node metrics from the node Runtime, attributed to "
    "pods through kubelet's pod-resources API.",
    ExporterSettings,
    NODE_NAME,
    RUNTIME_SOCKET,
    flag("--listen", required=True, metavar="HOST:PORT", help="HTTP address of /metrics and /healthz"),
    flag("--pod-resources-socket", type=Path, metavar="PATH",
         help="kubelet pod-resources socket, e.g. /var/lib/kubelet/pod-resources/kubelet.sock (default: none, every "
         "Runtime record is reported)"),
    KUBECONFIG.but(help="kubeconfig for Events on the node (default: in-cluster config; none: no Events)"),
    PROTOCOL.but(help="protocol.yaml (default: the embedded one); its fingerprint is published on the node"),
    flag("--interval", setting="interval_s", type=float, default=10.0, metavar="SECONDS",
         help="how often the Runtime is pulled (default: 10)"),
    flag("--deadline", setting="deadline_s", type=float, default=5.0, metavar="SECONDS",
         help="deadline of one pull (default: 5)"),
    RUNTIME_WAIT,
    LOG_LEVEL,
)
"""The command line (module docstring): program name, ``--help`` description, settings class and flags."""
build_parser, settings_from_args = CLI.parser, CLI.settings_from


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk exporter",
         stop: threading.Event | None = None) -> int:
    """Run until a signal (or ``stop``, for tests); returns the exit code (module docstring)."""
    return CLI.main(argv, prog, lambda settings: _run(settings, stop))


def _run(settings: ExporterSettings, stop: threading.Event | None) -> int:
    container = ExporterContainer(settings=settings)
    container.init_resources()
    with shutting_down(container):
        with failing(NodeRuntimeError, UnsupportedFeatureError, code=EXIT_FAILED,
                     prefix=f"node Runtime on {settings.runtime_socket}: "), \
                failing(ProtocolFileError, code=EXIT_USAGE):
            app = container.app()
        with failing(OSError, code=EXIT_FAILED, prefix=f"--listen {settings.listen}: "):
            serve(app, stop)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
