"""Dynamic MIG through DRA, allocated by our standalone scheduler, on the genuine kubelet + containerd 2 of the
live version (kubelet_harness.py, real_node_world.py, dra_live_world.py).

On the node: ``ljrk runtime --mig-strategy dynamic`` on one simulated 80 GiB A100 in MIG mode with no instance
yet, ``ljrk dra-driver`` (it offers every placement of the GPU's profile table, none listed as an instance), and
``ljrk scheduler --mode standalone --mig-strategy dynamic``, which reads the node's MIG layout and strategy from
those slices. Covers: two claims of class ``mig-3g-40gb`` allocated by us on the two placements of that profile
(devices ``gpu-0-mig-3g-40gb-0`` and ``-4``, no consumed capacity), the kubelet prepares them, the Runtime creates
each instance then, and each pod runs with its own; a third claim's pod waits with our FailedScheduling and takes
the placement the first gives back once its pod is deleted (the resourceclaim controller deallocates the claim).
The same with kube-scheduler's own allocator (the :data:`~dra_live_world.DRA_SCHEDULER` profile, no extender): it
reads the placements' shared counters (partitionable devices), so it never allocates two overlapping placements.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from dra_live_world import Claims, DraNodeStack, claims_in_new_namespace, dra_world
from k8s_harness import ControlPlane
from kubelet_harness import RealNode
from mig_claims_world import two_run_and_a_third_waits

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
    both = [("3g.40gb", 0), ("3g.40gb", 4)]

    def made_when_prepared() -> None:
        assert instances(stack) == both

    assert instances(stack) == []
    two_run_and_a_third_waits(claims, MIG_3G, ["gpu-0-mig-3g-40gb-0", "gpu-0-mig-3g-40gb-4"], "3g.40gb",
                              while_running=made_when_prepared)
    assert instances(stack) == both  # the third pod holds the placement the first gave back; nothing else made


def test_dynamic_mig_claims_allocated_by_kube_scheduler_create_their_instances_and_a_third_waits(
        claims: Claims, stack: DraNodeStack) -> None:
    both = [("3g.40gb", 0), ("3g.40gb", 4)]

    def made_when_prepared() -> None:
        assert instances(stack) == both

    assert instances(stack) == []  # the previous test's instances went with its claims
    two_run_and_a_third_waits(claims, MIG_3G, ["gpu-0-mig-3g-40gb-0", "gpu-0-mig-3g-40gb-4"], "3g.40gb",
                              while_running=made_when_prepared, pod=claims.pod,
                              refusal="cannot allocate all claims")
    assert instances(stack) == both
