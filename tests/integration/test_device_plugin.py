"""The device plugin against a fake kubelet over real unix sockets, with the in-process Runtime behind gRPC.

Covers: serve-before-register and registration of all three resources (version, endpoint, options); device
counts and ID format; an unhealthy GPU marking all its IDs Unhealthy and recovery; B18 (plugin socket deleted and
kubelet restarted 10 times → all three re-register within seconds, no thread or socket leak; a cut ListAndWatch
stream → re-registration with the full list); a Runtime restarted with other GPUs → new device lists; the
inventory annotation heartbeat; GetPreferredAllocation steering.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from dp_world import NAMES, NODE, PROTOCOL, World, make_world, share, share_plan, world_fixture

from adapters.grpc import GrpcRuntimeServer
from domain.device_plugin.devices import parse_device_id
from domain.gpu import Gpu, GpuUuid, Health
from domain.kube.annotations import InventoryRecord, decode_inventory
from domain.units import GiB
from entrypoints.runtime.inprocess import InProcessRuntime
from support.polling import wait_for

GPU, CORE, MEM = NAMES.values()


@pytest.fixture
def world() -> Iterator[World]:
    yield from world_fixture(2)


def test_registers_all_three_resources_serving_first(world: World) -> None:
    assert sorted(world.kubelet.registrations) == sorted(NAMES.values())
    for name in NAMES.values():
        endpoint = world.kubelet.endpoint(name)
        assert endpoint.path.parent == world.plugin_dir
        assert endpoint.options.get_preferred_allocation_available
        assert not endpoint.options.pre_start_required


def test_device_counts_and_ids_embed_the_uuid(world: World) -> None:
    devices = world.kubelet.devices
    assert len(devices[GPU]) == 2
    assert len(devices[CORE]) == 200
    assert len(devices[MEM]) == 32  # 2 x 16 GiB / 1 GiB
    for name, kind in ((GPU, "gpu"), (CORE, "core"), (MEM, "memory")):
        for ident, health in devices[name].items():
            parsed = parse_device_id(ident)
            assert parsed.kind.value == kind
            assert parsed.uuid in {g.uuid for g in world.gpus}
            assert health == "Healthy"
            assert len(ident) <= 63


def test_unhealthy_gpu_marks_all_its_ids_then_recovers(world: World) -> None:
    bad = world.gpus[1].uuid
    world.in_process_runtime.set_health(bad, Health.UNHEALTHY, "XID 79")

    def all_marked(state: str) -> bool:
        return all(
            (h == state) if ident.startswith(bad) else h == "Healthy"
            for name in NAMES.values() for ident, h in world.kubelet.devices[name].items()
        )

    assert world.kubelet.wait_for(lambda: all_marked("Unhealthy"), 3)
    assert len(world.kubelet.devices[CORE]) == 200  # full list every time
    world.in_process_runtime.set_health(bad, Health.HEALTHY)
    assert world.kubelet.wait_for(lambda: all_marked("Healthy"), 3)


def test_runtime_restarted_with_other_gpus_changes_the_device_lists(world: World) -> None:
    """A GPU replaced while the Runtime was down: the device plugin adopts the new inventory when the health
    stream re-opens and ListAndWatch sends lists without the old GPU's IDs and with the new ones."""
    kept, replaced = world.gpus
    newcomer = Gpu(1, GpuUuid("GPU-99999999-1111-2222-3333-444444444444"), "A100", 16 * GiB)
    extra = Gpu(2, GpuUuid("GPU-88888888-1111-2222-3333-444444444444"), "A100", 16 * GiB)
    world.runtime_server.stop()
    world.in_process_runtime = InProcessRuntime([kept, newcomer, extra])
    world.runtime_server = GrpcRuntimeServer(world.root / "rt.sock", world.in_process_runtime)
    world.runtime_server.start()

    def uuids(name: str) -> set[str]:
        return {str(parse_device_id(i).uuid) for i in world.kubelet.devices[name]}

    wanted = {kept.uuid, newcomer.uuid, extra.uuid}
    assert world.kubelet.wait_for(lambda: all(uuids(n) == wanted for n in NAMES.values()), 10)
    assert replaced.uuid not in uuids(CORE)
    assert len(world.kubelet.devices[GPU]) == 3
    assert len(world.kubelet.devices[CORE]) == 300
    key = PROTOCOL.annotations.node_inventory
    assert world.kubelet.wait_for(
        lambda: {g.uuid for g in decode_inventory(world.cluster.get_node(NODE).annotations[key], key=key).gpus}
        == wanted, 5)


def _threads() -> int:
    return threading.active_count()


def test_b18_ten_kubelet_restarts_reregister_without_leaks(world: World) -> None:
    time.sleep(0.3)
    threads_before = _threads()
    for round_ in range(10):
        for path in world.plugin_dir.glob("ljrk-*.sock"):
            path.unlink()
        world.kubelet.restart()
        started = time.monotonic()
        assert world.wait_registered(5), f"round {round_}: not re-registered"
        assert time.monotonic() - started < 3
        assert len(world.kubelet.devices[CORE]) == 200
    world.kubelet.wait_for(  # the last round completes, the old servers' threads end
        lambda: world.app.reregistrations >= 10 and _threads() <= threads_before + 3, 30)
    assert world.app.reregistrations >= 10
    sockets = sorted(p.name for p in world.plugin_dir.iterdir())
    assert sockets == ["kubelet.sock", "ljrk-core.sock", "ljrk-gpu.sock", "ljrk-memory.sock"]
    assert _threads() <= threads_before + 3, [t.name for t in threading.enumerate()]


def test_b18_kubelet_down_between_stop_and_start_no_register_before_our_socket(world: World) -> None:
    """Mirrors test_real_kubelet_restarts.py::test_kubelet_restart: a killed kubelet leaves its dead socket behind,
    and the next kubelet wipes the folder before it listens; a plugin that served (and sent Register) beside the
    dead socket would have its socket deleted under kubelet's dial-back."""
    for _ in range(3):
        count = len(world.kubelet.registrations)
        world.kubelet.restart(down_s=1.5)
        assert world.kubelet.wait_for(lambda c=count: len(world.kubelet.registrations) >= c + 3, 5)
        assert len(world.kubelet.devices[CORE]) == 200
    assert world.kubelet.failed_dials == []


def test_inventory_says_unregistered_while_kubelet_is_down(world: World) -> None:
    key = PROTOCOL.annotations.node_inventory

    def registered() -> bool:
        return decode_inventory(world.cluster.get_node(NODE).annotations[key], key=key).kubelet_registered

    assert world.kubelet.wait_for(registered, 5)
    world.kubelet.stop(remove_socket=False)  # as a killed kubelet: its socket file stays
    try:
        assert world.kubelet.wait_for(lambda: not registered(), 5)
    finally:
        world.kubelet.start()
    assert world.kubelet.wait_for(registered, 5)


def test_b18_plugin_socket_deleted_alone_reserves(world: World) -> None:
    count = len(world.kubelet.registrations)
    (world.plugin_dir / "ljrk-memory.sock").unlink()
    assert world.kubelet.wait_for(lambda: len(world.kubelet.registrations) >= count + 3, 5)
    assert (world.plugin_dir / "ljrk-memory.sock").exists()


def test_b18_cut_list_and_watch_stream_reregisters(world: World) -> None:
    count = len(world.kubelet.registrations)
    world.kubelet.cut_stream(CORE)
    assert world.kubelet.wait_for(lambda: len(world.kubelet.registrations) >= count + 3, 5)
    assert world.kubelet.wait_for(lambda: len(world.kubelet.healthy(CORE)) == 200, 5)


def test_plugin_started_before_kubelet_registers_when_it_appears() -> None:
    world = make_world(1, start_kubelet=False)
    try:
        time.sleep(0.3)
        assert not world.kubelet.registrations
        world.kubelet.start()
        assert world.wait_registered(5)
        assert len(world.kubelet.devices[MEM]) == 16
    finally:
        world.close()


def test_inventory_annotation_with_heartbeat_and_fingerprint(world: World) -> None:
    key = PROTOCOL.annotations.node_inventory

    def inventory() -> InventoryRecord:
        return decode_inventory(world.cluster.get_node(NODE).annotations[key], key=key)

    wait_for(lambda: key in world.cluster.get_node(NODE).annotations)
    first = inventory()
    assert [g.uuid for g in first.gpus] == [g.uuid for g in world.gpus]
    assert first.protocol == PROTOCOL.fingerprint()
    assert world.cluster.get_node(NODE).annotations[PROTOCOL.annotations.node_protocol] == PROTOCOL.fingerprint()
    wait_for(lambda: inventory().heartbeat > first.heartbeat)  # the next heartbeat (0.2 s)
    second = inventory()
    assert second.heartbeat > first.heartbeat
    world.in_process_runtime.set_health(world.gpus[0].uuid, Health.UNHEALTHY)
    wait_for(lambda: inventory().gpus[0].health is Health.UNHEALTHY)
    record = inventory()
    assert record.gpus[0].health is Health.UNHEALTHY


def test_preferred_allocation_steers_to_the_planned_gpu(world: World) -> None:
    world.pod("a", [share("main", core=60, memory=8)], [share_plan("main", 1, core=60, memory_gib=8)])
    free = world.kubelet.healthy(CORE)
    chosen = world.kubelet.preferred(CORE, free, [], 60)
    assert len(chosen) == 60
    assert {parse_device_id(i).uuid for i in chosen} == {world.gpus[1].uuid}
    ids, _ = world.kubelet.admit(CORE, 60)
    assert {parse_device_id(i).uuid for i in ids} == {world.gpus[1].uuid}
