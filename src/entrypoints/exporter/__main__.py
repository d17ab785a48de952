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

import argparse
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from adapters.protocolfile import ProtocolFileError
from domain.runtime.errors import UnsupportedFeatureError
from entrypoints._shared.cli import Parser as _Parser
from entrypoints._shared.cli import UsageError, one_line
from entrypoints._shared.signals import stop_on_signals
from ports.runtime import NodeRuntimeError

from .app import ExporterSettings, SettingsError
from .containers import ExporterContainer

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser(prog: str = "ljrk exporter") -> argparse.ArgumentParser:
    """The ``exporter`` argument parser (its errors raise :class:`UsageError`)."""
    parser = _Parser(prog=prog, description="Prometheus exporter: per-GPU, per-container and per-node metrics "
                     "from the node Runtime, attributed to pods through kubelet's pod-resources API.")
    parser.add_argument("--node-name", required=True, metavar="NAME", help="this node's Kubernetes name")
    parser.add_argument("--runtime-socket", type=Path, required=True, metavar="PATH", help="node Runtime socket")
    parser.add_argument("--listen", required=True, metavar="HOST:PORT", help="HTTP address of /metrics and /healthz")
    parser.add_argument("--pod-resources-socket", type=Path, metavar="PATH",
                        help="kubelet pod-resources socket, e.g. /var/lib/kubelet/pod-resources/kubelet.sock "
                        "(default: none, every Runtime record is reported)")
    parser.add_argument("--kubeconfig", type=Path, metavar="FILE",
                        help="kubeconfig for Events on the node (default: in-cluster config; none: no Events)")
    parser.add_argument("--protocol", type=Path, metavar="FILE",
                        help="protocol.yaml (default: the embedded one); its fingerprint is published on the node")
    parser.add_argument("--interval", type=float, default=10.0, metavar="SECONDS",
                        help="how often the Runtime is pulled (default: 10)")
    parser.add_argument("--deadline", type=float, default=5.0, metavar="SECONDS",
                        help="deadline of one pull (default: 5)")
    parser.add_argument("--runtime-wait", type=float, default=30.0, metavar="SECONDS",
                        help="how long to wait for the node Runtime at start (default: 30)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


def settings_from_args(args: argparse.Namespace) -> ExporterSettings:
    """Validated settings. Raises :class:`SettingsError`."""
    return ExporterSettings(
        node_name=args.node_name, runtime_socket=args.runtime_socket, listen=args.listen,
        pod_resources_socket=args.pod_resources_socket, interval_s=args.interval, deadline_s=args.deadline,
        runtime_wait_s=args.runtime_wait, log_level=args.log_level, kubeconfig=args.kubeconfig,
        protocol_file=args.protocol,
    )


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk exporter",
         stop: threading.Event | None = None) -> int:
    """Run until a signal (or ``stop``, for tests); returns the exit code (module docstring)."""

    def fail(message: object, code: int) -> int:
        print(f"{prog}: error: {one_line(message)}", file=sys.stderr)
        return code

    try:
        settings = settings_from_args(build_parser(prog).parse_args(argv))
    except SystemExit as done:  # --help
        return done.code if isinstance(done.code, int) else EXIT_OK
    except (UsageError, SettingsError) as error:
        return fail(error, EXIT_USAGE)
    container = ExporterContainer(settings=settings)
    container.init_resources()
    try:
        try:
            app = container.app()
        except ProtocolFileError as error:
            return fail(error, EXIT_USAGE)
        except (NodeRuntimeError, UnsupportedFeatureError) as error:
            return fail(f"node Runtime on {settings.runtime_socket}: {error}", EXIT_FAILED)
        try:
            with stop_on_signals(stop) as event:
                app.run(event)
        except OSError as error:
            return fail(f"--listen {settings.listen}: {error}", EXIT_FAILED)
        return EXIT_OK
    finally:
        container.shutdown_resources()


if __name__ == "__main__":
    sys.exit(main())
