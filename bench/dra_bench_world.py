"""The world of ``dra_side_by_side.py``: trace nodes as Node objects with our inventory and ResourceSlices, the
DeviceClasses, the claim-pod stream, and our standalone scheduler as a process.

Units: GPU demand in milli-GPU (1000 = one whole GPU, the trace's ``gpu_milli``); a share claim's ``cores`` in percent
of one GPU (1..100); CPU in millicores, memory in MiB as the trace gives them.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import yaml

from adapters.csvtrace import CsvTraceReader
from domain.dra.build import desired_content
from domain.dra.pool import PoolState
from domain.kube.annotations import encode_inventory
from domain.kube.protocol import ProtocolConstants
from domain.runtime.types import DeviceInfo
from domain.simulation.replay import ReplayConfig, arrival_stream, planned_arrivals, replay
from domain.simulation.workload import TraceNode, TracePod
from domain.units import MILLI_PER_GPU

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
MAX_PODS = "1001"
"""Pod slots per node (the replay's ``TRACE_MAX_PODS``)."""


@attrs.frozen
class ClaimPod:
    """One pod of the stream: ``name``, its trace CPU (milli) and memory (MiB), and its one claim's ask: ``gpus``
    whole GPUs, or (``gpus`` = 0) a share of ``cores`` percent of one GPU."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    cores: int

    @property
    def gpu_milli(self) -> int:
        """GPU demand in milli-GPU as the claim asks it (a share rounded up to whole percent)."""
        return self.gpus * MILLI_PER_GPU or 10 * self.cores


def cluster_nodes(nodes_file: Path, count: int, uniform: int | None, seed: int) -> list[TraceNode]:
    """``count`` nodes: with ``uniform`` G, G GPUs of model G2 on 96 cores / 384 GiB each (the trace's commonest
    node: 549 of its 1,213 GPU nodes are 8 × G2 so); else drawn without replacement (seeded) from the trace's GPU
    node list, renamed ``node-<i>`` in draw order."""
    if uniform is not None:
        return [TraceNode(f"node-{i:04d}", 96000, 393216, uniform, "G2") for i in range(count)]
    listed = sorted(CsvTraceReader().read_nodes(nodes_file), key=lambda n: n.name)
    picked = np.random.default_rng(seed).choice(len(listed), size=min(count, len(listed)), replace=False)
    return [attrs.evolve(listed[int(k)], name=f"node-{i:04d}") for i, k in enumerate(picked)]


def claim_stream(pods_file: Path, nodes: Sequence[TraceNode], load: float, seed: int,
                 max_pods: int | None) -> list[ClaimPod]:
    """The replay's arrival stream for ``nodes`` tuned to ``load`` × their GPU capacity (seeded), pods without
    GPUs left out, model constraints dropped, cut to ``max_pods``."""
    capacity = sum(n.gpus for n in nodes) * MILLI_PER_GPU
    stream = arrival_stream(CsvTraceReader().read_pods(pods_file), capacity_milli=capacity, tune=load,
                            rng=np.random.default_rng(seed))
    out = [_claim_pod(i, p) for i, p in enumerate(p for p in stream if p.num_gpu > 0)]
    return out[:max_pods] if max_pods else out


def replay_allocation(pods_file: Path, nodes: Sequence[TraceNode], load: float, seed: int, policy: str,
                      max_pods: int | None) -> float:
    """GPU allocation (% of capacity) at the end of ``ljrk simulate``'s replay of the same nodes, trace, seed and
    ``load`` under ``policy``, cut where :func:`claim_stream` cuts: the model of the live run. As live, ``gpu_spec``
    is dropped and the CPU-only pods ask nothing (kept, with no CPU or memory, so the stream is the same); shares
    count in milli-GPU, not whole percent."""
    pods = [attrs.evolve(p, gpu_spec=()) if p.num_gpu else attrs.evolve(p, cpu_milli=0, memory_mib=0)
            for p in CsvTraceReader().read_pods(pods_file)]
    config = ReplayConfig(policy, seed, tune=load)
    limit = None
    if max_pods:
        stream, _ = planned_arrivals(nodes, pods, config)
        gpu_positions = [i for i, p in enumerate(stream) if p.num_gpu > 0]
        limit = gpu_positions[max_pods - 1] + 1 if len(gpu_positions) >= max_pods else None
    result = replay(list(nodes), pods, config, limit=limit)
    return 100 * result.used_milli[-1] / (result.total_gpus * MILLI_PER_GPU)


def _claim_pod(number: int, pod: TracePod) -> ClaimPod:
    whole = pod.gpu_milli >= MILLI_PER_GPU
    return ClaimPod(f"p-{number:05d}", pod.cpu_milli, pod.memory_mib, pod.num_gpu if whole else 0,
                    0 if whole else math.ceil(pod.gpu_milli / 10))


def create_nodes(api_client: Any, nodes: Sequence[TraceNode], protocol: ProtocolConstants) -> None:
    """Create each node (inventory annotation; Ready with the trace's cpu / memory and :data:`MAX_PODS` slots through
    the status subresource; not-ready taint removed) and its pool of our driver's ResourceSlices."""
    from kubernetes import client

    from adapters.kubernetes.resourceslices import KubernetesResourceSlices

    core, slices = client.CoreV1Api(api_client), KubernetesResourceSlices(api_client)
    for node in nodes:
        gpus = node.inventory().gpus  # the replay's: memory by model
        inventory = encode_inventory(gpus, heartbeat=time.time(), protocol=protocol.fingerprint())
        core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
            name=node.name, labels={"kubernetes.io/hostname": node.name},
            annotations={protocol.annotations.node_inventory: inventory})))
        allocatable = {"cpu": f"{node.cpu_milli}m", "memory": f"{node.memory_mib}Mi", "pods": MAX_PODS}
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench node, no kubelet"}
        core.patch_node_status(node.name, {"status": {"capacity": allocatable, "allocatable": allocatable,
                                                      "conditions": [ready]}})
        taints = core.read_node(node.name).spec.taints or []
        kept = [t.to_dict() for t in taints if t.key != NOT_READY_TAINT]
        core.patch_node(node.name, {"spec": {"taints": kept or None}})
        pool = PoolState(node=node.name, driver=protocol.dra.driver)
        pool.advance(desired_content([DeviceInfo(g) for g in gpus], protocol=protocol))
        for resource_slice in pool.slices():
            slices.create_resource_slice(resource_slice)


def apply_device_classes(api_client: Any, manifest: Path, protocol: ProtocolConstants) -> None:
    """Create the whole-GPU and GPU-share DeviceClasses of ``manifest`` (the deploy's own)."""
    from kubernetes import client

    wanted = {protocol.dra.device_class_gpu, protocol.dra.device_class_share}
    api = client.ResourceV1Api(api_client)
    for doc in yaml.safe_load_all(manifest.read_text()):
        if doc and doc["metadata"]["name"] in wanted:
            api.create_device_class(doc)


def claim_body(pod: ClaimPod, protocol: ProtocolConstants, share_memory: str) -> dict[str, Any]:
    """The ResourceClaim of ``pod`` (named as the pod): request ``gpu`` of class ``gpu`` with ``count``, or of class
    ``gpu-share`` with capacity ``cores`` and ``memory``."""
    if pod.gpus:
        exactly: dict[str, Any] = {"deviceClassName": protocol.dra.device_class_gpu, "count": pod.gpus}
    else:
        exactly = {"deviceClassName": protocol.dra.device_class_share,
                   "capacity": {"requests": {"cores": str(pod.cores), "memory": share_memory}}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": pod.name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}


def pod_body(pod: ClaimPod, scheduler: str, label: dict[str, str]) -> dict[str, Any]:
    """The Pod of ``pod`` for ``scheduler``: trace CPU and memory as requests, the claim named as the pod."""
    requests = {"cpu": f"{max(pod.cpu_milli, 1)}m", "memory": f"{max(pod.memory_mib, 1)}Mi"}
    container = {"name": "main", "image": "registry.invalid/none:1",
                 "resources": {"requests": requests, "claims": [{"name": "gpu"}]}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod.name, "labels": label},
            "spec": {"schedulerName": scheduler, "containers": [container],
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": pod.name}]}}


def claim_milli(claim: Any) -> int:
    """Milli-GPU a ResourceClaim's allocation holds: per result its ``consumedCapacity`` cores × 10, or a whole GPU."""
    allocation = claim.status.allocation if claim.status else None
    if allocation is None or allocation.devices is None:
        return 0
    total = 0
    for result in allocation.devices.results or ():
        cores = (result.consumed_capacity or {}).get("cores")
        total += 10 * int(cores) if cores is not None else MILLI_PER_GPU
    return total


def protocol_file(workdir: Path, stale_seconds: int) -> Path:
    """A protocol.yaml equal to the deploy's but with ``inventory-stale-seconds`` = ``stale_seconds``."""
    text = (Path(__file__).resolve().parents[1] / "deploy" / "protocol.yaml").read_text()
    lines = [f"inventory-stale-seconds: {stale_seconds}" if line.startswith("inventory-stale-seconds:") else line
             for line in text.splitlines()]
    path = workdir / "protocol.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _die_with_parent() -> None:  # runs in the child between fork and exec
    """``PR_SET_PDEATHSIG`` = SIGKILL: the child dies with the bench even when the bench is killed."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


class OurScheduler:
    """``ljrk scheduler --mode standalone`` as a child process (this interpreter, ``src`` of this tree first)."""

    def __init__(self, kubeconfig: Path, protocol: Path, policy: str, port: int, log: Path, *,
                 bind_workers: int = 16) -> None:
        self.url = f"http://127.0.0.1:{port}"
        src = str(Path(__file__).resolve().parents[1] / "src")
        argv = [sys.executable, "-c", f"import sys; sys.path.insert(0, {src!r}); from entrypoints.cli import main; "
                "sys.exit(main())", "scheduler", "--mode", "standalone", "--listen", f"127.0.0.1:{port}",
                "--kubeconfig", str(kubeconfig), "--protocol", str(protocol), "--policy", policy,
                "--admission-hold", "0", "--identity", "side-by-side", "--bind-workers", str(bind_workers)]
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)

    def metrics(self) -> str:
        """Its ``/metrics`` text."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=5) as response:
            body: bytes = response.read()
        return body.decode()

    def allocated_milli(self) -> float:
        """Sum of ``lj_runtimekit_scheduler_gpu_core_allocated_milli`` over every GPU of its books."""
        return sum(float(line.rsplit(" ", 1)[1]) for line in self.metrics().splitlines()
                   if line.startswith("lj_runtimekit_scheduler_gpu_core_allocated_milli{"))

    def wait_ready(self, timeout: float) -> None:
        """Until ``/readyz`` answers 200. Raises RuntimeError when it exits or ``timeout`` s pass."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"our scheduler exited with {self.process.returncode}; see {self._log.name}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"our scheduler not ready in {timeout:.0f} s; see {self._log.name}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self._log.close()
