"""Exporter benchmark: Kubernetes API requests per node per minute to learn which pods ended, per-pull LIST vs watch.

Usage (from the repository root, with the project's virtual environment)::

    .venv/bin/python bench/exporter_api_requests.py [--nodes 20] [--minutes 30] [--interval 10]
        [--watch-timeout 300] [--pods 8] [--churn 2] [--scale 0.01] [--history-limit 100000] [--seed 42]
        [--record FILE]

Set-up: one in-memory cluster (``adapters.memory.cluster``) and, per simulated node, the exporter's pod view as it
runs in production (``services.exporter.podphases.EndedPods``: its informer thread, one LIST with
``spec.nodeName=<node>``, then WATCHes of ``--watch-timeout`` simulated seconds). The cluster counts every pod
LIST and WATCH it answers. Time is compressed: one simulated second lasts ``--scale`` real seconds (the
pull interval is paced in real time, and each WATCH's ``timeout_seconds`` is scaled the same way). The in-memory
API sends no BOOKMARK, so a quiet node's watch could only resume within its change history: ``--history-limit``
(default 100,000 changes) stands in for kube-apiserver's bookmarks; a smaller one shows the relists a 410 Gone
costs.

Each node starts with ``--pods`` running pods; every pull interval (``--interval`` simulated seconds, the
exporter's default 10) each node starts new pods at ``--churn`` per minute (created, bound, Running), pods end
after a lifetime drawn uniformly from 1 to 9 minutes (Succeeded, one in ten Failed), are deleted 30 s after they
ended, and leave the Runtime's data 60 s after they ended (the device plugin's release). Half an interval after the
churn, each node pulls: the Runtime's data (the UIDs it still holds) goes to the watch-based ``EndedPods.update``,
and to the rule it replaced — one LIST per pull, then ``domain.exporter.liveness.ended_uids`` — counted apart.

Prints, per node and per simulated minute, the LIST and WATCH requests of each rule, and how the two rules'
answers compared at each pull: ``dropped_early`` (the watch rule ended a pod the per-pull listing shows running;
must be 0) and ``ended_later`` (the per-pull listing already showed the end, the watch view had not delivered it
yet). The last lines are ``key=value`` figures; ``--record FILE`` writes them as this invocation's row of the
performance table (:func:`adapters.reportfiles.results_table.record_bench_run`). When the machine cannot keep the
pace (the wall time printed exceeds the planned one), raise ``--scale``.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import attrs

from adapters.memory.cluster import InMemoryCluster
from adapters.reportfiles.results_table import RunStart, record_bench_run
from domain.exporter.liveness import ended_uids
from domain.kube.objects import ContainerSpec, Listing, PodObject, PodPhase, WatchEvent
from services.exporter.podphases import EndedPods

LIFETIME_MIN_S, LIFETIME_MAX_S = 60.0, 540.0
DELETE_AFTER_S = 30.0
RELEASE_AFTER_S = 60.0


class CountingCluster(InMemoryCluster):
    """The in-memory API with the pod LIST and WATCH requests counted in :attr:`requests`, each WATCH lasting
    ``timeout_seconds`` simulated seconds (``scale`` real seconds each). :meth:`list_pods_for_old_rule` lists
    without counting here: the per-pull rule counts its own. Thread-safe."""

    def __init__(self, *, scale: float, history_limit: int) -> None:
        super().__init__(history_limit=history_limit)
        self.scale = scale
        self.requests: Counter[str] = Counter()
        self._counter_lock = threading.Lock()

    def _count(self, verb: str) -> None:
        with self._counter_lock:
            self.requests[verb] += 1

    def list_pods(self, *, field_selector: str = "", label_selector: str = "", namespace: str = ""
                  ) -> Listing[PodObject]:
        """Count one LIST, then list."""
        self._count("list")
        return super().list_pods(field_selector=field_selector, label_selector=label_selector, namespace=namespace)

    def list_pods_for_old_rule(self, field_selector: str) -> Listing[PodObject]:
        """List (the per-pull rule's request, not counted in :attr:`requests`)."""
        return super().list_pods(field_selector=field_selector)

    def watch_pods(self, *, resource_version: str, timeout_seconds: float, field_selector: str = ""
                   ) -> Iterator[WatchEvent[PodObject]]:
        """Count one WATCH, then watch."""
        self._count("watch")
        return super().watch_pods(resource_version=resource_version, timeout_seconds=timeout_seconds * self.scale,
                                  field_selector=field_selector)


@attrs.define
class SimPod:
    name: str
    uid: str
    ends_at: float
    ended_at: float | None = None
    deleted: bool = False


@attrs.define
class SimNode:
    name: str
    view: EndedPods
    pods: list[SimPod] = attrs.field(factory=list)
    started: float = 0.0  # pod starts owed (fractional), carried over between intervals


def start_pod(cluster: InMemoryCluster, node: SimNode, now: float, rng: random.Random, serial: int) -> None:
    name = f"{node.name}-p{serial}"
    created = cluster.create_pod(PodObject("", "bench", name, (ContainerSpec("main"),)))
    cluster.bind_pod("bench", name, uid=created.uid, node=node.name)
    cluster.set_pod_phase("bench", name, PodPhase.RUNNING)
    node.pods.append(SimPod(name, created.uid, now + rng.uniform(LIFETIME_MIN_S, LIFETIME_MAX_S)))


def advance(cluster: InMemoryCluster, node: SimNode, now: float, rng: random.Random) -> None:
    """End, delete and release the node's pods due by ``now`` (simulated seconds)."""
    for pod in node.pods:
        if pod.ended_at is None and pod.ends_at <= now:
            pod.ended_at = now
            cluster.set_pod_phase("bench", pod.name, PodPhase.FAILED if rng.random() < 0.1 else PodPhase.SUCCEEDED)
        elif pod.ended_at is not None and not pod.deleted and now - pod.ended_at >= DELETE_AFTER_S:
            pod.deleted = True
            cluster.delete_pod("bench", pod.name, grace_period_seconds=0)
    node.pods = [p for p in node.pods if p.ended_at is None or now - p.ended_at < RELEASE_AFTER_S]


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20, help="simulated nodes (one exporter pod view each)")
    parser.add_argument("--minutes", type=float, default=30.0, help="simulated minutes")
    parser.add_argument("--interval", type=float, default=10.0, help="pull interval, simulated seconds")
    parser.add_argument("--watch-timeout", type=float, default=300.0, help="one WATCH, simulated seconds")
    parser.add_argument("--pods", type=int, default=8, help="running pods per node at start")
    parser.add_argument("--churn", type=float, default=2.0, help="pods started per node per simulated minute")
    parser.add_argument("--scale", type=float, default=0.01, help="real seconds per simulated second")
    parser.add_argument("--history-limit", type=int, default=100_000,
                        help="pod changes the in-memory API keeps for watches (older: 410 Gone, relist)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--record", type=Path, metavar="FILE", help="write the figures as this run's table row")
    args = parser.parse_args(argv)
    start = RunStart.now()

    rng = random.Random(args.seed)
    cluster = CountingCluster(scale=args.scale, history_limit=args.history_limit)
    old_lists = 0
    nodes = [SimNode(f"node-{i:05d}", EndedPods(cluster, node=f"node-{i:05d}", deadline_s=5.0,
                                                 watch_timeout_s=args.watch_timeout)) for i in range(args.nodes)]
    serial = 0
    for node in nodes:
        for _ in range(args.pods):
            serial += 1
            start_pod(cluster, node, 0.0, rng, serial)
        node.started = rng.random()  # nodes start their pods at different intervals
        node.view.start()
    pulls = int(args.minutes * 60 / args.interval)
    tick_s = args.interval * args.scale
    compared = Counter[str]()
    overruns = 0
    began = time.monotonic()
    try:
        for index in range(pulls):
            now = index * args.interval
            tick = began + index * tick_s
            for node in nodes:
                advance(cluster, node, now, rng)
                node.started += args.churn * args.interval / 60.0
                while node.started >= 1.0:
                    node.started -= 1.0
                    serial += 1
                    start_pod(cluster, node, now, rng, serial)
            pause = tick + tick_s / 2 - time.monotonic()  # the watch's latency budget: half an interval
            if pause > 0:
                time.sleep(pause)
            else:
                overruns += 1
            for node in nodes:
                uids = {pod.uid for pod in node.pods}
                by_watch = node.view.update(uids)
                old_lists += 1
                listing = cluster.list_pods_for_old_rule(f"spec.nodeName={node.name}")
                by_list = ended_uids(uids, listing.items)
                compared["pulls"] += 1
                compared["ended"] += len(by_list)
                compared["dropped_early"] += len(by_watch - by_list)
                compared["ended_later"] += len(by_list - by_watch)
            pause = tick + tick_s - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            else:
                overruns += 1
        wall_s = time.monotonic() - began
        new_counts = Counter(cluster.requests)  # before the closes
        errors = sum(node.view.errors for node in nodes)
    finally:
        closing = [threading.Thread(target=node.view.close) for node in nodes]  # each waits up to 2 s
        for thread in closing:
            thread.start()
        for thread in closing:
            thread.join()

    minutes = pulls * args.interval / 60.0
    per = args.nodes * minutes
    new_lists, new_watches = new_counts["list"], new_counts["watch"]
    old_rate, new_rate = old_lists / per, (new_lists + new_watches) / per
    print("exporter pod view: API requests (in-memory cluster counting pod LIST and WATCH requests)")
    print(f"nodes {args.nodes}, {minutes:g} simulated minutes, pull every {args.interval:g} s, WATCH "
          f"{args.watch_timeout:g} s, {args.pods} pods per node at start, churn {args.churn:g} pods/node/min, "
          f"{serial} pods in all")
    print(f"wall {wall_s:.1f} s for {minutes * 60 * args.scale:.1f} s planned ({overruns} late half-intervals: when "
          "the wall exceeds the plan, each WATCH covers less simulated time and the WATCH rate is overstated)")
    print(f"per-pull LIST (old)  LIST {old_lists / per:.3f}/node/min (60/interval = {60 / args.interval:g})")
    print(f"watch (new)          LIST {new_lists / per:.3f} + WATCH {new_watches / per:.3f} = {new_rate:.3f}/node/min; "
          f"relists beyond the first per node: {new_lists - args.nodes}; failed requests: {errors}")
    print(f"at 5,000 nodes        old {old_rate * 5000 / 60:.1f} requests/s, new {new_rate * 5000 / 60:.2f} "
          "requests/s on the API server")
    print(f"answers at {compared['pulls']} pulls ({compared['ended']} ended-pod sightings by the listing): "
          f"dropped_early {compared['dropped_early']}, ended_later {compared['ended_later']}")
    print(f"old_requests_per_node_minute={old_rate:.3f}")
    print(f"new_requests_per_node_minute={new_rate:.3f}")
    print(f"new_lists_per_node_minute={new_lists / per:.3f}")
    print(f"new_watches_per_node_minute={new_watches / per:.3f}")
    print(f"dropped_early={compared['dropped_early']}")
    print(f"ended_later={compared['ended_later']}")
    if args.record is not None:
        record_bench_run(args.record, __file__, argv,
                         f"{args.nodes} nodes, {minutes:g} simulated min, {compared['pulls']:,} pulls: per-pull LIST "
                         f"{old_rate:.3f} requests/node/min ({old_rate * 5000 / 60:.1f}/s at 5,000 nodes); watch "
                         f"{new_rate:.3f} ({new_lists / per:.3f} LIST + {new_watches / per:.3f} WATCH; "
                         f"{new_rate * 5000 / 60:.1f}/s at 5,000 nodes); dropped_early {compared['dropped_early']}, "
                         f"ended_later {compared['ended_later']}", start)


if __name__ == "__main__":
    main()
