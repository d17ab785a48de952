"""``ljrk controller`` (also ``python -m entrypoints.controller``): argument parsing, then the container.

Command contract::

    ljrk controller [--kubeconfig FILE] [--protocol FILE] [--namespace NS] [--job-image IMG]
                    [--config-daemon-socket PATH] [--max-retries N] [--backoff-base S] [--failed-job-ttl S]
                    [--listen HOST:PORT] [--leader-elect | --no-leader-elect]

Watches Nodes for the enable label of the protocol (``node-label``, default ``lj_runtimekit_enable``): ``true``
runs an enable Job on the node, ``false`` or no label a disable Job; the state is written back to the node's
``runtime-state`` annotation. ``--pod-name``/``--pod-namespace`` (default: ``$POD_NAME``/``$POD_NAMESPACE``, set
from the downward API by the manifest): the replica annotates its own Pod with its protocol fingerprint (key
``annotations.node-protocol``), read by ``ljrk protocol check --kubeconfig``; unset = nothing published.
``--kubeconfig`` absent = the pod's in-cluster service account. ``--namespace``
(default ``kube-system``) is where the Jobs run and, by default, where the leader Lease lives. ``--max-retries``
counts retries after the first failed try (default 4: five tries). Hidden development options: ``--in-memory``,
``--backoff-cap``, ``--job-timeout``, ``--job-deadline``, ``--job-service-account``, ``--lease-namespace``,
``--lease-name``, ``--identity``, ``--lease-duration``, ``--renew-deadline``, ``--retry-period``,
``--watch-timeout-seconds``, ``--resync-seconds``, ``--retry-seconds``, ``--log-level``.

Exit codes: 0 after SIGTERM/SIGINT (informers stopped, Lease released); 2 bad input — command-line syntax,
bad ``--listen``, out-of-range values, unreadable or invalid protocol file — reported as ONE line
``ljrk controller: error: …`` on stderr before anything starts; 1 the cluster connection could not be configured
or the listener could not be bound.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from adapters.protocolfile import ProtocolFileError
from domain.errors import DomainError
from domain.toggle.jobs import DEFAULT_IMAGE, DEFAULT_SOCKET
from entrypoints._shared.cli import Parser as _Parser
from entrypoints._shared.command import EXIT_FAILED, EXIT_OK, EXIT_USAGE, command, failing, serve, shutting_down, start
from entrypoints._shared.httpserver import parse_listen

from .app import ControllerSettings
from .containers import ControllerContainer

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main", "settings_from_args"]


def build_parser(prog: str = "ljrk controller") -> argparse.ArgumentParser:
    """The ``controller`` argument parser (its errors raise :class:`UsageError`)."""
    parser = _Parser(prog=prog, description="Node controller: enables or disables the node Runtime through Jobs "
                     "when a Node's enable label changes, and writes the state back to the Node.")
    hidden = argparse.SUPPRESS
    parser.add_argument("--kubeconfig", type=Path, metavar="FILE", help="kubeconfig (default: in-cluster config)")
    parser.add_argument("--protocol", type=Path, metavar="FILE", help="protocol.yaml (default: embedded defaults)")
    parser.add_argument("--namespace", default="kube-system", metavar="NS",
                        help="namespace of the Jobs and of the leader Lease (default: kube-system)")
    parser.add_argument("--job-image", default=DEFAULT_IMAGE, metavar="IMG",
                        help=f"image of the Jobs, with ljrk on its PATH (default: {DEFAULT_IMAGE})")
    parser.add_argument("--config-daemon-socket", default=DEFAULT_SOCKET, metavar="PATH",
                        help=f"node config daemon socket on the nodes (default: {DEFAULT_SOCKET})")
    parser.add_argument("--max-retries", type=int, default=4, metavar="N",
                        help="retries after a failed first try before the node is marked failed (default: 4)")
    parser.add_argument("--backoff-base", type=float, default=10.0, metavar="S",
                        help="first retry delay in seconds, doubling up to 300 s (hidden --backoff-cap) (default: 10)")
    parser.add_argument("--failed-job-ttl", type=float, default=3600.0, metavar="S",
                        help="seconds a failed Job is kept for debugging (default: 3600)")
    parser.add_argument("--listen", type=parse_listen, default=("0.0.0.0", 8081), metavar="HOST:PORT",
                        help="address of /healthz, /readyz and /metrics (default: :8081)")
    parser.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=True,
                        help="elect a leader over a Lease (default: on)")
    parser.add_argument("--pod-name", default=os.environ.get("POD_NAME", ""), metavar="NAME",
                        help="this replica's Pod, annotated with its protocol fingerprint (default: $POD_NAME)")
    parser.add_argument("--pod-namespace", default=os.environ.get("POD_NAMESPACE", ""), metavar="NS",
                        help="namespace of --pod-name (default: $POD_NAMESPACE)")
    parser.add_argument("--in-memory", action="store_true", help=hidden)
    for name, default in (("backoff-cap", 300.0), ("job-timeout", 60.0), ("job-deadline", 300.0),
                          ("lease-duration", 15.0), ("renew-deadline", 10.0), ("retry-period", 2.0),
                          ("watch-timeout-seconds", 300.0), ("resync-seconds", 600.0), ("retry-seconds", 5.0)):
        parser.add_argument(f"--{name}", type=float, default=default, help=hidden)
    parser.add_argument("--job-service-account", default="", help=hidden)
    parser.add_argument("--lease-namespace", default="", help=hidden)
    parser.add_argument("--lease-name", default="lj-runtimekit-controller", help=hidden)
    parser.add_argument("--identity", default=None, help=hidden)
    parser.add_argument("--log-level", default="INFO", help=hidden)
    return parser


def settings_from_args(args: argparse.Namespace) -> ControllerSettings:
    """Validated settings. Raises :class:`SettingsError`."""
    host, port = args.listen
    return ControllerSettings(
        kubeconfig=args.kubeconfig, protocol_file=args.protocol, namespace=args.namespace, job_image=args.job_image,
        config_daemon_socket=args.config_daemon_socket, job_service_account=args.job_service_account,
        max_retries=args.max_retries, backoff_base=args.backoff_base, backoff_cap=args.backoff_cap,
        failed_job_ttl=args.failed_job_ttl, job_timeout=args.job_timeout, job_deadline=args.job_deadline,
        host=host, port=port, leader_elect=args.leader_elect, lease_namespace=args.lease_namespace,
        lease_name=args.lease_name, identity=args.identity or f"{socket.gethostname()}-{os.getpid()}",
        lease_duration=args.lease_duration, renew_deadline=args.renew_deadline, retry_period=args.retry_period,
        in_memory=args.in_memory, watch_timeout_seconds=args.watch_timeout_seconds,
        resync_seconds=args.resync_seconds, retry_seconds=args.retry_seconds, log_level=args.log_level,
        pod_name=args.pod_name, pod_namespace=args.pod_namespace if args.pod_name else "",
    )


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk controller", stop: threading.Event | None = None
         ) -> int:
    """Run the controller until SIGTERM/SIGINT (or until ``stop`` is set, for tests); returns the exit code
    (module docstring). ``--help`` prints help and returns 0."""
    return command(prog, argv, parser=build_parser(prog), settings=settings_from_args,
                   run=lambda settings: _run(settings, stop))


def _run(settings: ControllerSettings, stop: threading.Event | None) -> int:
    container = ControllerContainer(settings=settings)
    with failing(ProtocolFileError, DomainError, code=EXIT_USAGE):
        container.toggle()
    with shutting_down(container):
        serve(start(container, container.app), stop)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
