"""The DRA driver on the real node (kubelet_harness.py) with kube-scheduler's DRA allocator: the pieces
test_dra_live.py uses.

- :class:`DraControl`: a kube-scheduler of its own (profile :data:`DRA_SCHEDULER`, no extender: the session
  plane's kube-scheduler calls our extender for the classic GPU resources, which a DRA-served ``gpu: 1`` pod
  asks) and a kube-controller-manager with ``resourceclaim-controller`` (removes finished pods from a claim's
  ``reservedFor``, deallocates and un-finalizes claims) and ``garbagecollector`` (claims the scheduler made for
  extended resources are owned by their pod), both against the real node's plane, stopped with the module.
- :class:`DraNodeStack`: :class:`real_node_world.NodeStack` plus ``ljrk dra-driver`` with the kubelet's
  ``plugins_registry`` and ``plugins`` folders and containerd's CDI folder as seen from the host.
- claims (``resource.k8s.io/v1`` ResourceClaims for the shipped DeviceClasses), pods using them, and what the node
  holds for a claim: its CDI spec file, its checkpoint entry and the Runtime's book (over the Runtime's gRPC);
  for the inputs the kubelet never sends, an allocation written by hand (:meth:`Claims.allocate`, reserved for a
  pod no scheduler serves, :meth:`Claims.holder`) and a gRPC client of the driver's DRA socket in the kubelet's
  place (:meth:`DraNodeStack.dra_plugin`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
from k8s_harness import ControlPlane, find_binary, free_ports, scheduler_configuration
from kubelet_harness import RealNode
from kubernetes import client
from real_node_world import (
    ENV_END,
    PROTOCOL,
    NodeStack,
    Pods,
    Proc,
    cdi_injected,
    container,
    pod_manifest,
    pods_in_new_namespace,
    unique,
)

from adapters.grpc import GrpcNodeRuntime, unix_channel
from adapters.grpc._pb.kubelet.dra.v1 import api_pb2_grpc as dra_grpc
from adapters.grpc.dra_plugin import dra_socket
from domain.gpu import MigMode
from domain.runtime.types import ContainerAllocationRequest, PlannedGpu
from support.polling import eventually

DRA = PROTOCOL.dra
DRA_SCHEDULER = "ljrk-dra-test"
NO_SCHEDULER = "ljrk-no-scheduler"
"""A scheduler name nothing serves: a pod for it stays Pending and never reaches the kubelet."""
REPO = Path(__file__).resolve().parents[2]
DEVICE_CLASSES = REPO / "deploy" / "dra" / "04-deviceclasses.yaml"
CLAIM_CDI_PREFIX = "lj-runtimekit.io-claim-"
GIB = 2**30


class _Binary:
    """A Kubernetes binary as a process (log in ``<logs>/<name>.log``), stopped with SIGTERM."""

    def __init__(self, name: str, argv: list[str], logs: Path) -> None:
        self.log = logs / f"{name}.log"
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", *argv], stdin=subprocess.DEVNULL,
                                          stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self) -> None:
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(15)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(5)


def _healthy(port: int) -> bool:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=context, timeout=2) as reply:
            return bool(reply.read() == b"ok")
    except OSError:
        return False


@contextlib.contextmanager
def dra_control(plane: ControlPlane, workdir: Path) -> Iterator[None]:
    """kube-scheduler (profile :data:`DRA_SCHEDULER`) and kube-controller-manager (module docstring) until exit."""
    logs = workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    config = workdir / "dra-scheduler.json"
    config.write_text(json.dumps(scheduler_configuration(plane.kubeconfig, {"profiles": [
        {"schedulerName": DRA_SCHEDULER}]})))
    sched_port, cm_port = free_ports(2)
    procs = [
        _Binary("kube-scheduler-dra", [str(find_binary(plane.bin_dir, "kube-scheduler")), f"--config={config}",
                                       "--bind-address=127.0.0.1", f"--secure-port={sched_port}",
                                       f"--cert-dir={workdir / 'sched-pki'}"], logs),
        _Binary("kube-controller-manager-dra", [
            str(find_binary(plane.bin_dir, "kube-controller-manager")), f"--kubeconfig={plane.kubeconfig}",
            "--controllers=resourceclaim-controller,garbagecollector", "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={cm_port}", f"--cert-dir={workdir / 'cm-pki'}",
            "--use-service-account-credentials=false"], logs)]
    try:
        for proc, port in zip(procs, (sched_port, cm_port), strict=True):
            eventually(lambda p=proc, n=port: p.popen.poll() is not None or _healthy(n), 60, f"{proc.log.stem} up")
            assert proc.popen.poll() is None, proc.log.read_text()[-3000:]
        yield
    finally:
        for proc in procs:
            proc.stop()


def apply_device_classes(plane: ControlPlane) -> None:
    """Server-side apply of deploy/dra/04-deviceclasses.yaml (kubectl of the venv)."""
    kubectl = Path(sys.executable).parent / "kubectl"
    subprocess.run([str(kubectl), "--kubeconfig", str(plane.kubeconfig), "apply", "--server-side",
                    "--field-manager=lj-runtimekit", "-f", str(DEVICE_CLASSES)], check=True, capture_output=True,
                   text=True, timeout=60)


class DraNodeStack(NodeStack):
    """The Runtime and ``ljrk dra-driver`` on the real node (module docstring)."""

    def start_dra_driver(self, *extra: str) -> Proc:
        """``ljrk dra-driver`` for the node, re-publishing every second (kubelet wipes slices when it starts)."""
        node = self.node
        return self._start("dra-driver", [
            "dra-driver", "--node-name", node.node_name, "--runtime-socket", str(self.runtime_socket),
            "--kubeconfig", str(self.plane.kubeconfig), "--plugins-registry", str(node.plugins_registry_dir),
            "--plugins-dir", str(node.plugins_dir), "--cdi-dir", str(node.cdi_spec_dir), "--resync", "1",
            "--log-level", "INFO", *extra])

    def registrations(self) -> float:
        """How often kubelet told the driver it registered it (lines of the driver's log)."""
        try:
            return float(self.procs["dra-driver"].log.read_text(errors="replace").count("kubelet registered DRA"))
        except OSError:
            return 0.0

    def stop(self, *names: str) -> None:
        """Stop the named components (all when none is named), the driver before the Runtime."""
        if "dra-driver" in self.procs and (not names or "dra-driver" in names):
            self.procs["dra-driver"].stop()
        others = [n for n in names if n != "dra-driver"]
        if others or not names:
            super().stop(*others)

    @contextlib.contextmanager
    def runtime(self) -> Iterator[GrpcNodeRuntime]:
        """A gRPC client of the node's Runtime."""
        runtime = GrpcNodeRuntime.connect(self.runtime_socket)
        try:
            yield runtime
        finally:
            runtime.close()

    def book(self) -> dict[str, str]:
        """The Runtime's allocation records: pod UID (a claim UID for claim grants) → container name."""
        with self.runtime() as runtime:
            return {c.pod_uid: c.container for c in runtime.exporter_data().containers}

    def block_gpus(self, owner: str) -> None:
        """Grant every whole time-shared GPU to ``owner`` (as a device-plugin pod would), behind DRA's back."""
        with self.runtime() as runtime:
            gpus = tuple(PlannedGpu(d.gpu.index, d.gpu.uuid, core_milli=1000) for d in runtime.list_devices()
                         if d.gpu.mig_mode is not MigMode.ENABLED)
            runtime.allocate(ContainerAllocationRequest(owner, "default", owner, "main", gpus))

    def unblock_gpus(self, owner: str) -> None:
        with self.runtime() as runtime:
            runtime.release(owner)

    @contextlib.contextmanager
    def dra_plugin(self) -> Iterator[Any]:
        """A ``DRAPlugin`` (v1) client of the driver's DRA socket (``<plugins>/<driver>/dra.sock``), in the kubelet's
        place."""
        channel = unix_channel(dra_socket(self.node.plugins_dir, DRA.driver))
        try:
            grpc.channel_ready_future(channel).result(timeout=10)
            yield dra_grpc.DRAPluginStub(channel)
        finally:
            channel.close()

    def gpu_uuids(self) -> dict[int, str]:
        """NVML index → UUID of the Runtime's GPUs."""
        with self.runtime() as runtime:
            return {d.gpu.index: str(d.gpu.uuid) for d in runtime.list_devices()}


@contextlib.contextmanager
def dra_stack(node: RealNode, plane: ControlPlane, api: Any, gpus: str,
              hami_library: Path | None = None, runtime_args: Sequence[str] = ()) -> Iterator[DraNodeStack]:
    """The Runtime on ``gpus`` (with ``runtime_args``) and ``ljrk dra-driver``, once kubelet registered the driver
    and the node's slices are published; both stopped and the work folder removed afterwards. ``hami_library``: a
    file the Runtime mounts as HAMi-core's library (``--hami-core-library``), and the driver lets through with the
    Runtime's preload list (``--hami-core-library``, ``--hami-preload-file``)."""
    world = DraNodeStack(node, plane, Path(tempfile.mkdtemp(prefix="ljrk-dra-", dir="/tmp")))
    try:
        if hami_library is None:
            world.start_runtime(gpus, *runtime_args)
            world.start_dra_driver()
        else:
            world.start_runtime(gpus, "--hami-core-library", str(hami_library))
            world.start_dra_driver("--hami-core-library", str(hami_library),
                                   "--hami-preload-file", str(world.workdir / "state" / "ld.so.preload"))
        eventually(lambda: world.registrations() >= 1, 60, f"kubelet registered the driver\n{world.tails()}")
        eventually(lambda: slices(api, node.node_name), 60, "ResourceSlices published")
        yield world
    finally:
        world.stop()
        shutil.rmtree(world.workdir, ignore_errors=True)


@contextlib.contextmanager
def dra_world(node: RealNode, plane: ControlPlane, api: Any, gpus: str, *extra: str,
              hami_library: Path | None = None, runtime_args: Sequence[str] = (),
              scheduler_args: Sequence[str] = ()) -> Iterator[DraNodeStack]:
    """A test module's world: the shipped DeviceClasses applied, :func:`dra_control` and :func:`dra_stack` on
    ``gpus`` (with ``hami_library``, ``runtime_args``), plus the ``extra`` components of the node
    (``device-plugin``, ``scheduler``: ours, standalone, with ``scheduler_args``)."""
    apply_device_classes(plane)
    workdir = Path(tempfile.mkdtemp(prefix="ljrk-dractl-", dir="/tmp"))
    try:
        with dra_control(plane, workdir), dra_stack(node, plane, api, gpus, hami_library, runtime_args) as world:
            if "device-plugin" in extra:
                world.start_device_plugin()
            if "scheduler" in extra:
                world.start_scheduler("standalone", None, *scheduler_args)
            yield world
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def claims_in_new_namespace(api: Any, node: RealNode, world: DraNodeStack) -> Iterator[Claims]:
    """:class:`Claims` in a new namespace; afterwards every pod and claim is deleted and the node is back to holding
    no claim (Runtime book, CDI specs, checkpoint: so the next test finds every GPU free)."""
    held = NodeClaims(node)
    with pods_in_new_namespace(api, node) as pods:
        helper = Claims(api, pods)
        try:
            yield helper
        finally:
            for pod in pods.core.list_namespaced_pod(pods.namespace).items:
                pods.delete(pod.metadata.name, force=True)
            for name in helper.names():
                helper.delete(name)
            eventually(lambda: not helper.names(), 90, "claims deleted (deallocated and un-finalized)")
            eventually(lambda: not world.book() and not held.cdi_uids() and not held.checkpoint(), 60,
                       "no claim left on the node")


def our_pod(claims: Claims, entries: list[dict[str, str]], priority_class: str = "", *,
            linger_s: int = 0) -> str:
    """A pod for our scheduler on the node whose container uses the pod claims ``entries``; ``linger_s``: its
    container ignores SIGTERM and the pod stays Terminating that long when deleted."""
    main = container("main")
    manifest = pod_manifest(unique("sa"), [main], scheduler=PROTOCOL.scheduler_name)
    if priority_class:
        manifest["spec"]["priorityClassName"] = priority_class
    if linger_s:
        main["command"] = ["sh", "-c", f"trap '' TERM; env; echo {ENV_END}; sleep 3600"]
        manifest["spec"]["terminationGracePeriodSeconds"] = linger_s
    manifest["spec"]["resourceClaims"] = entries
    main["resources"]["claims"] = [{"name": e["name"]} for e in entries]
    return claims.pods.create(manifest)


def slices(api: Any, node: str) -> list[Any]:
    """The driver's ResourceSlices of ``node``."""
    selector = f"spec.driver={DRA.driver},spec.nodeName={node}"
    return list(client.ResourceV1Api(api).list_resource_slice(field_selector=selector).items)


# ---------------------------------------------------------------------- claims and pods
class Claims:
    """ResourceClaims and the pods that use them in the namespace of ``pods``."""

    def __init__(self, api: Any, pods: Pods) -> None:
        self.resource = client.ResourceV1Api(api)
        self.pods = pods
        self.namespace = pods.namespace

    def create(self, device_class: str, capacity: Mapping[str, str] | None = None, name: str = "") -> str:
        """A claim of one device of ``device_class``, asking ``capacity`` (consumable capacity) when given."""
        exactly: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": 1}
        if capacity:
            exactly["capacity"] = {"requests": dict(capacity)}
        name = name or unique("claim")
        self.resource.create_namespaced_resource_claim(self.namespace, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}})
        return name

    def get(self, name: str) -> Any:
        return self.resource.read_namespaced_resource_claim(name, self.namespace)

    def uid(self, name: str) -> str:
        return str(self.get(name).metadata.uid)

    def device(self, name: str) -> str:
        """The device the scheduler allocated to claim ``name`` (one result)."""
        (result,) = self.get(name).status.allocation.devices.results
        return str(result.device)

    def delete(self, name: str) -> None:
        with contextlib.suppress(client.ApiException):
            self.resource.delete_namespaced_resource_claim(name, self.namespace)

    def names(self) -> list[str]:
        return [c.metadata.name for c in self.resource.list_namespaced_resource_claim(self.namespace).items]

    def pod(self, claim: str | None, limits: Mapping[str, int | str] | None = None, *, prefix: str = "dra") -> str:
        """Create a pod for :data:`DRA_SCHEDULER` on this node whose container uses ``claim`` (or ``limits``)."""
        main = container("main", limits)
        manifest = pod_manifest(unique(prefix), [main], scheduler=DRA_SCHEDULER)
        manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": self.pods.node.node_name}
        if claim:
            manifest["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
            main["resources"]["claims"] = [{"name": "gpu"}]
        return self.pods.create(manifest)

    def holder(self, claims: Sequence[str]) -> str:
        """A pod using ``claims`` for :data:`NO_SCHEDULER` (Pending, never on the node): the consumer an allocation
        written by :meth:`allocate` is reserved for, so that the resourceclaim controller keeps the reservation."""
        main = container("main")
        manifest = pod_manifest(unique("holder"), [main], scheduler=NO_SCHEDULER)
        manifest["spec"]["resourceClaims"] = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
        main["resources"]["claims"] = [{"name": f"c{i}"} for i in range(len(claims))]
        return self.pods.create(manifest)

    def allocate(self, name: str, results: Sequence[Mapping[str, Any]], pod: str) -> None:
        """Write claim ``name``'s ``status.allocation`` as kube-scheduler does: ``results`` (``devices.results``
        entries, JSON), a node selector for this node, reserved for ``pod`` (an existing pod of the namespace);
        through the status subresource (merge patch). For inputs kube-scheduler never writes."""
        uid = str(self.pods.get(pod).metadata.uid)
        node = self.pods.node.node_name
        selector = {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}
        self.resource.patch_namespaced_resource_claim_status(name, self.namespace, {"status": {
            "allocation": {"devices": {"results": [dict(r) for r in results]}, "nodeSelector": selector},
            "reservedFor": [{"resource": "pods", "name": pod, "uid": uid}]}},
            _content_type="application/merge-patch+json")

    def scheduled_condition(self, pod: str) -> Any:
        """The pod's ``PodScheduled`` condition (None before the scheduler looked at it)."""
        conditions = self.pods.get(pod).status.conditions or ()
        return next((c for c in conditions if c.type == "PodScheduled"), None)

    def events(self, pod: str) -> list[str]:
        """``reason: message`` of the events about pod ``pod``."""
        items = self.pods.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={pod}")
        return [f"{e.reason}: {e.message}" for e in items.items]


class NodeClaims:
    """What the node holds for claims: CDI spec files and the plugin's checkpoint."""

    def __init__(self, node: RealNode) -> None:
        self.node = node

    def cdi_spec(self, uid: str) -> Path:
        return self.node.cdi_spec_dir / f"{CLAIM_CDI_PREFIX}{uid}.json"

    def cdi_uids(self) -> set[str]:
        """UIDs of the claims that have a CDI spec file."""
        names = (p.name for p in self.node.cdi_spec_dir.glob(f"{CLAIM_CDI_PREFIX}*.json"))
        return {n.removeprefix(CLAIM_CDI_PREFIX).removesuffix(".json") for n in names}

    def checkpoint(self) -> set[str]:
        """UIDs of the claims in the plugin's checkpoint."""
        path = self.node.plugins_dir / DRA.driver / "checkpoint.json"
        try:
            return set(json.loads(path.read_text())["claims"])
        except FileNotFoundError:
            return set()


def gpu_limits(env: Mapping[str, str]) -> dict[str, str]:
    """The limit variables of GPU 0 a container printed (NVIDIA_VISIBLE_DEVICES, LJRK_* of GPU 0, HAMi-core's),
    and as ``CDI`` the GPU UUIDs of the claim's CDI devices containerd injected (their ``LJRK_CDI_DEVICE_<i>``)."""
    keys = ("NVIDIA_VISIBLE_DEVICES", "LJRK_POD_UID", "LJRK_CONTAINER_NAME", "LJRK_CORE_MILLI_0",
            "LJRK_MEMORY_LIMIT_BYTES_0", "CUDA_DEVICE_SM_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_0")
    return {**{k: env.get(k, "") for k in keys}, "CDI": ",".join(sorted(cdi_injected(env)))}


def expected_limits(uuid: str, claim_uid: str, core_milli: int, memory_bytes: int) -> dict[str, str]:
    """What :func:`gpu_limits` must read for a claim granted ``core_milli`` and ``memory_bytes`` of GPU ``uuid``."""
    return {"NVIDIA_VISIBLE_DEVICES": uuid, "CDI": uuid, "LJRK_POD_UID": claim_uid, "LJRK_CONTAINER_NAME": "dra-claim",
            "LJRK_CORE_MILLI_0": str(core_milli), "LJRK_MEMORY_LIMIT_BYTES_0": str(memory_bytes),
            "CUDA_DEVICE_SM_LIMIT": str(core_milli // 10),
            "CUDA_DEVICE_MEMORY_LIMIT_0": f"{memory_bytes // 2**20}m"}
