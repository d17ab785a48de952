"""``ljrk controller`` (also ``python -m entrypoints.controller``): argument parsing, then the container.

Command contract::

    ljrk controller [--kubeconfig FILE] [--protocol FILE] [--namespace NS] [--lease-namespace NS]
                    [--job-image IMG] [--config-daemon-socket PATH] [--max-retries N] [--backoff-base S]
                    [--failed-job-ttl S] [--listen HOST:PORT] [--leader-elect | --no-leader-elect]

Watches Nodes for the enable label of the protocol (``node-label``, default ``lj_runtimekit_enable``): ``true``
runs an enable Job on the node, ``false`` or no label a disable Job; the state is written back to the node's
``runtime-state`` annotation. ``--pod-name``/``--pod-namespace`` (default: ``$POD_NAME``/``$POD_NAMESPACE``, set
from the downward API by the manifest): the replica annotates its own Pod with its protocol fingerprint (key
``annotations.node-protocol``), read by ``ljrk protocol check --kubeconfig``; unset = nothing published.
``--kubeconfig`` absent = the pod's in-cluster service account. ``--namespace`` (default ``kube-system``) is
where the Jobs run; ``--lease-namespace`` where the leader Lease lives (default: the Jobs' namespace;
deploy/controller runs the Jobs in their own namespace and the Lease in the controller's). ``--max-retries`` counts
retries after the first failed try (default 4: five tries). Hidden development options: ``--in-memory``,
``--backoff-cap``, ``--job-timeout``, ``--job-deadline``, ``--job-service-account``, ``--lease-name``,
``--identity``, ``--lease-duration``, ``--renew-deadline``, ``--retry-period``,
``--watch-timeout-seconds``, ``--resync-seconds``, ``--retry-seconds``, ``--log-level``.

Exit codes: 0 after SIGTERM/SIGINT (informers stopped, Lease released); 2 bad input — command-line syntax,
bad ``--listen``, out-of-range values, unreadable or invalid protocol file — reported as ONE line
``ljrk controller: error: …`` on stderr before anything starts; 1 the cluster connection could not be configured
or the listener could not be bound.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence

from adapters.protocolfile import ProtocolFileError
from domain.errors import DomainError
from domain.toggle.jobs import DEFAULT_IMAGE, DEFAULT_SOCKET
from entrypoints._shared.command import EXIT_FAILED, EXIT_OK, EXIT_USAGE, failing, serve, shutting_down, start
from entrypoints._shared.flags import (
    HIDDEN,
    KUBECONFIG,
    POD_IDENTITY,
    PROTOCOL,
    REPLICA_HIDDEN,
    cli,
    flag,
    hidden_floats,
    identity,
    replica,
)
from entrypoints._shared.httpserver import parse_listen

from .app import ControllerSettings
from .containers import ControllerContainer

__all__ = ["CLI", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main", "settings_from_args"]


CLI = cli(
    "ljrk controller",
    "Node controller: enables or disables the node Runtime through Jobs when a Node's enable label changes, "
    "and writes the state back to the Node.",
    ControllerSettings,
    KUBECONFIG,
    PROTOCOL,
    flag("--namespace", default="kube-system", metavar="NS",
         help="namespace of the Jobs (default: kube-system)"),
    flag("--lease-namespace", default="", metavar="NS",
         help="namespace of the leader Lease (default: --namespace)"),
    flag("--job-image", default=DEFAULT_IMAGE, metavar="IMG",
         help=f"image of the Jobs, with ljrk on its PATH (default: {DEFAULT_IMAGE})"),
    flag("--config-daemon-socket", default=DEFAULT_SOCKET, metavar="PATH",
         help=f"node config daemon socket on the nodes (default: {DEFAULT_SOCKET})"),
    flag("--max-retries", type=int, default=4, metavar="N",
         help="retries after a failed first try before the node is marked failed (default: 4)"),
    flag("--backoff-base", type=float, default=10.0, metavar="S",
         help="first retry delay in seconds, doubling up to 300 s (hidden --backoff-cap) (default: 10)"),
    flag("--failed-job-ttl", type=float, default=3600.0, metavar="S",
         help="seconds a failed Job is kept for debugging (default: 3600)"),
    flag("--listen", setting=None, type=parse_listen, default=("0.0.0.0", 8081), metavar="HOST:PORT",
         help="address of /healthz, /readyz and /metrics (default: :8081)"),
    flag("--leader-elect", action=argparse.BooleanOptionalAction, default=True,
         help="elect a leader over a Lease (default: on)"),
    *POD_IDENTITY,
    *REPLICA_HIDDEN,
    *hidden_floats(backoff_cap=300.0, job_timeout=60.0, job_deadline=300.0, watch_timeout_seconds=300.0,
                   resync_seconds=600.0, retry_seconds=5.0),
    flag("--job-service-account", default="", help=HIDDEN),
    flag("--lease-name", default="lj-runtimekit-controller", help=HIDDEN),
    flag("--identity", convert=identity, default=None, help=HIDDEN),
    derived=replica,
)
"""The command line (module docstring): program name, ``--help`` description, settings class and flags."""
build_parser, settings_from_args = CLI.parser, CLI.settings_from


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk controller", stop: threading.Event | None = None
         ) -> int:
    """Run the controller until SIGTERM/SIGINT (or until ``stop`` is set, for tests); returns the exit code
    (module docstring). ``--help`` prints help and returns 0."""
    return CLI.main(argv, prog, lambda settings: _run(settings, stop))


def _run(settings: ControllerSettings, stop: threading.Event | None) -> int:
    container = ControllerContainer(settings=settings)
    with failing(ProtocolFileError, DomainError, code=EXIT_USAGE):
        container.toggle()
    with shutting_down(container):
        serve(start(container, container.app), stop)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
