"""Device plugin latency benchmark: kubelet-style Allocate round trip, and health change → ListAndWatch update.

Usage (from the repository root, with the project's virtual environment)::

    .venv/bin/python bench/allocate_latency.py [--iterations 500] [--background-pods 100] [--health-flips 20]
        [--runtime reference|in-process] [--resident-containers 100] [--health-hold 0] [--record FILE]

Set-up, all in one process but every hop over a real unix socket: the node Runtime served by
``GrpcRuntimeServer`` and reached by ``GrpcNodeRuntime`` — by default the reference Runtime (``RuntimeService``
over simulated GPUs, persisting every allocation to its state file and journal in a temporary directory, with
``--resident-containers`` allocations already recorded, as on a busy node), or the in-process one (the same
service with an in-memory state store and synchronous health, ``entrypoints.runtime.inprocess``); the device
plugin's per-resource servers (``KubeletPluginServer`` over ``DevicePluginService``) on their own sockets; a
kubelet-side gRPC client calling them as kubelet does. The cluster is the in-memory ClusterApi holding
``--background-pods`` running pods on the node (the Allocate path lists the node's pods on every call). Two GPUs
of 16 GiB.

Measured:

* **Allocate round trip**: per iteration a fresh pod (core=30 %, memory=2 GiB, planned on GPU1) is created
  outside the timing; then kubelet's two calls are timed: the core Allocate (pod lookup + plan + the one Runtime
  Allocate) and the memory Allocate (pod lookup, cached response). Target p99 ≤ 5 ms.
* **Health update**: the Runtime flips GPU0's health; the time until the open ListAndWatch stream of the core
  resource delivers a list showing the new health. Target ≤ 1 s. The reference Runtime holds a recovered GPU
  unhealthy until ``--health-hold`` seconds pass without a fault (flap damping; 30 s in production); the bench
  sets it to 0 by default, so each recovery is reported at the pump's next round and both directions time the
  path itself (with a hold above 5 s every recovery would time out and print ``inf``).

The last lines are ``allocate_p99_ms=<float>`` (over both calls) and ``health_update_ms=<float>`` (the maximum).
``--record FILE`` writes them as this invocation's row of the performance table
(:func:`adapters.reportfiles.results_table.record_bench_run`).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from adapters.grpc import GrpcNodeRuntime, GrpcRuntimeServer, KubeletPluginServer
from adapters.grpc._pb.kubelet.deviceplugin.v1beta1 import api_pb2 as dp
from adapters.grpc._pb.kubelet.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from adapters.memory.cluster import InMemoryCluster
from adapters.reportfiles.results_table import RunStart, record_bench_run
from adapters.simulated import SimulatedGpuBackend
from adapters.statefile import JsonRuntimeStateStore
from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.device_plugin.devices import ResourceKind
from domain.gpu import Gpu, GpuUuid, Health
from domain.kube.annotations import encode_plan
from domain.kube.objects import ContainerSpec, NodeObject, PodObject, PodPhase
from domain.kube.protocol import ProtocolConstants
from domain.runtime.types import ContainerAllocationRequest, PlannedGpu
from entrypoints.runtime.inprocess import InProcessRuntime
from services.device_plugin.service import DevicePluginService
from services.runtime.service import RuntimeService

GIB = 2**30
NODE = "bench-node"


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print the figures (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--background-pods", type=int, default=100)
    parser.add_argument("--health-flips", type=int, default=20)
    parser.add_argument("--runtime", choices=["reference", "in-process"], default="reference",
                        help="node Runtime behind the socket (default: reference, with its state file)")
    parser.add_argument("--resident-containers", type=int, default=100,
                        help="allocations the reference Runtime already holds (default: 100)")
    parser.add_argument("--health-hold", type=float, default=0.0,
                        help="the reference Runtime's recovery hold in seconds (default: 0; production: 30)")
    parser.add_argument("--record", type=Path, metavar="FILE", help="write the figures as this run's table row")
    args = parser.parse_args(argv)
    start = RunStart.now()

    root = Path(tempfile.mkdtemp(prefix="ljbench", dir="/tmp"))
    protocol = ProtocolConstants()
    names = protocol.resources
    gpus = [Gpu(i, GpuUuid(f"GPU-{i:08d}-bench-0000-0000-000000000000"), "A100", 16 * GIB) for i in range(2)]
    set_health: Callable[[str, Health], object]
    if args.runtime == "in-process":
        in_process = InProcessRuntime(gpus)
        runtime_server = GrpcRuntimeServer(root / "rt.sock", in_process, in_process)
        set_health = lambda uuid, health: in_process.set_health(uuid, health, "bench")  # noqa: E731
        reference = None
    else:
        backend = SimulatedGpuBackend(gpus)
        reference = RuntimeService(backend, JsonRuntimeStateStore.in_dir(root / "state"), health_poll_s=0.02,
                                   health_hold_s=args.health_hold)
        reference.start()
        for n in range(args.resident_containers):
            gpu = gpus[n % len(gpus)]
            reference.allocate(ContainerAllocationRequest(f"resident-{n}", "bg", f"resident-{n}", "main", (
                PlannedGpu(gpu.index, gpu.uuid, core_milli=10, memory_bytes=GIB // 16),)))
        runtime_server = GrpcRuntimeServer(root / "rt.sock", reference, reference)
        set_health = lambda uuid, health: backend.inject_health(uuid, health, "bench")  # noqa: E731
    runtime_server.start()
    client = GrpcNodeRuntime.connect(root / "rt.sock")
    client.wait_ready(5)
    cluster = InMemoryCluster()
    cluster.create_node(NodeObject(NODE))
    for n in range(args.background_pods):
        pod = cluster.create_pod(PodObject("", "bg", f"bg-{n}", (ContainerSpec("c"),)))
        cluster.bind_pod("bg", pod.name, uid=pod.uid, node=NODE)
        cluster.set_pod_phase("bg", pod.name, PodPhase.RUNNING)
    service = DevicePluginService(node=NODE, runtime=client, cluster=cluster, protocol=protocol)
    stop = threading.Event()
    follower = threading.Thread(target=service.follow_health, args=(stop,), daemon=True)
    follower.start()
    servers = {kind: KubeletPluginServer(root / f"{kind.value}.sock", service, kind) for kind in ResourceKind}
    for server in servers.values():
        server.start()
    channels = {kind: grpc.insecure_channel(f"unix:{root / f'{kind.value}.sock'}") for kind in ResourceKind}
    stubs = {kind: dp_grpc.DevicePluginStub(channel) for kind, channel in channels.items()}
    try:
        core_ids = [f"{gpus[0].uuid}::core::{n}" for n in range(30)]  # kubelet's IDs: deliberately GPU0
        mem_ids = [f"{gpus[0].uuid}::memory::{n}" for n in range(2)]
        first: list[float] = []
        second: list[float] = []
        for n in range(args.iterations):
            pod = cluster.create_pod(PodObject("", "bench", f"p{n}", (ContainerSpec(
                "main", limits={names.core: "30", names.memory: "2"}),)))
            plan = PodAllocation(pod.uid, NODE, (ContainerGrant("main", (GpuGrant(1, 300, 2 * GIB),)),))
            cluster.patch_pod_annotations("bench", pod.name, {protocol.annotations.pod_plan: encode_plan(plan, gpus)})
            cluster.bind_pod("bench", pod.name, uid=pod.uid, node=NODE)
            for kind, ids, sink in ((ResourceKind.CORE, core_ids, first), (ResourceKind.MEMORY, mem_ids, second)):
                started = time.perf_counter()
                reply = stubs[kind].Allocate(dp.AllocateRequest(
                    container_requests=[dp.ContainerAllocateRequest(devices_ids=ids)]), timeout=5)
                sink.append((time.perf_counter() - started) * 1000)
                assert reply.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == gpus[1].uuid
            cluster.delete_pod("bench", pod.name, grace_period_seconds=0)
            client.release(pod.uid)
        both = first + second

        updates: list[tuple[float, str]] = []
        seen = threading.Condition()
        stream = stubs[ResourceKind.CORE].ListAndWatch(dp.Empty())

        def consume() -> None:
            try:
                for message in stream:
                    health = next(d.health for d in message.devices if d.ID.startswith(gpus[0].uuid))
                    with seen:
                        updates.append((time.perf_counter(), health))
                        seen.notify_all()
            except grpc.RpcError:
                pass

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        with seen:
            seen.wait_for(lambda: bool(updates), 5)
        health_ms: list[float] = []
        for flip in range(args.health_flips):
            target = Health.UNHEALTHY if flip % 2 == 0 else Health.HEALTHY
            started = time.perf_counter()
            set_health(gpus[0].uuid, target)
            with seen:
                ok = seen.wait_for(lambda t=target: bool(updates) and updates[-1][1] == t.value, 5)  # type: ignore[misc]
            health_ms.append((time.perf_counter() - started) * 1000 if ok else float("inf"))
        stream.cancel()
        reader.join(5)

        print(f"allocate, first call of a container (pod lookup + plan + Runtime Allocate), n={len(first)}: "
              f"p50={statistics.median(first):.2f} ms p99={percentile(first, 0.99):.2f} ms max={max(first):.2f} ms")
        print(f"allocate, second resource of the container (cached), n={len(second)}: "
              f"p50={statistics.median(second):.2f} ms p99={percentile(second, 0.99):.2f} ms")
        resident = f", resident Runtime records: {args.resident_containers}" if reference is not None else ""
        print(f"allocate, all calls: p99={percentile(both, 0.99):.2f} ms (target <= 5 ms); runtime: {args.runtime}"
              f"{resident}; background pods on the node: {args.background_pods}")
        print(f"health change -> ListAndWatch update, n={len(health_ms)}: p50={statistics.median(health_ms):.1f} ms "
              f"max={max(health_ms):.1f} ms (target <= 1000 ms)")
        print(f"allocate_p99_ms={percentile(both, 0.99):.3f}")
        print(f"health_update_ms={max(health_ms):.3f}")
        if args.record is not None:
            record_bench_run(args.record, __file__, argv,
                             f"{args.runtime} Runtime, {args.iterations} pods: Allocate p99 "
                             f"{percentile(both, 0.99):.2f} ms over both calls (first call p50 "
                             f"{statistics.median(first):.2f} ms); health change → ListAndWatch max "
                             f"{max(health_ms):.1f} ms", start)
    finally:
        stop.set()
        service.close_health()
        follower.join(5)
        for channel in channels.values():
            channel.close()
        for server in servers.values():
            server.stop()
        client.close()
        runtime_server.stop()
        if reference is not None:
            reference.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
