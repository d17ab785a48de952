"""``ljrk scheduler`` (also ``python -m entrypoints.scheduler``): argument parsing, then the container.

Command contract::

    ljrk scheduler --mode extender|standalone --listen HOST:PORT [--insecure-listen] [--metrics-listen HOST:PORT]
                   [--kubeconfig FILE] [--protocol FILE] [--policy NAME] [--lease-namespace NS]
                   [--lease-name NAME] [--identity ID] [--mig-strategy static|dynamic] [--gpu-topology-first]

``--listen`` in extender mode must be a loopback address (kube-scheduler, in the same pod, calls the verbs over
loopback; they have no authentication) unless ``--insecure-listen`` is given.
``--metrics-listen``: a second listener with only ``/metrics``, ``/healthz`` and ``/readyz`` (no extender verbs),
so Prometheus can scrape a scheduler whose ``--listen`` is the pod's loopback (the deployment's extender).

``--mig-strategy`` (default ``static``): how MIG instances come to exist, as the node Runtimes' flag of the same
name says — ``static``: pods take free pre-created instances; ``dynamic``: the scheduler chooses profile placements
and the Runtime creates the instance at Allocate. It must match the Runtimes' (a node publishing another strategy
takes no MIG pods).

``--gpu-topology-first``: a pod asking for 2 or more whole GPUs goes only to the nodes where its GPUs are best
connected, and the policy chooses among those (default: topology settles only ties between the policy's best
nodes; docs/topology.md has what each costs in replay).

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

import sys
import threading
from collections.abc import Sequence

from adapters.protocolfile import ProtocolFileError
from domain.errors import DomainError
from domain.kube.annotations import MIG_STRATEGIES
from domain.scheduling.registry import POLICIES
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
from services.scheduler.policies import DEFAULT_POLICY

from .app import MODES, SchedulerSettings
from .containers import SchedulerContainer

__all__ = [
    "CLI",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "build_parser",
    "main",
    "settings_from_args",
]


CLI = cli(
    "ljrk scheduler",
    "GPU-sharing scheduler: a kube-scheduler extender (filter, prioritize, bind) or a standalone loop for "
    "pods with schedulerName lj-runtimekit-scheduler.",
    SchedulerSettings,
    flag("--mode", choices=MODES, required=True, help="extender (beside kube-scheduler) or standalone"),
    flag("--listen", setting=None, type=parse_listen, required=True, metavar="HOST:PORT",
         help="address of the extender verbs, /healthz, /readyz and /metrics"),
    flag("--insecure-listen", action="store_true",
         help="extender mode: allow a --listen address off loopback (the verbs have no authentication)"),
    flag("--metrics-listen", type=parse_listen, default=None, metavar="HOST:PORT",
         help="also serve /metrics, /healthz and /readyz (never the verbs) here, for Prometheus (default: off)"),
    KUBECONFIG,
    PROTOCOL,
    flag("--policy", default=DEFAULT_POLICY, metavar="NAME",
         help=f"default policy (default: {DEFAULT_POLICY}; known: {', '.join(POLICIES)})"),
    flag("--lease-namespace", default="kube-system", help="namespace of the leader Lease"),
    flag("--lease-name", default="lj-runtimekit-scheduler", help="name of the leader Lease"),
    flag("--identity", convert=identity, default=None, help="this replica's Lease identity (default: hostname-pid)"),
    flag("--rank-all-pods", action="store_true",
         help="extender mode: also choose the node of pods without GPU requests (use with a scheduler "
         "configuration without managedResources)"),
    flag("--mig-strategy", choices=MIG_STRATEGIES, default="static",
         help="MIG placement: static (pre-created instances) or dynamic (the Runtime creates them); must match the "
         "node Runtimes' --mig-strategy (default: static)"),
    flag("--admission-hold", setting="admission_hold_seconds", type=float, default=60.0, metavar="SECONDS",
         help="keep a pod off a node while a pod with a confusable GPU request there still waits for its devices "
         "(the device plugin marks it), at most this long; 0 = off (default: 60)"),
    flag("--gpu-topology-first", action="store_true",
         help="a pod asking for 2 or more whole GPUs goes only to the nodes where its GPUs are best connected "
         "(NVLink, then one PCIe root, then one NUMA node, of the nodes reporting a topology), and the policy "
         "chooses among those; default: topology only settles ties between the policy's best nodes"),
    flag("--bind-workers", type=int, default=16, metavar="N",
         help="standalone mode: bind up to N pods at once (claim writes and binding run on N threads while the next "
         "pods are scheduled, as kube-scheduler binds asynchronously); 1..64, 1 = one pod at a time (default: 16)"),
    flag("--no-dra-claims", setting="dra_claims", action="store_false",
         help="do not watch ResourceClaims and ResourceSlices (resource.k8s.io/v1, Kubernetes 1.34+): the books then "
         "do not count DRA allocations of our driver (default: watched where the API server serves that API)"),
    *POD_IDENTITY,
    *REPLICA_HIDDEN,
    *hidden_floats(resync_seconds=300.0, tick_seconds=5.0, assumed_ttl_seconds=60.0, watch_timeout_seconds=30.0),
    flag("--tie-break", default="fixed-order", help=HIDDEN),
    derived=replica,
)
"""The command line (module docstring): program name, ``--help`` description, settings class and flags."""
build_parser, settings_from_args = CLI.parser, CLI.settings_from


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk scheduler", stop: threading.Event | None = None
         ) -> int:
    """Run the scheduler until SIGTERM/SIGINT (or until ``stop`` is set, for tests); returns the exit code
    (module docstring). ``--help`` prints help and returns 0."""
    return CLI.main(argv, prog, lambda settings: _run(settings, stop), errors=(DomainError,))


def _run(settings: SchedulerSettings, stop: threading.Event | None) -> int:
    container = SchedulerContainer(settings=settings)
    with failing(ProtocolFileError, code=EXIT_USAGE):
        container.protocol()
    with shutting_down(container):
        serve(start(container, container.app), stop)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
