"""The claim quota gate (``services.claim_quota.gate.ClaimQuotaGate``) over in-memory Namespaces, claims and slices.

Behaviours covered:
- no quota label, another driver's claim: allowed without reading further;
- within the quota allowed, past it refused with the over-quota message; another namespace is unaffected;
- deallocating a claim frees its quota;
- race: an approved allocation the list does not show yet counts (two back-to-back allocations cannot both pass);
  it stops counting once the list shows the claim allocated (counted once), when the claim is gone, or after the
  TTL; a claim reviewed again is decided again (not counted against itself);
- an invalid quota label refuses with the label and value named; an unreadable API refuses (fail closed);
- a device of the claim that no slice lists refuses when memory is limited.
"""

from __future__ import annotations

import pytest

from adapters.memory.namespaces import InMemoryNamespaces
from adapters.memory.resource_claims import InMemoryResourceClaims
from adapters.memory.resource_slices import InMemoryResourceSlices
from domain.dra.claims import AllocationResult, ClaimAllocation
from domain.dra.slices import Capacity, Device, ResourceSlice, SliceContent
from domain.kube.protocol import DraNames
from ports.cluster import UnavailableError
from services.claim_quota.gate import ClaimQuotaGate

NAMES = DraNames()
DRIVER = NAMES.driver
GI = 2**30


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class World:
    def __init__(self) -> None:
        self.namespaces = InMemoryNamespaces()
        self.claims = InMemoryResourceClaims()
        self.slices = InMemoryResourceSlices()
        self.clock = Clock()
        self.gate = ClaimQuotaGate(names=NAMES, namespaces=self.namespaces, claims=self.claims, slices=self.slices,
                                   clock=self.clock, pending_ttl_s=30.0)
        devices = tuple(Device(f"gpu-{i}", capacity={"cores": Capacity(100), "memory": Capacity(40 * GI)})
                        for i in range(4))
        self.slices.create_resource_slice(ResourceSlice("n1-gpus", DRIVER, "n1", 1, 1, SliceContent(devices)))

    def claim(self, name: str, *results: AllocationResult, namespace: str = "team") -> ClaimAllocation:
        """The claim as the webhook sees it (allocated); the store keeps it unallocated, as before the write."""
        self.claims.put(ClaimAllocation(namespace, name, f"uid-{name}"))
        return ClaimAllocation(namespace, name, f"uid-{name}", results)

    def allocate(self, claim: ClaimAllocation) -> None:
        """The write the webhook approved lands: the list shows it."""
        self.claims.put(claim)


def share(cores: int, memory_gi: int, device: str = "gpu-0") -> AllocationResult:
    return AllocationResult("r", DRIVER, "n1", device, {"cores": str(cores), "memory": f"{memory_gi}Gi"})


WHOLE = AllocationResult("r", DRIVER, "n1", "gpu-1")


@pytest.fixture
def world() -> World:
    w = World()
    w.namespaces.put("team", {NAMES.claim_quota_cores: "100", NAMES.claim_quota_memory: "48Gi"})
    w.namespaces.put("free")
    return w


def test_no_quota_label_or_another_driver_is_allowed(world: World) -> None:
    assert world.gate.review(world.claim("big", WHOLE, WHOLE, namespace="free")).allowed
    other = AllocationResult("r", "other.example.com", "n1", "dev-0")
    assert world.gate.review(world.claim("o", other, other)).allowed
    assert world.gate.pending == 0


def test_within_allowed_over_refused_other_namespace_unaffected(world: World) -> None:
    first = world.claim("a", share(60, 20))
    assert world.gate.review(first).allowed
    world.allocate(first)
    refused = world.gate.review(world.claim("b", share(50, 10)))
    assert not refused.allowed
    assert refused.message == (f"ResourceClaim team/b is over quota in namespace team: cores limit "
                               f"{NAMES.claim_quota_cores}=100 (1 GPU): in use 60 (0.6 GPU) by 1 claim(s), this "
                               "claim asks 50 (0.5 GPU)")
    assert world.gate.review(world.claim("b2", share(40, 28))).allowed  # exactly 100 cores and 48Gi
    assert world.gate.review(world.claim("c", WHOLE, namespace="free")).allowed


def test_whole_gpu_counts_the_slice_memory(world: World) -> None:
    verdict = world.gate.review(world.claim("w", WHOLE, share(1, 9)))
    assert not verdict.allowed
    assert "in use 0Gi by 0 claim(s), this claim asks 49Gi" in verdict.message


def test_deallocation_frees_quota(world: World) -> None:
    first = world.claim("a", share(80, 40))
    assert world.gate.review(first).allowed
    world.allocate(first)
    assert not world.gate.review(world.claim("b", share(30, 4))).allowed
    world.claims.put(ClaimAllocation("team", "a", "uid-a"))  # deallocated
    assert world.gate.review(world.claim("b", share(30, 4))).allowed


def test_approved_but_not_listed_counts_until_the_list_shows_it(world: World) -> None:
    first = world.claim("a", share(60, 20))
    assert world.gate.review(first).allowed
    second = world.gate.review(world.claim("b", share(60, 20)))  # the list still shows "a" unallocated
    assert not second.allowed
    assert "in use 60 (0.6 GPU) by 1 claim(s)" in second.message
    world.allocate(first)
    again = world.gate.review(world.claim("b", share(60, 20)))
    assert "in use 60 (0.6 GPU) by 1 claim(s)" in again.message  # counted once: the list, not the pending too
    assert world.gate.pending == 0


def test_pending_ends_when_the_claim_is_gone_or_the_ttl_passes(world: World) -> None:
    assert world.gate.review(world.claim("a", share(60, 20))).allowed
    world.claims.delete("team", "a")
    assert world.gate.review(world.claim("b", share(60, 20))).allowed  # "a" is gone: its approval is forgotten
    world.clock.now += 31  # the write of "b" never landed
    assert world.gate.review(world.claim("c", share(60, 20))).allowed
    assert world.gate.pending == 1


def test_a_claim_reviewed_again_does_not_count_against_itself(world: World) -> None:
    claim = world.claim("a", share(90, 40))
    assert world.gate.review(claim).allowed
    assert world.gate.review(claim).allowed
    assert world.gate.pending == 1


def test_invalid_label_refuses_naming_label_and_value(world: World) -> None:
    world.namespaces.put("bad", {NAMES.claim_quota_memory: "lots"})
    verdict = world.gate.review(world.claim("x", share(1, 1), namespace="bad"))
    assert not verdict.allowed
    assert f"namespace label {NAMES.claim_quota_memory}='lots'" in verdict.message
    assert "a cluster admin must fix the label" in verdict.message


def test_unreadable_api_refuses(world: World) -> None:
    class Down(InMemoryResourceClaims):
        def list_namespace_claims(self, namespace: str) -> tuple[ClaimAllocation, ...]:
            raise UnavailableError("list resourceclaims in team: API server unavailable")

    gate = ClaimQuotaGate(names=NAMES, namespaces=world.namespaces, claims=Down(), slices=world.slices,
                          clock=world.clock)
    verdict = gate.review(ClaimAllocation("team", "a", "uid-a", (share(1, 1),)))
    assert not verdict.allowed
    assert "cannot be checked" in verdict.message
    assert "API server unavailable" in verdict.message


def test_unknown_device_refused_when_memory_is_limited(world: World) -> None:
    lost = AllocationResult("r", DRIVER, "gone-node", "gpu-0")
    verdict = world.gate.review(world.claim("l", lost))
    assert not verdict.allowed
    assert "no ResourceSlice of gpu.lj-runtimekit.io lists it" in verdict.message
    world.namespaces.put("cores-only", {NAMES.claim_quota_cores: "100"})
    assert world.gate.review(world.claim("l", lost, namespace="cores-only")).allowed
