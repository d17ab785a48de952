"""Contract of the kubelet pod-resources port (``ports.pod_resources.PodResourcesLister``).

Every case runs four times: ``[memory]`` on :class:`~adapters.memory.podresources.InMemoryPodResources`, ``[grpc]``
on :class:`~adapters.grpc.podresources.GrpcPodResourcesLister` talking over a unix socket to a fake kubelet
pod-resources server (``v1.PodResourcesLister/List`` and ``Get``, in this module), so the wire adds and loses
nothing, ``[grpc-list-only]`` against a fake kubelet that answers ``Get`` with UNIMPLEMENTED (before 1.27) and
``[grpc-gate-off]`` against one that answers UNKNOWN "PodResources API Get method disabled" (1.27-1.33 with the
``KubeletPodResourcesGet`` gate at its default, off), so ``pod_containers`` falls back to ``List``. All are driven
from the same description of what kubelet runs (:class:`KubeletPod`).

Behaviours covered:
- nothing running: an empty tuple;
- a pod with several containers: one row per container, with its namespace, pod and container names; a container
  holding no device is listed with no device IDs; a pod without containers adds no row;
- devices across resources: a container's row holds the device IDs of every resource it holds (ours and foreign),
  and ``gpu_uuids`` names only the GPUs our IDs embed;
- removal: a pod kubelet stops running is gone from the next list, the others stay;
- unreachable kubelet: ``list_containers`` raises :class:`~ports.pod_resources.PodResourcesError` (within the
  client's deadline over gRPC), and the next list after kubelet is back succeeds again;
- one pod (``pod_containers``): exactly that pod's rows, whatever else runs; a pod kubelet does not know (never
  ran, or removed) raises :class:`~ports.pod_resources.PodNotFoundError`; an unreachable kubelet raises
  :class:`~ports.pod_resources.PodResourcesError`;
- ``[grpc]``: ``Get`` is used (``get_supported`` True); ``[grpc-list-only]`` and ``[grpc-gate-off]``: the client
  falls back to ``List`` after the first refused ``Get`` and stays there (``get_supported`` False, the fake counts
  no second ``Get``);
- gRPC only: a client on a socket path nothing serves raises the same error within its deadline;
- DRA claims: a container's row names every claim it uses (``dynamic_resources``: claim namespace and name, any
  driver, with their claim resources and CDI devices on the wire), in ``List`` and in ``Get``; a container using
  none names none.

Row order is not part of the contract (kubelet lists pods in map order), nor is the order of device IDs.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from pathlib import Path

import attrs
import grpc
import pytest

from adapters.grpc._pb.kubelet.podresources.v1 import api_pb2 as pr
from adapters.grpc._pb.kubelet.podresources.v1 import api_pb2_grpc as pr_grpc
from adapters.grpc.client import unix_target
from adapters.grpc.podresources import GrpcPodResourcesLister
from adapters.memory.podresources import InMemoryPodResources
from domain.exporter.attribution import PodContainerDevices
from ports.pod_resources import PodNotFoundError, PodResourcesError, PodResourcesLister

CLIENT_TIMEOUT_S = 1.0

Resources = tuple[tuple[str, tuple[str, ...]], ...]
"""``((resource name, device IDs), ...)`` one container holds."""


@attrs.frozen
class KubeletPod:
    """A pod as kubelet runs it: ``namespace``, ``name``, ``containers`` as ``(container name, resources)`` and
    ``claims``: per container name, the DRA claims it uses as ``(claim namespace, claim name, driver, device)``."""

    namespace: str
    name: str
    containers: tuple[tuple[str, Resources], ...] = ()
    claims: tuple[tuple[str, tuple[tuple[str, str, str, str], ...]], ...] = ()

    def _claims_of(self, container: str) -> tuple[tuple[str, str, str, str], ...]:
        return dict(self.claims).get(container, ())

    def rows(self) -> list[PodContainerDevices]:
        """The domain rows the port must give for this pod."""
        return [PodContainerDevices(self.namespace, self.name, container, [i for _, ids in resources for i in ids],
                                    [(ns, name) for ns, name, _, _ in self._claims_of(container)])
                for container, resources in self.containers]

    def to_pb(self) -> pr.PodResources:
        """The pod in kubelet's ``List`` reply."""
        return pr.PodResources(name=self.name, namespace=self.namespace, containers=[
            pr.ContainerResources(name=container, devices=[
                pr.ContainerDevices(resource_name=resource, device_ids=list(ids)) for resource, ids in resources
            ], dynamic_resources=[
                pr.DynamicResource(claim_name=name, claim_namespace=ns, claim_resources=[pr.ClaimResource(
                    cdi_devices=[pr.CDIDevice(name=f"{driver}/claim={device}")], driver_name=driver,
                    pool_name="node-1", device_name=device)])
                for ns, name, driver, device in self._claims_of(container)
            ]) for container, resources in self.containers
        ])


class FakeKubeletPodResources(pr_grpc.PodResourcesListerServicer):
    """Kubelet's pod-resources ``List`` and ``Get`` over a settable pod list; ``get=False``: ``Get`` UNIMPLEMENTED
    (a kubelet before 1.27); ``gate_off``: ``Get`` refused as kubelet 1.27-1.33 does by default. ``get_calls`` counts
    ``Get`` calls."""

    def __init__(self, *, get: bool = True, gate_off: bool = False) -> None:
        self.pods: list[pr.PodResources] = []
        self.get = get
        self.gate_off = gate_off
        self.get_calls = 0

    def List(self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext) -> pr.ListPodResourcesResponse:  # noqa: N802 (proto RPC name)
        return pr.ListPodResourcesResponse(pod_resources=list(self.pods))

    def Get(self, request: pr.GetPodResourcesRequest, context: grpc.ServicerContext) -> pr.GetPodResourcesResponse:  # noqa: N802 (proto RPC name)
        self.get_calls += 1
        if not self.get:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        if self.gate_off:  # a plain Go error in kubelet's server_v1.go: UNKNOWN on the wire
            context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")
        for pod in self.pods:
            if pod.namespace == request.pod_namespace and pod.name == request.pod_name:
                return pr.GetPodResourcesResponse(pod_resources=pod)
        # kubelet returns a plain Go error here, which gRPC sends as UNKNOWN
        context.abort(grpc.StatusCode.UNKNOWN, f"pod {request.pod_name} in namespace {request.pod_namespace} not found")
        raise AssertionError("unreachable")


class GrpcKubelet:
    """A fake kubelet serving pod-resources on ``socket``; :meth:`stop` and :meth:`start` take it down and up."""

    def __init__(self, socket: Path, *, get: bool = True, gate_off: bool = False) -> None:
        self.socket = socket
        self.servicer = FakeKubeletPodResources(get=get, gate_off=gate_off)
        self._server: grpc.Server | None = None

    def start(self) -> None:
        self.socket.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pr_grpc.add_PodResourcesListerServicer_to_server(self.servicer, server)
        server.add_insecure_port(unix_target(self.socket))
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0).wait()
            self._server = None


@attrs.define
class PodResourcesUnderTest:
    """The port under test plus the levers a test pulls: ``run`` (what kubelet runs), ``down``/``up``."""

    kind: str
    lister: PodResourcesLister
    run: Callable[[Sequence[KubeletPod]], None]
    down: Callable[[], None]
    up: Callable[[], None]
    fake: FakeKubeletPodResources | None = None


def _memory() -> Iterator[PodResourcesUnderTest]:
    memory = InMemoryPodResources()

    def run(pods: Sequence[KubeletPod]) -> None:
        memory.set_containers([row for pod in pods for row in pod.rows()])

    yield PodResourcesUnderTest("memory", memory, run, lambda: memory.fail("kubelet is down"), lambda: memory.fail(""))


def _grpc(kind: str) -> Iterator[PodResourcesUnderTest]:
    directory = Path(tempfile.mkdtemp(prefix="ljrk-pr-", dir="/tmp"))  # unix socket paths are limited to 107 bytes
    kubelet = GrpcKubelet(directory / "kubelet.sock", get=kind != "grpc-list-only", gate_off=kind == "grpc-gate-off")
    kubelet.start()
    client = GrpcPodResourcesLister.connect(kubelet.socket, timeout_s=CLIENT_TIMEOUT_S)

    def run(pods: Sequence[KubeletPod]) -> None:
        kubelet.servicer.pods = [pod.to_pb() for pod in pods]

    try:
        yield PodResourcesUnderTest(kind, client, run, kubelet.stop, kubelet.start,
                                    kubelet.servicer)
    finally:
        client.close()
        kubelet.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(params=["memory", "grpc", "grpc-list-only", "grpc-gate-off"])
def under_test(request: pytest.FixtureRequest) -> Iterator[PodResourcesUnderTest]:
    yield from (_memory() if request.param == "memory" else _grpc(request.param))


def _normalised(rows: Sequence[PodContainerDevices]) -> dict[tuple[str, str, str], list[str]]:
    out: dict[tuple[str, str, str], list[str]] = {}
    for row in rows:
        assert row.key not in out, f"{row.key} listed twice"
        out[row.key] = sorted(row.device_ids)
    return out


GPU_A, GPU_B = "GPU-0a0a0a0a-0000-4000-8000-000000000000", "GPU-0b0b0b0b-0000-4000-8000-000000000000"
TRAINER = KubeletPod("team-a", "trainer", (
    ("main", (("ljrk.io/gpu-core", (f"{GPU_A}::core::0", f"{GPU_A}::core::1")),
              ("ljrk.io/gpu-memory", (f"{GPU_A}::memory::0",)))),
    ("sidecar", ()),
    ("loader", (("example.com/nic", ("nic0",)),)),
))
SERVER = KubeletPod("team-b", "server", (
    ("main", (("ljrk.io/gpu-core", (f"{GPU_B}::core::4",)), ("example.com/nic", ("nic1",)))),
))
EMPTY_POD = KubeletPod("team-b", "no-containers")


def test_nothing_running_lists_nothing(under_test: PodResourcesUnderTest) -> None:
    assert under_test.lister.list_containers() == ()


def test_pod_with_several_containers(under_test: PodResourcesUnderTest) -> None:
    under_test.run([TRAINER, EMPTY_POD])
    rows = under_test.lister.list_containers()
    assert isinstance(rows, tuple)
    assert _normalised(rows) == {
        ("team-a", "trainer", "main"): sorted([f"{GPU_A}::core::0", f"{GPU_A}::core::1", f"{GPU_A}::memory::0"]),
        ("team-a", "trainer", "sidecar"): [],
        ("team-a", "trainer", "loader"): ["nic0"],
    }


def test_devices_across_resources(under_test: PodResourcesUnderTest) -> None:
    under_test.run([TRAINER, SERVER])
    rows = {row.key: row for row in under_test.lister.list_containers()}
    assert sorted(rows[("team-b", "server", "main")].device_ids) == [f"{GPU_B}::core::4", "nic1"]
    assert rows[("team-b", "server", "main")].gpu_uuids == {GPU_B}
    assert rows[("team-a", "trainer", "main")].gpu_uuids == {GPU_A}
    assert rows[("team-a", "trainer", "loader")].gpu_uuids == frozenset()
    assert rows[("team-a", "trainer", "sidecar")].gpu_uuids == frozenset()


def test_removed_pod_is_gone_from_the_next_list(under_test: PodResourcesUnderTest) -> None:
    under_test.run([TRAINER, SERVER])
    assert len(under_test.lister.list_containers()) == 4
    under_test.run([SERVER])
    assert _normalised(under_test.lister.list_containers()) == {
        ("team-b", "server", "main"): sorted([f"{GPU_B}::core::4", "nic1"]),
    }
    under_test.run([])
    assert under_test.lister.list_containers() == ()


def test_unreachable_kubelet_raises_the_port_error_then_recovers(under_test: PodResourcesUnderTest) -> None:
    under_test.run([SERVER])
    under_test.down()
    started = time.monotonic()
    with pytest.raises(PodResourcesError):
        under_test.lister.list_containers()
    assert time.monotonic() - started < CLIENT_TIMEOUT_S + 2
    under_test.up()
    deadline = time.monotonic() + 10  # a gRPC channel backs off before it reconnects
    while True:
        try:
            rows = under_test.lister.list_containers()
            break
        except PodResourcesError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert [row.key for row in rows] == [("team-b", "server", "main")]


def test_grpc_client_on_a_socket_nothing_serves() -> None:
    directory = Path(tempfile.mkdtemp(prefix="ljrk-pr-", dir="/tmp"))
    client = GrpcPodResourcesLister.connect(directory / "nothing.sock", timeout_s=CLIENT_TIMEOUT_S)
    try:
        started = time.monotonic()
        with pytest.raises(PodResourcesError, match="kubelet pod-resources List"):
            client.list_containers()
        assert time.monotonic() - started < CLIENT_TIMEOUT_S + 2
    finally:
        client.close()
        shutil.rmtree(directory, ignore_errors=True)


# ------------------------------------------------------------------------------------------- one pod (Get)
def test_pod_containers_gives_exactly_that_pod(under_test: PodResourcesUnderTest) -> None:
    under_test.run([TRAINER, SERVER])
    assert _normalised(under_test.lister.pod_containers("team-b", "server")) == {
        ("team-b", "server", "main"): sorted([f"{GPU_B}::core::4", "nic1"]),
    }
    assert set(_normalised(under_test.lister.pod_containers("team-a", "trainer"))) == {
        ("team-a", "trainer", "main"), ("team-a", "trainer", "sidecar"), ("team-a", "trainer", "loader"),
    }


def test_pod_containers_of_an_unknown_pod_is_not_found(under_test: PodResourcesUnderTest) -> None:
    under_test.run([TRAINER])
    with pytest.raises(PodNotFoundError, match="not found"):
        under_test.lister.pod_containers("team-b", "server")
    with pytest.raises(PodNotFoundError):
        under_test.lister.pod_containers("team-b", "trainer")  # same name, other namespace
    under_test.run([])
    with pytest.raises(PodNotFoundError):
        under_test.lister.pod_containers("team-a", "trainer")


def test_pod_containers_with_kubelet_down_is_an_error(under_test: PodResourcesUnderTest) -> None:
    under_test.run([SERVER])
    under_test.down()
    with pytest.raises(PodResourcesError) as caught:
        under_test.lister.pod_containers("team-b", "server")
    assert not isinstance(caught.value, PodNotFoundError)
    under_test.up()
    deadline = time.monotonic() + 10  # a gRPC channel backs off before it reconnects: poll the condition
    while True:
        try:
            rows = under_test.lister.pod_containers("team-b", "server")
            break
        except PodResourcesError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert len(rows) == 1


def test_grpc_uses_get_or_falls_back_to_list_once(under_test: PodResourcesUnderTest) -> None:
    if under_test.fake is None:
        pytest.skip("gRPC adapters only")
    assert isinstance(under_test.lister, GrpcPodResourcesLister)
    under_test.run([SERVER])
    for _ in range(2):
        assert len(under_test.lister.pod_containers("team-b", "server")) == 1
    if under_test.kind == "grpc":
        assert (under_test.lister.get_supported, under_test.fake.get_calls) == (True, 2)
    else:
        assert (under_test.lister.get_supported, under_test.fake.get_calls) == (False, 1)


DRA_POD = KubeletPod("team-c", "dra", (("main", ()), ("helper", ()), ("plain", ())), claims=(
    ("main", (("team-c", "gpu-claim", "gpu.lj-runtimekit.io", "gpu-0"),
              ("team-c", "nic-claim", "nic.example.com", "nic-3"))),
    ("helper", (("team-c", "gpu-claim", "gpu.lj-runtimekit.io", "gpu-0"),)),
))


def test_containers_name_the_dra_claims_they_use(under_test: PodResourcesUnderTest) -> None:
    under_test.run([DRA_POD, SERVER])
    rows = {row.key: row for row in under_test.lister.list_containers()}
    assert rows[("team-c", "dra", "main")].claims == (("team-c", "gpu-claim"), ("team-c", "nic-claim"))
    assert rows[("team-c", "dra", "helper")].claims == (("team-c", "gpu-claim"),)
    assert rows[("team-c", "dra", "plain")].claims == ()
    assert rows[("team-b", "server", "main")].claims == ()
    one = {row.key: row.claims for row in under_test.lister.pod_containers("team-c", "dra")}
    assert one[("team-c", "dra", "helper")] == (("team-c", "gpu-claim"),)
