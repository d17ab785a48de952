"""The device plugin's allocated mark and release reconciler through the fake kubelet, with the in-process Runtime
behind gRPC (``dp_world``).

Covers: the pod gets ``lj-runtimekit.io/gpu-allocated`` from the plugin's own worker once kubelet's last Allocate
call for it returned, not after the first; a running pod's Runtime record survives release passes; a pod deleted
from the cluster has its Runtime record released within ``interval + grace`` seconds of the deletion, and the
release is counted in the plugin's status.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from dp_world import NAMES, PROTOCOL, World, share, share_plan, world_fixture

from domain.kube.objects import PodPhase
from support.polling import wait_for

GPU, CORE, MEM = NAMES.values()
MARK = PROTOCOL.annotations.pod_allocated
INTERVAL_S = 0.3
SLACK_S = 0.7
"""Thread scheduling and gRPC round trips on a loaded CI machine, seconds."""


@pytest.fixture
def world() -> Iterator[World]:
    yield from world_fixture(2, release_interval_s=INTERVAL_S)


def _held(world: World) -> set[str]:
    return {c.pod_uid for c in world.in_process_runtime.exporter_data().containers}


def test_pod_is_marked_allocated_after_kubelets_last_call(world: World) -> None:
    world.pod("a", [share("main", core=50, memory=4)], [share_plan("main", 1, core=50, memory_gib=4)])
    world.kubelet.admit(CORE, 50)
    time.sleep(0.3)
    assert MARK not in world.cluster.get_pod("default", "a").annotations
    world.kubelet.admit(MEM, 4)
    assert wait_for(lambda: MARK in world.cluster.get_pod("default", "a").annotations, 5)
    stamp = float(world.cluster.get_pod("default", "a").annotations[MARK])
    assert abs(stamp - time.time()) < 10
    assert world.service.marker.written == 1


def test_deleted_pod_record_is_released_within_interval_plus_grace(world: World) -> None:
    assert world.app.reconciler is not None
    grace = world.app.reconciler.grace_s
    kept = world.pod("kept", [share("main", core=30, memory=2)], [share_plan("main", 0, core=30, memory_gib=2)])
    world.kubelet.admit(CORE, 30)
    world.kubelet.admit(MEM, 2)
    gone = world.pod("gone", [share("main", core=40, memory=3)], [share_plan("main", 1, core=40, memory_gib=3)])
    world.kubelet.admit(CORE, 40)
    world.kubelet.admit(MEM, 3)
    for name in ("kept", "gone"):
        world.cluster.set_pod_phase("default", name, PodPhase.RUNNING)
    assert _held(world) == {kept.uid, gone.uid}
    passes = world.app.reconciler.passes
    assert wait_for(lambda: world.app.reconciler is not None and world.app.reconciler.passes >= passes + 3, 5)
    time.sleep(grace)
    assert _held(world) == {kept.uid, gone.uid}  # running pods keep their records, however old

    deleted_at = time.monotonic()
    world.cluster.delete_pod("default", "gone", grace_period_seconds=0)
    assert wait_for(lambda: gone.uid not in _held(world), INTERVAL_S + grace + SLACK_S)
    assert time.monotonic() - deleted_at <= INTERVAL_S + grace + SLACK_S
    assert _held(world) == {kept.uid}
    assert wait_for(lambda: world.app.status().released_records == 1, 5)  # counted after Release returns

    # a pod deleted right after its admission: its fresh record waits for the grace or a second pass
    fresh = world.pod("fresh", [share("main", core=20, memory=1)], [share_plan("main", 1, core=20, memory_gib=1)])
    world.kubelet.admit(CORE, 20)
    world.kubelet.admit(MEM, 1)
    deleted_at = time.monotonic()
    world.cluster.delete_pod("default", "fresh", grace_period_seconds=0)
    assert wait_for(lambda: fresh.uid not in _held(world), INTERVAL_S + grace + SLACK_S)
    assert time.monotonic() - deleted_at <= INTERVAL_S + grace + SLACK_S
    assert wait_for(lambda: world.app.status().released_records == 2, 5)
