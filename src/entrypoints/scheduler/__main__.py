"""``ljrk scheduler`` (also ``python -m entrypoints.scheduler``): argument parsing, then the container.

Command contract::

    ljrk scheduler --mode extender|standalone --listen HOST:PORT [--metrics-listen HOST:PORT]
                   [--kubeconfig FILE] [--protocol FILE] [--policy NAME] [--lease-namespace NS]
                   [--lease-name NAME] [--identity ID] [--mig-strategy static|dynamic]

``--metrics-listen``: a second listener with only ``/metrics``, ``/healthz`` and ``/readyz`` (no extender verbs),
so Prometheus can scrape a scheduler whose ``--listen`` is the pod's loopback (the deployment's extender).

``--mig-strategy`` (default ``static``): how MIG instances come to exist, as the node Runtimes' flag of the same
name says — ``static``: pods take free pre-created instances; ``dynamic``: the scheduler chooses profile placements
and the Runtime creates the instance at Allocate. It must match the Runtimes' (a node publishing another strategy
takes no MIG pods).

``--pod-name``/``--pod-namespace`` (default: the ``POD_NAME``/``POD_NAMESPACE`` environment variables, which the
manifest sets from the downward API): the replica annotates its own Pod with its protocol fingerprint (key
``annotations.node-protocol`` of the protocol), read by ``ljrk protocol check --kubeconfig``; unset = nothing
published. ``--kubeconfig`` absent = the pod's in-cluster service account. ``--identity`` defaults to
``<hostname>-<pid>``.
Hidden development options: ``--in-memory`` (an empty in-memory cluster instead of an API server),
``--resync-seconds``, ``--tick-seconds``, ``--assumed-ttl-seconds``, ``--watch-timeout-seconds``,
``--lease-duration``, ``--renew-deadline``, ``--retry-period``, ``--tie-break``, ``--log-level``.

Exit codes: 0 after SIGTERM/SIGINT (informers stopped, Lease released); 2 bad input — command-line syntax,
unknown policy, bad ``--listen``, unreadable or invalid protocol file — reported as ONE line
``ljrk scheduler: error: …`` on stderr before anything starts; 1 the cluster connection could not be
configured or the listener could not be bound.
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
from domain.kube.annotations import MIG_STRATEGIES
from domain.scheduling.registry import POLICIES
from entrypoints._shared.cli import Parser as _Parser
from entrypoints._shared.command import EXIT_FAILED, EXIT_OK, EXIT_USAGE, command, failing, serve, shutting_down, start
from entrypoints._shared.httpserver import parse_listen
from services.scheduler.policies import DEFAULT_POLICY

from .app import MODES, SchedulerSettings
from .containers import SchedulerContainer

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "build_parser", "default_identity", "main", "settings_from_args"]


def default_identity() -> str:
    """``<hostname>-<pid>``: unique per replica, stable for the process lifetime."""
    return f"{socket.gethostname()}-{os.getpid()}"


def build_parser(prog: str = "ljrk scheduler") -> argparse.ArgumentParser:
    """The ``scheduler`` argument parser (its errors raise :class:`UsageError`)."""
    parser = _Parser(prog=prog, description="GPU-sharing scheduler: a kube-scheduler extender (filter, prioritize, "
                     "bind) or a standalone loop for pods with schedulerName lj-runtimekit-scheduler.")
    hidden = argparse.SUPPRESS
    parser.add_argument("--mode", choices=MODES, required=True, help="extender (beside kube-scheduler) or standalone")
    parser.add_argument("--listen", type=parse_listen, required=True, metavar="HOST:PORT",
                        help="address of the extender verbs, /healthz, /readyz and /metrics")
    parser.add_argument("--metrics-listen", type=parse_listen, default=None, metavar="HOST:PORT",
                        help="also serve /metrics, /healthz and /readyz (never the verbs) here, for Prometheus "
                             "(default: off)")
    parser.add_argument("--kubeconfig", type=Path, metavar="FILE", help="kubeconfig (default: in-cluster config)")
    parser.add_argument("--protocol", type=Path, metavar="FILE", help="protocol.yaml (default: embedded defaults)")
    parser.add_argument("--policy", default=DEFAULT_POLICY, metavar="NAME",
                        help=f"default policy (default: {DEFAULT_POLICY}; known: {', '.join(POLICIES)})")
    parser.add_argument("--lease-namespace", default="kube-system", help="namespace of the leader Lease")
    parser.add_argument("--lease-name", default="lj-runtimekit-scheduler", help="name of the leader Lease")
    parser.add_argument("--identity", default=None, help="this replica's Lease identity (default: hostname-pid)")
    parser.add_argument("--rank-all-pods", action="store_true",
                        help="extender mode: also choose the node of pods without GPU requests (use with a "
                             "scheduler configuration without managedResources)")
    parser.add_argument("--mig-strategy", choices=MIG_STRATEGIES, default="static",
                        help="MIG placement: static (pre-created instances) or dynamic (the Runtime creates them); "
                             "must match the node Runtimes' --mig-strategy (default: static)")
    parser.add_argument("--admission-hold", type=float, default=60.0, metavar="SECONDS",
                        help="keep a pod off a node while a pod with a confusable GPU request there still waits for "
                             "its devices (the device plugin marks it), at most this long; 0 = off (default: 60)")
    parser.add_argument("--pod-name", default=os.environ.get("POD_NAME", ""), metavar="NAME",
                        help="this replica's Pod, annotated with its protocol fingerprint (default: $POD_NAME)")
    parser.add_argument("--pod-namespace", default=os.environ.get("POD_NAMESPACE", ""), metavar="NS",
                        help="namespace of --pod-name (default: $POD_NAMESPACE)")
    parser.add_argument("--in-memory", action="store_true", help=hidden)
    for name, default in (("resync-seconds", 300.0), ("tick-seconds", 5.0), ("assumed-ttl-seconds", 60.0),
                          ("watch-timeout-seconds", 30.0), ("lease-duration", 15.0), ("renew-deadline", 10.0),
                          ("retry-period", 2.0)):
        parser.add_argument(f"--{name}", type=float, default=default, help=hidden)
    parser.add_argument("--tie-break", default="fixed-order", help=hidden)
    parser.add_argument("--log-level", default="INFO", help=hidden)
    return parser


def settings_from_args(args: argparse.Namespace) -> SchedulerSettings:
    """Validated settings. Raises :class:`SettingsError` or :class:`DomainError` (unknown policy)."""
    host, port = args.listen
    return SchedulerSettings(
        mode=args.mode, host=host, port=port, metrics_listen=args.metrics_listen, kubeconfig=args.kubeconfig,
        protocol_file=args.protocol,
        policy=args.policy, tie_break=args.tie_break, in_memory=args.in_memory,
        lease_namespace=args.lease_namespace, lease_name=args.lease_name, identity=args.identity or default_identity(),
        lease_duration=args.lease_duration, renew_deadline=args.renew_deadline, retry_period=args.retry_period,
        resync_seconds=args.resync_seconds, tick_seconds=args.tick_seconds,
        assumed_ttl_seconds=args.assumed_ttl_seconds, watch_timeout_seconds=args.watch_timeout_seconds,
        log_level=args.log_level, rank_all_pods=args.rank_all_pods, mig_strategy=args.mig_strategy,
        admission_hold_seconds=args.admission_hold, pod_name=args.pod_name,
        pod_namespace=args.pod_namespace if args.pod_name else "",
    )


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk scheduler", stop: threading.Event | None = None
         ) -> int:
    """Run the scheduler until SIGTERM/SIGINT (or until ``stop`` is set, for tests); returns the exit code
    (module docstring). ``--help`` prints help and returns 0."""
    return command(prog, argv, parser=build_parser(prog), settings=settings_from_args,
                   run=lambda settings: _run(settings, stop), errors=(DomainError,))


def _run(settings: SchedulerSettings, stop: threading.Event | None) -> int:
    container = SchedulerContainer(settings=settings)
    with failing(ProtocolFileError, code=EXIT_USAGE):
        container.protocol()
    with shutting_down(container):
        serve(start(container, container.app), stop)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
