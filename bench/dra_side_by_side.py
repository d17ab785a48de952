"""DRA claims side by side: kube-scheduler's DRA allocator and our standalone scheduler on one control plane.

Method (as kube-scheduler's scheduler_perf DRA workloads: Node objects and ResourceSlices, no kubelet; the pods are
never started):

1. start etcd + kube-apiserver + kube-scheduler of the live version on 127.0.0.1 (``tests/integration/k8s_harness.py``;
   default profile, DRA on by default in 1.37; client QPS ``--kube-scheduler-qps``, burst twice it), and our
   scheduler as a process, ``ljrk scheduler --mode standalone`` (policy ``--policy``, ``--bind-workers``, admission
   hold off: no device plugin marks pods), with a protocol file whose inventory staleness outlasts the run (no
   device plugin refreshes the heartbeat);
2. create ``--nodes`` nodes drawn (seeded) from the openb GPU node list (``--uniform G``: G × G2 GPUs on 96 cores /
   384 GiB, the trace's commonest node): Ready, allocatable cpu / memory of the trace node and 1001 pods (the
   published experiment's slots), no taints; each carries our inventory annotation and our driver's ResourceSlices,
   built from the same GPUs by the domain's slice builder (:func:`domain.dra.build.desired_content`, as
   ``ljrk dra-driver`` publishes them); apply the ``gpu`` and ``gpu-share`` DeviceClasses of
   ``deploy/dra/04-deviceclasses.yaml``;
3. draw the claim pods: the openb pod list's arrival stream tuned to ``--load`` of the cluster's GPU capacity
   (:func:`domain.simulation.replay.arrival_stream`, the replay's own, seeded), pods without GPUs left out and
   ``gpu_spec`` (model constraints) dropped. A share pod gets one claim of class ``gpu-share`` asking
   ``cores`` = ceil(gpu_milli / 10) percent and ``memory`` ``--share-memory``; a k-GPU pod one claim of class ``gpu``
   with ``count: k``; every pod asks its trace CPU and memory;
4. phase A: the stream in a fresh namespace with ``schedulerName: default-scheduler`` (kube-scheduler's DRA
   allocator); each claim is created, then its pod, from ``--create-workers`` threads, as fast as the API server takes
   them (``--rate`` paces the creates instead); a watch records when each pod is first seen bound. The phase ends
   when every pod is bound or no binding came for ``--settle`` s after the last create. Then its pods are deleted
   (grace 0) and its claims deleted with their finalizer removed (no kube-controller-manager deallocates here), and
   the run waits until our scheduler's books hold no GPU again (its ``/metrics``);
5. phase B: the same stream, fresh namespace and claims, ``schedulerName: lj-runtimekit-scheduler``.

Per phase: pods placed (bound), GPU allocation (sum over the bound pods' claims' results: a share its
``consumedCapacity`` cores, a device without it 100 %; as % of the cluster's GPU capacity), pods/s (bound pods ÷
seconds from the first create request to the last binding seen), create→bound latency p50 / p99 (create request to
the watch event with ``spec.nodeName``: the same external measure for both schedulers; when the creates outrun the
scheduler it includes the time the pod queued, so ``--rate`` below both schedulers' pace gives the decision latency
itself). Both rows print in one table, after a line with the replay's model of the same run (``ljrk simulate``'s
replay of the same nodes, trace, seed and load under ``--policy`` and ``dra-first-fit``, the replay's model of
kube-scheduler's DRA placement), so the live rows can be checked against it; ``--record FILE`` writes them as this
invocation's row of the performance table. Without control-plane binaries it says so and exits 0. Not part of the
test run.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from adapters.protocolfile import load_protocol
from domain.kube.protocol import ProtocolConstants
from dra_bench_world import (
    ClaimPod,
    OurScheduler,
    apply_device_classes,
    claim_body,
    claim_milli,
    claim_stream,
    cluster_nodes,
    create_nodes,
    pod_body,
    protocol_file,
    replay_allocation,
)
from extender_throughput import bin_dir, percentile

REPO = Path(__file__).resolve().parents[1]
TRACES = Path("/work/shared/traces/openb")
KUBE_SCHEDULER = "default-scheduler"
FIRST_FIT = "dra-first-fit"
"""The replay's model of kube-scheduler's DRA placement (its node scoring, then first-fit devices)."""


@attrs.define
class Row:
    """One phase's figures: ``offered`` (pods of the stream), ``created`` / ``bound`` (pod name → monotonic s),
    ``milli`` (milli-GPU the bound pods' claims hold), ``capacity`` (the cluster's milli-GPU)."""

    scheduler: str
    offered: int
    created: dict[str, float]
    bound: dict[str, float]
    milli: int
    capacity: int

    @property
    def allocation(self) -> float:
        """GPU allocation ratio, % of capacity."""
        return 100 * self.milli / self.capacity

    @property
    def pods_per_second(self) -> float:
        """Bound pods ÷ s from the first create request to the last binding seen."""
        if not self.bound:
            return 0.0
        return len(self.bound) / (max(self.bound.values()) - min(self.created.values()))

    def latency_ms(self, q: float) -> float:
        """Create→bound latency percentile ``q`` over the bound pods, ms."""
        return percentile([1000 * (self.bound[n] - self.created[n]) for n in self.bound], q)


def run_phase(api_client: Any, stream: Sequence[ClaimPod], scheduler: str, args: argparse.Namespace,
              capacity: int, protocol: ProtocolConstants) -> Row:
    """Create the stream's claims and pods for ``scheduler`` in a fresh namespace, watch the bindings, settle, and
    total the bound pods' claims (module docstring, step 4)."""
    from kubernetes import client, watch

    core, dra = client.CoreV1Api(api_client), client.ResourceV1Api(api_client)
    namespace = f"{'kube' if scheduler == KUBE_SCHEDULER else 'ours'}-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    label = {"ljrk-bench": namespace}
    created: dict[str, float] = {}
    bound: dict[str, float] = {}
    lock = threading.Lock()
    done = threading.Event()
    rv = core.list_namespaced_pod(namespace).metadata.resource_version

    def watch_bindings() -> None:
        nonlocal rv
        stream_ = watch.Watch()
        while not done.is_set():
            for event in stream_.stream(core.list_namespaced_pod, namespace, resource_version=rv, timeout_seconds=5):
                obj = event["object"]
                rv = obj.metadata.resource_version
                if obj.spec.node_name:
                    with lock:
                        bound.setdefault(obj.metadata.name, time.monotonic())
                if done.is_set():
                    stream_.stop()
                    break

    started = time.monotonic()

    def create(worker: int) -> None:
        for i in range(worker, len(stream), args.create_workers):
            pod = stream[i]
            if args.rate > 0:
                time.sleep(max(0.0, started + i / args.rate - time.monotonic()))
            dra.create_namespaced_resource_claim(namespace, claim_body(pod, protocol, args.share_memory))
            with lock:
                created[pod.name] = time.monotonic()
            core.create_namespaced_pod(namespace, pod_body(pod, scheduler, label))

    watcher = threading.Thread(target=watch_bindings, daemon=True)
    watcher.start()
    creators = [threading.Thread(target=create, args=(w,), daemon=True) for w in range(args.create_workers)]
    for thread in creators:
        thread.start()
    for thread in creators:
        thread.join()
    created_all = time.monotonic()
    while True:
        time.sleep(0.5)
        with lock:
            last = max([created_all, *bound.values()])
            count = len(bound)
        now = time.monotonic()
        if count >= len(stream) or now - last > args.settle or now - started > args.timeout:
            break
    done.set()
    with lock:
        bound_at = dict(bound)
    claims = {c.metadata.name: c for c in dra.list_namespaced_resource_claim(namespace).items}
    milli = sum(claim_milli(claims[name]) for name in bound_at if name in claims)
    print(f"{scheduler}: {len(bound_at)} of {len(stream)} pods bound, creates took {created_all - started:.1f} s, "
          f"phase {time.monotonic() - started:.1f} s", flush=True)
    cleanup(core, dra, namespace)
    return Row(scheduler, len(stream), dict(created), bound_at, milli, capacity)


def cleanup(core: Any, dra: Any, namespace: str) -> None:
    """Delete the phase's pods (grace 0) and claims, removing the claims' finalizer (nobody deallocates here)."""
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    for claim in dra.list_namespaced_resource_claim(namespace).items:
        if claim.metadata.finalizers:
            dra.patch_namespaced_resource_claim(claim.metadata.name, namespace, {"metadata": {"finalizers": None}})
    dra.delete_collection_namespaced_resource_claim(namespace)


def wait_empty(ours: OurScheduler, timeout: float = 120.0) -> None:
    """Until our scheduler's books hold no GPU (the previous phase's claims released). Raises RuntimeError."""
    deadline = time.monotonic() + timeout
    while ours.allocated_milli() > 0:
        if time.monotonic() > deadline:
            raise RuntimeError("our scheduler's books still hold GPUs of the previous phase")
        time.sleep(0.5)


def run(binaries: Path, args: argparse.Namespace) -> list[Row]:
    """Start the control plane and our scheduler, build the world, run phase A then B (module docstring)."""
    from k8s_harness import control_plane, free_ports

    nodes = cluster_nodes(args.nodes_file, args.nodes, args.uniform, args.seed)
    stream = claim_stream(args.pods_file, nodes, args.load, args.seed, args.max_pods)
    capacity = 1000 * sum(n.gpus for n in nodes)
    print(f"dra side by side: {len(nodes)} nodes, {capacity // 1000} GPUs, {len(stream)} claim pods "
          f"({sum(p.gpu_milli for p in stream) / capacity:.0%} of GPU capacity; "
          f"{sum(1 for p in stream if not p.gpus)} shares), policy {args.policy}, bind workers {args.bind_workers}, "
          f"kube-scheduler QPS {args.kube_scheduler_qps:g}, rate {args.rate or 'max'}", flush=True)
    model = {p: replay_allocation(args.pods_file, nodes, args.load, args.seed, p, args.max_pods)
             for p in (args.policy, FIRST_FIT)}
    print("replay model of the same nodes, trace, seed and load: "
          + ", ".join(f"{p} {a:.2f} %" for p, a in model.items()), flush=True)
    qps = {"qps": args.kube_scheduler_qps, "burst": int(2 * args.kube_scheduler_qps)}
    with control_plane(binaries, scheduler=True, scheduler_config={"clientConnection": qps}) as plane:
        protocol_path = protocol_file(plane.workdir, math.ceil(4 * args.timeout) + 600)
        protocol = load_protocol(protocol_path)
        with plane.api_client() as api_client:
            setup = time.monotonic()
            apply_device_classes(api_client, REPO / "deploy" / "dra" / "04-deviceclasses.yaml", protocol)
            create_nodes(api_client, nodes, protocol)
            print(f"nodes and slices created in {time.monotonic() - setup:.1f} s", flush=True)
            log = Path(tempfile.gettempdir()) / f"ljrk-dra-side-by-side-{os.getpid()}.log"
            print(f"our scheduler's log: {log}", flush=True)
            ours = OurScheduler(plane.kubeconfig, protocol_path, args.policy, free_ports(1)[0], log,
                                bind_workers=args.bind_workers)
            try:
                ours.wait_ready(120)
                rows = [run_phase(api_client, stream, KUBE_SCHEDULER, args, capacity, protocol)]
                wait_empty(ours)
                rows.append(run_phase(api_client, stream, protocol.scheduler_name, args, capacity, protocol))
            except BaseException:
                print(plane.log_tails(20), file=sys.stderr)
                raise
            finally:
                ours.stop()
    quarantines = log.read_text(errors="replace").count('"node quarantined: impossible books"')
    print(f"our scheduler's log: {quarantines} node quarantines for impossible books", flush=True)
    return rows


def table(rows: Sequence[Row]) -> str:
    """Both rows as a Markdown table."""
    lines = ["| scheduler | pods placed | GPU allocation | pods/s | create→bound p50 / p99 |", "|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row.scheduler} | {len(row.bound)} / {row.offered} | {row.allocation:.2f} % | "
                     f"{row.pods_per_second:.1f} | {row.latency_ms(50):,.0f} / {row.latency_ms(99):,.0f} ms |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags and run the bench (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=100, help="nodes (default: %(default)s; upstream: 500)")
    parser.add_argument("--uniform", type=int, metavar="G", help="G GPUs per node (8 × G2 nodes of the trace) instead")
    parser.add_argument("--pods-file", type=Path, default=TRACES / "openb_pod_list_default.csv")
    parser.add_argument("--nodes-file", type=Path, default=TRACES / "openb_node_list_gpu_node.csv")
    parser.add_argument("--load", type=float, default=1.3, help="GPU demand arriving, × capacity (default: 1.3)")
    parser.add_argument("--max-pods", type=int, help="cut the stream to this many pods (upstream: 5000)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--policy", default="fgd", help="our scheduler's policy (default: %(default)s)")
    parser.add_argument("--share-memory", default="1Gi", help="memory of each share claim (default: 1Gi)")
    parser.add_argument("--create-workers", type=int, default=4)
    parser.add_argument("--rate", type=float, default=0.0, help="pods created per s (0: as fast as possible)")
    parser.add_argument("--settle", type=float, default=15.0, help="s without a binding that end a phase")
    parser.add_argument("--timeout", type=float, default=900.0, help="longest phase, s (default: 900)")
    parser.add_argument("--bind-workers", type=int, default=16,
                        help="our scheduler's --bind-workers: pods bound at once (default: %(default)s)")
    parser.add_argument("--kube-scheduler-qps", type=float, default=50.0, help="(default: 50, its own default)")
    parser.add_argument("--record", type=Path, metavar="FILE", help="write the figures as this run's table row")
    args = parser.parse_args(argv)
    from adapters.reportfiles.results_table import RunStart, record_bench_run

    start = RunStart.now()
    binaries = bin_dir()
    if binaries is None:
        print("SKIPPED: no Kubernetes control-plane binaries; bash scripts/k8s-control-plane.sh install")
        return 0
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    rows = run(binaries, args)
    print()
    print(table(rows))
    kube, ours = rows
    print(f"allocation_gap_pp={ours.allocation - kube.allocation:.2f}")
    print(f"pods_per_second_ratio={ours.pods_per_second / max(kube.pods_per_second, 1e-9):.3f}")
    if args.record is not None:
        record_bench_run(args.record, __file__, argv,
                         "; ".join(f"{r.scheduler} {len(r.bound)}/{r.offered} placed, alloc {r.allocation:.2f} %, "
                                   f"{r.pods_per_second:.1f} pods/s, p99 {r.latency_ms(99):,.0f} ms" for r in rows),
                         start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
