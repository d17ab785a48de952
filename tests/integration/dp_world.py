"""Test world of the device plugin: GPUs, an in-process Runtime behind a real gRPC unix socket, an in-memory
cluster with pods carrying scheduler plans, the plugin app and a fake kubelet (``fake_kubelet.py``)."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import attrs
from fake_kubelet import FakeKubelet

from adapters.cdifiles import CdiSpecDirectory
from adapters.grpc import GrpcNodeRuntime, GrpcRuntimeServer
from adapters.memory.cdi import StaticHostGpuDevices
from adapters.memory.cluster import InMemoryCluster
from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.device_plugin.device_list import DeviceListStrategies
from domain.device_plugin.pods import resource_names
from domain.device_plugin.response_guard import ResponseAllowList
from domain.gpu import Gpu, GpuUuid
from domain.kube.annotations import encode_plan
from domain.kube.objects import ContainerSpec, NodeObject, PodObject
from domain.kube.protocol import ProtocolConstants
from domain.mig.gpu import PlacementMode
from domain.runtime.edits import ContainerEdits
from domain.runtime.types import ContainerAllocationRequest, ContainerAllocationResponse
from entrypoints.device_plugin.app import DevicePluginApp
from entrypoints.runtime.inprocess import InProcessRuntime
from ports.runtime import NodeRuntime
from services.device_plugin.cdi import CdiPublisher
from services.device_plugin.reconciler import RecordReconciler
from services.device_plugin.service import DevicePluginService

GIB = 2**30
NODE = "n1"
PROTOCOL = ProtocolConstants()
NAMES = resource_names(PROTOCOL)


def gpus(count: int, memory_gib: int = 16) -> list[Gpu]:
    """``count`` GPUs with distinct UUIDs."""
    return [Gpu(i, GpuUuid(f"GPU-{i:08d}-1111-2222-3333-444444444444"), "A100", memory_gib * GIB) for i in range(count)]


class RecordingRuntime:
    """A NodeRuntime that records every Allocate request before delegating (the interaction is the contract)."""

    def __init__(self, inner: NodeRuntime) -> None:
        self.inner = inner
        self.requests: list[ContainerAllocationRequest] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def allocate(self, request: ContainerAllocationRequest) -> ContainerAllocationResponse:
        """Record, then delegate."""
        self.requests.append(request)
        return self.inner.allocate(request)


@attrs.define
class World:
    """Everything one test needs; :meth:`close` tears it all down."""

    root: Path
    gpus: list[Gpu]
    in_process_runtime: InProcessRuntime
    runtime_server: GrpcRuntimeServer
    client: GrpcNodeRuntime
    runtime: RecordingRuntime
    cluster: InMemoryCluster
    service: DevicePluginService
    app: DevicePluginApp
    kubelet: FakeKubelet
    stop: threading.Event
    thread: threading.Thread

    @property
    def plugin_dir(self) -> Path:
        """The device-plugin directory."""
        return self.root / "dp"

    def wait_registered(self, timeout: float = 5.0) -> bool:
        """All three resources registered and listed."""
        return self.kubelet.wait_for(lambda: all(n in self.kubelet.devices for n in NAMES.values()), timeout)

    def pod(self, name: str, containers: Sequence[ContainerSpec], plan: Sequence[ContainerGrant] | None) -> PodObject:
        """Create, annotate with ``plan`` (when given) and bind a pod on the node; returns it."""
        created = self.cluster.create_pod(PodObject("", "default", name, tuple(containers)))
        if plan is not None:
            text = encode_plan(PodAllocation(created.uid, NODE, tuple(plan)), self.gpus)
            self.cluster.patch_pod_annotations("default", name, {PROTOCOL.annotations.pod_plan: text})
        self.cluster.bind_pod("default", name, uid=created.uid, node=NODE)
        return self.cluster.get_pod("default", name)

    def close(self) -> None:
        """Stop everything."""
        self.stop.set()
        self.thread.join(timeout=10)
        self.kubelet.stop()
        self.client.close()
        self.runtime_server.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def share(name: str, *, core: int | None = None, memory: int | None = None, init: bool = False) -> ContainerSpec:
    """A container asking for ``core`` percent and ``memory`` GiB units."""
    limits = {}
    if core is not None:
        limits[NAMES_CORE] = str(core)
    if memory is not None:
        limits[NAMES_MEMORY] = str(memory)
    return ContainerSpec(name, limits=limits, init=init)


def whole(name: str, count: int) -> ContainerSpec:
    """A container asking for ``count`` whole GPUs."""
    return ContainerSpec(name, limits={PROTOCOL.resources.gpu: str(count)})


NAMES_CORE = PROTOCOL.resources.core
NAMES_MEMORY = PROTOCOL.resources.memory


def share_plan(name: str, gpu: int, *, core: int, memory_gib: int, init: bool = False) -> ContainerGrant:
    """A plan entry: ``core`` percent and ``memory_gib`` GiB on GPU ``gpu``."""
    return ContainerGrant(name, (GpuGrant(gpu, core * 10, memory_gib * GIB),), init=init)


def whole_plan(name: str, indexes: Sequence[int], memory_gib: int = 16) -> ContainerGrant:
    """A whole-GPU plan entry on ``indexes``."""
    return ContainerGrant(name, tuple(GpuGrant(i, 1000, memory_gib * GIB) for i in indexes), whole=True)


def make_world(
    gpu_count: int = 2, *, start_kubelet: bool = True, poll_s: float = 0.05, edits: ContainerEdits | None = None,
    inventory: Sequence[Gpu] | None = None, mig_layouts: Mapping[int, Sequence[tuple[str, int]]] | None = None,
    mig_mode: PlacementMode = PlacementMode.STATIC, allocatable: Mapping[str, str] | None = None,
    release_interval_s: float | None = None, cdi: bool = False, cdi_dir: Path | None = None,
    wrap: Callable[[NodeRuntime], RecordingRuntime] = RecordingRuntime,
    device_list: DeviceListStrategies | None = None,
) -> World:
    """Build and start a world (module docstring); ``edits`` go to the Runtime (device specs, mounts);
    ``inventory`` replaces the ``gpu_count`` default GPUs, ``mig_layouts``/``mig_mode`` shape the Runtime's MIG,
    ``allocatable`` is the node's (for a scheduler on the same cluster); ``release_interval_s`` runs the release
    reconciler over gRPC (None: none); ``cdi`` returns CDI names, writes the spec into ``<root>/cdi`` (simulated
    GPUs: env edits only; ``cdi_dir`` writes it there instead) and makes the kubelet resolve them in ``<root>/cdi``;
    the plugin forwards the mounts and device nodes ``edits`` give; ``wrap`` stands between plugin and Runtime
    client (a hostile Runtime in tests); ``device_list``: the plugin's device-list strategies (None: its default)."""
    root = Path(tempfile.mkdtemp(prefix="ljdp", dir="/tmp"))
    inventory = list(inventory) if inventory is not None else gpus(gpu_count)
    in_process_runtime = InProcessRuntime(inventory, edits=edits, mig_layouts=mig_layouts, mig_mode=mig_mode)
    server = GrpcRuntimeServer(root / "rt.sock", in_process_runtime)
    server.start()
    client = GrpcNodeRuntime.connect(root / "rt.sock")
    client.wait_ready(5)
    runtime = wrap(client)
    cluster = InMemoryCluster()
    cluster.create_node(NodeObject(NODE, allocatable=dict(allocatable or {})))
    publisher = CdiPublisher(CdiSpecDirectory(cdi_dir or root / "cdi"), StaticHostGpuDevices()) if cdi else None
    edits = edits or ContainerEdits()
    allowed = ResponseAllowList(edits.hami_library, edits.preload_file, edits.dev_root, edits.mps_pipe_dir)
    service = DevicePluginService(node=NODE, runtime=runtime, cluster=cluster, protocol=PROTOCOL,
                                  cdi=publisher.resolvable if publisher is not None else None, allowed=allowed,
                                  device_list=device_list)
    reconciler = None if release_interval_s is None else RecordReconciler(
        node=NODE, runtime=client, cluster=cluster, interval_s=release_interval_s)
    app = DevicePluginApp(service, plugin_dir=root / "dp", names=NAMES, heartbeat_s=0.2, poll_s=poll_s,
                          reconciler=reconciler, cdi=publisher)
    kubelet = FakeKubelet(root / "dp", cdi_dir=root / "cdi" if cdi else None)
    if start_kubelet:
        kubelet.start()
    stop = threading.Event()
    thread = threading.Thread(target=app.run, args=(stop,), daemon=True)
    thread.start()
    return World(root, inventory, in_process_runtime, server, client, runtime, cluster, service, app, kubelet, stop,
                 thread)


def world_fixture(
    gpu_count: int = 2, *, edits: ContainerEdits | None = None, release_interval_s: float | None = None
) -> Iterator[World]:
    """Generator body for pytest fixtures."""
    world = make_world(gpu_count, edits=edits, release_interval_s=release_interval_s)
    try:
        assert world.wait_registered(), "plugin did not register all three resources"
        yield world
    finally:
        world.close()
