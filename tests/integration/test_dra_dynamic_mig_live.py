"""Dynamic MIG through DRA, allocated by our standalone scheduler, on the genuine kubelet + containerd 2 of the
live version (kubelet_harness.py, real_node_world.py, dra_live_world.py).

On the node: ``ljrk runtime --mig-strategy dynamic`` on one simulated 80 GiB A100 in MIG mode with no instance
yet, ``ljrk dra-driver`` (it offers every placement of the GPU's profile table, none listed as an instance), and
``ljrk scheduler --mode standalone --mig-strategy dynamic``, which reads the node's MIG layout and strategy from
those slices. Covers: two claims of class ``mig-3g-40gb`` allocated by us on the two placements of that profile
(devices ``gpu-0-mig-3g-40gb-0`` and ``-4``, no consumed capacity), the kubelet prepares them, the Runtime creates
each instance then, and each pod runs with its own; a third claim's pod waits with our FailedScheduling and takes
the placement the first gives back once its pod is deleted (the resourceclaim controller deallocates the claim).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from dra_live_world import Claims, DraNodeStack, claims_in_new_namespace, dra_world, our_pod
from k8s_harness import ControlPlane
from kubelet_harness import RealNode

from support.polling import eventually

pytestmark = [pytest.mark.k8s, pytest.mark.kubelet]

GPUS = "1x80Gi:A100:mig"
MIG_3G = "mig-3g-40gb.lj-runtimekit.io"
DYNAMIC = ("--mig-strategy", "dynamic")


@pytest.fixture(scope="module")
def stack(real_node: RealNode, kubelet_plane: ControlPlane, kubelet_api: Any) -> Iterator[DraNodeStack]:
    with dra_world(real_node, kubelet_plane, kubelet_api, GPUS, "scheduler", runtime_args=DYNAMIC,
                   scheduler_args=DYNAMIC) as world:
        yield world


@pytest.fixture
def claims(kubelet_api: Any, real_node: RealNode, stack: DraNodeStack) -> Iterator[Claims]:
    """Claims and pods in a new namespace, cleaned up afterwards (:func:`claims_in_new_namespace`)."""
    with claims_in_new_namespace(kubelet_api, real_node, stack) as helper:
        yield helper


def instances(stack: DraNodeStack) -> list[tuple[str, int]]:
    """(profile, start) of every MIG instance the Runtime lists now."""
    with stack.runtime() as runtime:
        return sorted((i.profile, i.start) for d in runtime.list_devices() for i in d.mig_instances)


def test_dynamic_mig_claims_allocated_by_us_create_their_instances_and_a_third_waits(
        claims: Claims, stack: DraNodeStack) -> None:
    assert instances(stack) == []
    names = [claims.create(MIG_3G) for _ in range(3)]
    pods = [our_pod(claims, [{"name": "gpu", "resourceClaimName": name}]) for name in names[:2]]
    for pod in pods:
        claims.pods.wait_running(pod, timeout=90)
    results = [claims.get(name).status.allocation.devices.results for name in names[:2]]
    assert sorted(r.device for (r,) in results) == ["gpu-0-mig-3g-40gb-0", "gpu-0-mig-3g-40gb-4"]
    assert all(not r.consumed_capacity and not r.share_id and r.pool == claims.pods.node.node_name
               for (r,) in results)
    assert instances(stack) == [("3g.40gb", 0), ("3g.40gb", 4)]  # created when the kubelet prepared the claims
    envs = [claims.pods.env(pod, "main") for pod in pods]
    assert all(env["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-") and env["LJRK_MIG_PROFILE_0"] == "3g.40gb"
               for env in envs)
    assert envs[0]["NVIDIA_VISIBLE_DEVICES"] != envs[1]["NVIDIA_VISIBLE_DEVICES"]
    waiting = our_pod(claims, [{"name": "gpu", "resourceClaimName": names[2]}])
    eventually(lambda: any("FailedScheduling" in e and "MIG" in e for e in claims.events(waiting)), 60,
               "our FailedScheduling while both placements are held")
    assert claims.get(names[2]).status.allocation is None
    claims.pods.delete(pods[0])
    claims.pods.wait_running(waiting, timeout=120)
    (freed,) = results[0]
    assert [r.device for r in claims.get(names[2]).status.allocation.devices.results] == [freed.device]
