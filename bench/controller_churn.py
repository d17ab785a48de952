"""Node controller under Node churn, over the in-memory cluster with the real informer and worker threads.

Method: the controller is built through its composition root (``ControllerContainer``, in-memory cluster, leader
election off) with every API write counted by a wrapper around the cluster port. ``--nodes`` nodes are created
first: every other one labelled ``true`` and already ``enabled`` (its state annotation set), the rest without the
label (not managed). After the startup sweep, ``--updates`` unrelated Node updates are applied as fast as possible
(other labels, the inventory heartbeat annotation, other annotations — what kubelets, device plugins and people
write all day), then the bench waits until the node informer has seen the last one and the work queue is empty.
Failure case B25 says this must cost no API write and create no Job.

Then ``--flips`` nodes that have no label get ``true``, one at a time: the latency is measured from the return of
the label patch to the return of the controller's ``create_job`` call for that node (both in this process).

Prints a summary and, as its last lines, ``api_writes=<int>``, ``jobs_created=<int>``,
``flip_to_job_p50_ms=<float>`` and ``flip_to_job_p99_ms=<float>``.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from collections import Counter
from typing import Any

import numpy as np
from dependency_injector import providers

from adapters.memory.cluster import InMemoryCluster
from domain.kube.objects import JobObject, NodeObject
from domain.kube.protocol import ProtocolConstants
from domain.toggle.jobs import job_node
from entrypoints.controller.app import ControllerSettings
from entrypoints.controller.containers import ControllerContainer

PROTOCOL = ProtocolConstants()
LABEL, STATE = PROTOCOL.node_label, PROTOCOL.annotations.node_state
WRITES = frozenset({"create_node", "delete_node", "patch_node_metadata", "create_pod", "delete_pod", "set_pod_phase",
                    "patch_pod_annotations", "bind_pod", "create_event", "create_lease", "update_lease",
                    "create_job", "delete_job", "set_job_status"})


class CountingCluster:
    """The cluster port with every write counted by method name; ``create_job`` also timestamped per node."""

    def __init__(self, inner: InMemoryCluster) -> None:
        self.inner = inner
        self.writes: Counter[str] = Counter()
        self.created_at: dict[str, float] = {}
        self.created = threading.Event()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in WRITES:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.writes[name] += 1
            return attr(*args, **kwargs)

        return counted

    def create_job(self, job: JobObject) -> JobObject:
        """Count, create, and note when the Job of each node was created."""
        self.writes["create_job"] += 1
        created = self.inner.create_job(job)
        self.created_at[job_node(created)] = time.perf_counter()
        self.created.set()
        return created


def wait_until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="nodes (half enabled, half not managed)")
    parser.add_argument("--updates", type=int, default=10_000, help="unrelated Node updates")
    parser.add_argument("--flips", type=int, default=200, help="label flips measured for latency")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    if args.flips > args.nodes // 2:
        parser.error("--flips must not exceed the unlabelled nodes (--nodes / 2)")

    memory = InMemoryCluster()
    api = CountingCluster(memory)
    settings = ControllerSettings(in_memory=True, host="127.0.0.1", port=0, leader_elect=False, namespace="ljrk",
                                  watch_timeout_seconds=30.0, log_level="WARNING")
    container = ControllerContainer(settings=settings)
    container.cluster.override(providers.Object(api))
    for i in range(args.nodes):
        if i % 2 == 0:
            memory.create_node(NodeObject(f"node-{i:05d}", labels={LABEL: "true"}, annotations={STATE: "enabled"}))
        else:
            memory.create_node(NodeObject(f"node-{i:05d}"))
    container.init_resources()
    app = container.app()
    controller = app.controller
    app.start()
    try:
        wait_until(lambda: app.synced and len(controller.queue) == 0, 60, "the startup sweep")
        time.sleep(0.2)
        sweep_writes, sweep_reconciles = sum(api.writes.values()), controller.reconciles

        rng = random.Random(args.seed)
        started = time.perf_counter()
        for i in range(args.updates):
            name = f"node-{rng.randrange(args.nodes):05d}"
            kind = i % 3
            if kind == 0:
                memory.patch_node_metadata(name, labels={"topology.kubernetes.io/zone": f"z{i % 7}", "team": str(i)})
            elif kind == 1:
                memory.patch_node_metadata(name, annotations={PROTOCOL.annotations.node_inventory: f"hb-{i}"})
            else:
                memory.patch_node_metadata(name, annotations={"node.alpha.kubernetes.io/ttl": str(i)})
        applied = time.perf_counter() - started
        last_rv = int(memory.resource_version)
        wait_until(lambda: int(app.nodes.resource_version or 0) >= last_rv and len(controller.queue) == 0, 120,
                   "the node informer to catch up")
        time.sleep(0.2)
        churn_writes = sum(api.writes.values()) - sweep_writes
        churn_jobs = api.writes["create_job"]
        churn_reconciles = controller.reconciles - sweep_reconciles

        latencies: list[float] = []
        unlabelled = [f"node-{i:05d}" for i in range(1, args.nodes, 2)]
        for name in rng.sample(unlabelled, args.flips):
            api.created.clear()
            memory.patch_node_metadata(name, labels={LABEL: "true"})
            flipped = time.perf_counter()
            wait_until(lambda name=name: name in api.created_at, 10, f"the Job of {name}")
            latencies.append((api.created_at[name] - flipped) * 1000.0)
    finally:
        app.stop()
        container.shutdown_resources()

    p50, p99 = (float(np.percentile(latencies, q)) for q in (50, 99)) if latencies else (float("nan"),) * 2
    print("node controller churn (in-memory cluster; real informer, worker and HTTP threads; leader election off)")
    print(f"nodes                     {args.nodes} ({(args.nodes + 1) // 2} enabled, {args.nodes // 2} not managed)")
    print(f"startup sweep             {sweep_reconciles} reconciles, {sweep_writes} API writes")
    print(f"unrelated Node updates    {args.updates} applied in {applied:.2f} s; node lists {app.nodes.relists} "
          "(1 = the start-up list only)")
    print(f"  reconciles              {churn_reconciles}")
    print(f"  API writes              {churn_writes}  {dict(api.writes) if churn_writes else ''}".rstrip())
    print(f"  Jobs created            {churn_jobs}")
    print(f"label flip → Job created  {len(latencies)} flips: p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
          f"max {max(latencies, default=float('nan')):.2f} ms")
    print(f"api_writes={churn_writes}")
    print(f"jobs_created={churn_jobs}")
    print(f"flip_to_job_p50_ms={p50:.3f}")
    print(f"flip_to_job_p99_ms={p99:.3f}")


if __name__ == "__main__":
    main()
