"""Health damping of a flapping GPU and the configurable application XIDs.

Behaviours covered:
- a GPU whose backend reports Unhealthy/Healthy five times in 10 s makes the reference Runtime publish one
  Unhealthy and, a quiet period after the last fault, one Healthy; the device plugin following that stream (its
  ListAndWatch generation) changes twice instead of ten times, and ListDevices (what the inventory and the exporter
  read) says Unhealthy, with the reason, until the quiet period has passed;
- the damper itself: Unhealthy at once, a recovery held until ``hold_s`` after the last fault (a fault during the
  hold restarts it), any two Healthy reports more than ``hold_s`` apart, ``hold_s=0`` passes everything, a
  negative hold is refused;
- ``--health-hold`` reaches the Runtime and a bad value is refused naming the flag;
- ``--ignored-xids`` sets which XIDs leave a GPU healthy (default 13, 31, 43, 45, 68, 109); a bad value is
  refused with the flag and the value named.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest

from adapters.memory.cluster import InMemoryCluster
from adapters.memory.runtime_state import InMemoryRuntimeStateStore
from adapters.simulated import SimulatedGpuBackend
from domain.gpu import Gpu, GpuUuid, Health
from domain.kube.protocol import ProtocolConstants
from domain.runtime.damping import HealthDamper
from domain.runtime.health import HealthTracker
from domain.runtime.types import DeviceInfo, HealthChange
from domain.units import GiB
from services.device_plugin.service import DevicePluginService
from services.runtime.service import RuntimeService
from support.kube_builders import Clock
from support.polling import wait_for

A = GpuUuid("GPU-a")
B = GpuUuid("GPU-b")
GPUS = (Gpu(0, A, "A100", 16 * GiB), Gpu(1, B, "A100", 16 * GiB))


def test_flapping_gpu_sends_one_unhealthy_and_one_healthy_update() -> None:
    clock = Clock(1000.0)
    backend = SimulatedGpuBackend(GPUS, clock=clock)
    runtime = RuntimeService(backend, InMemoryRuntimeStateStore(), clock=clock, health_poll_s=0.01)
    plugin = DevicePluginService(node="n1", runtime=runtime, cluster=InMemoryCluster(), protocol=ProtocolConstants())
    updates: list[Health] = []
    stop = threading.Event()
    def on_change() -> None:
        updates.append(plugin.gpus()[0].health)

    follower = threading.Thread(target=plugin.follow_health, args=(stop, on_change), daemon=True)
    runtime.start()
    follower.start()
    try:
        assert wait_for(lambda: runtime.list_devices() and plugin._health_stream is not None)
        for flap in range(5):  # five faults and five recoveries within 10 s
            backend.inject_health(A, Health.UNHEALTHY, f"XID 79 #{flap}")
            clock.now += 1.0
            backend.inject_health(A, Health.HEALTHY, "recovery action: none")
            clock.now += 1.0
        assert wait_for(lambda: len(updates) >= 1)
        time.sleep(0.3)  # let every raw change through the pump
        assert updates == [Health.UNHEALTHY]
        listed = runtime.list_devices()[0]
        assert listed.gpu.health is Health.UNHEALTHY
        assert "XID 79 #0" in listed.health_reason
        assert runtime.exporter_data().gpus[0].device.gpu.health is Health.UNHEALTHY

        last_fault = 1008.0
        clock.now = last_fault + 29.0  # still within the 30 s quiet period
        time.sleep(0.2)
        assert updates == [Health.UNHEALTHY]
        clock.now = last_fault + 30.0
        assert wait_for(lambda: len(updates) >= 2)
        time.sleep(0.2)
        assert updates == [Health.UNHEALTHY, Health.HEALTHY]
        assert runtime.list_devices()[0].gpu.health is Health.HEALTHY
        assert plugin.gpus()[1].health is Health.HEALTHY  # the other GPU never changed
    finally:
        stop.set()
        plugin.close_health()
        runtime.close()
        backend.close()
        follower.join(timeout=5)


def _change(health: Health, at: float, uuid: GpuUuid = A) -> HealthChange:
    return HealthChange(uuid, 0 if uuid == A else 1, health, "XID 79" if health is Health.UNHEALTHY else "ok", None, at)


def _damper(hold_s: float = 30.0) -> HealthDamper:
    damper = HealthDamper(hold_s)
    damper.seed([DeviceInfo(g) for g in GPUS], now=0.0)
    return damper


def test_damper_reports_a_fault_at_once_and_holds_the_recovery() -> None:
    damper = _damper()
    fault = _change(Health.UNHEALTHY, 100.0)
    assert damper.observe([fault]) == [fault]
    assert damper.observe([_change(Health.HEALTHY, 101.0)]) == []
    [listed, other] = damper.apply([DeviceInfo(g) for g in GPUS])
    assert listed.gpu.health is Health.UNHEALTHY
    assert "XID 79" in listed.health_reason
    assert "held" in listed.health_reason
    assert other == DeviceInfo(GPUS[1])
    assert damper.tick(129.9) == []
    [healthy] = damper.tick(130.0)
    assert (healthy.uuid, healthy.health, healthy.at) == (A, Health.HEALTHY, 130.0)
    assert damper.apply([DeviceInfo(GPUS[0])]) == (DeviceInfo(GPUS[0]),)
    assert damper.tick(1000.0) == []


def test_a_fault_during_the_hold_restarts_it_and_healthy_reports_are_a_quiet_period_apart() -> None:
    damper = _damper(hold_s=10.0)
    reported: list[HealthChange] = []
    now = 0.0
    while now < 100.0:  # a fault every 3 s, each followed by a recovery 1 s later, for 100 s
        reported += damper.observe([_change(Health.UNHEALTHY, now), _change(Health.HEALTHY, now + 1)])
        now += 3.0
        reported += damper.tick(now)
    assert [c.health for c in reported] == [Health.UNHEALTHY]
    reported += damper.tick(now + 5.0)  # last fault at 99 s
    reported += damper.tick(99.0 + 10.0)
    assert [c.health for c in reported] == [Health.UNHEALTHY, Health.HEALTHY]
    # a recovery the backend reports after the quiet period passes at once; two Healthy reports > hold apart
    reported += damper.observe([_change(Health.UNHEALTHY, 200.0)])
    reported += damper.observe([_change(Health.HEALTHY, 215.0)])
    healthy = [c.at for c in reported if c.health is Health.HEALTHY]
    assert healthy == [109.0, 215.0]
    assert all(b - a > 10.0 for a, b in itertools.pairwise(healthy))


def test_zero_hold_passes_every_change_and_a_bad_hold_is_refused() -> None:
    damper = _damper(hold_s=0.0)
    changes = [_change(Health.UNHEALTHY, 1.0), _change(Health.HEALTHY, 1.0), _change(Health.UNHEALTHY, 2.0)]
    assert damper.observe(changes) == changes
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="hold_s"):
            HealthDamper(bad)


def test_gpu_unhealthy_at_start_counts_as_faulted_then() -> None:
    damper = HealthDamper(30.0)
    sick = Gpu(0, A, "A100", 16 * GiB, health=Health.UNHEALTHY)
    damper.seed([DeviceInfo(sick, "XID 48")], now=50.0)
    assert damper.observe([_change(Health.HEALTHY, 60.0)]) == []
    assert [c.health for c in damper.tick(80.0)] == [Health.HEALTHY]


def test_health_hold_flag_reaches_the_runtime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from entrypoints.runtime.__main__ import build_parser, main, settings_from_args
    from entrypoints.runtime.containers import RuntimeContainer

    parse = build_parser().parse_args
    assert settings_from_args(parse(["--socket", str(tmp_path / "r.sock")])).health_hold_s == 30.0
    settings = settings_from_args(parse(["--socket", str(tmp_path / "r.sock"), "--backend", "simulated",
                                         "--health-hold", "0"]))
    service = RuntimeContainer(settings=settings).service()
    assert service.health_hold_s == 0.0
    service.close()
    assert main(["--socket", str(tmp_path / "r.sock"), "--health-hold", "-1"]) == 2
    assert "--health-hold" in capsys.readouterr().err


def test_tracker_ignores_the_configured_xids_and_refuses_a_bad_one() -> None:
    tracker = HealthTracker(GPUS, ignored_xids={79})
    assert tracker.on_xid(A, 79, now=1.0) == []
    assert [c.health for c in tracker.on_xid(A, 13, now=2.0)] == [Health.UNHEALTHY]
    assert tracker.xid_counts(A) == {79: 1, 13: 1}
    for bad in (0, -3, 2**32, True):
        with pytest.raises(ValueError, match="ignored_xids"):
            HealthTracker(GPUS, ignored_xids={bad})


def test_ignored_xids_flag_reaches_the_backend(tmp_path: Path) -> None:
    from entrypoints.runtime.__main__ import build_parser, settings_from_args
    from entrypoints.runtime.app import select_backend

    parse = build_parser().parse_args
    default = settings_from_args(parse(["--socket", str(tmp_path / "r.sock")]))
    assert default.ignored_xids == frozenset({13, 31, 43, 45, 68, 109})
    settings = settings_from_args(parse(["--socket", str(tmp_path / "r.sock"), "--backend", "simulated",
                                         "--ignored-xids", "79, 94"]))
    assert settings.ignored_xids == frozenset({79, 94})
    backend = select_backend(settings)
    uuid = backend.devices()[0].gpu.uuid
    assert isinstance(backend, SimulatedGpuBackend)
    assert backend.inject_xid(uuid, 79) == ()  # ignored now
    [change] = backend.inject_xid(uuid, 13)  # no longer ignored
    assert (change.health, change.xid) == (Health.UNHEALTHY, 13)
    none = settings_from_args(parse(["--socket", str(tmp_path / "r.sock"), "--ignored-xids", "none"]))
    assert none.ignored_xids == frozenset()


@pytest.mark.parametrize("value", ["13,abc", "-4", "0", "13,,31", "99999999999"])
def test_bad_ignored_xids_are_refused_naming_the_flag(value: str, capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    from entrypoints.runtime.__main__ import main

    assert main(["--socket", str(tmp_path / "r.sock"), "--ignored-xids", value]) == 2
    err = capsys.readouterr().err
    assert "--ignored-xids" in err
    assert repr(value) in err or value in err
