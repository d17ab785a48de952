"""Contract of the standalone scheduler's claim writes (``ports.claim_writes.ClaimWritesApi``), against
InMemoryResourceClaims and KubernetesClaimWrites (a real kube-apiserver of the live version serving
``resource.k8s.io/v1``, marker ``k8s``, the contract suite's shared control plane).

Behaviours covered:
- allocate: the results, ``reservedFor`` and the delete-protection finalizer are stored and read back; the claim's
  device requests are read from its spec;
- a claim changed since it was read, already allocated or gone is refused (ConflictError / NotFoundError) and left
  as it was;
- reserve adds a consumer once; unreserve removes one, keeps the allocation while others remain or when not asked
  to deallocate, and with ``deallocate`` and none left clears the allocation and the finalizer.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest

from adapters.memory.resource_claims import InMemoryResourceClaims
from domain.dra.claims import AllocationResult, ClaimAllocation, DeviceAsk
from ports.claim_writes import DELETE_PROTECTION, ClaimWritesApi, Consumer
from ports.cluster import ConflictError, NotFoundError

DRIVER = "gpu.lj-runtimekit.io"
SHARE_CLASS = "gpu-share.lj-runtimekit.io"
NAMESPACE = "default"


@attrs.define
class WritesUnderTest:
    """The port, ``create(name)`` (an unallocated claim with one share request ``r``), ``finalizers(name)`` and
    ``delete(name)``."""

    api: ClaimWritesApi
    create: Callable[[str], ClaimAllocation]
    finalizers: Callable[[str], set[str]]
    delete: Callable[[str], None]
    status: Callable[[str], dict[str, Any] | None] = lambda name: None
    """The stored ``status`` as the API server serves it (None in memory: no wire form)."""


def _memory() -> WritesUnderTest:
    store = InMemoryResourceClaims()

    def create(name: str) -> ClaimAllocation:
        ask = DeviceAsk("r", SHARE_CLASS, capacity={"cores": "30", "memory": "4Gi"})
        return store.put(ClaimAllocation(NAMESPACE, name, str(uuid.uuid4()), requests=(ask,)))

    def finalizers(name: str) -> set[str]:
        claim = store.get(NAMESPACE, name)
        return set() if claim is None else set(store.finalizers.get(claim.uid, ()))

    return WritesUnderTest(store, create, finalizers, lambda name: store.delete(NAMESPACE, name))


@pytest.fixture(params=["memory", pytest.param("kubernetes", marks=pytest.mark.k8s)])
def writes(request: pytest.FixtureRequest) -> Iterator[WritesUnderTest]:
    if request.param == "memory":
        yield _memory()
        return
    from kubernetes import client

    from adapters.kubernetes.claimwrites import KubernetesClaimWrites

    plane = request.getfixturevalue("contract_k8s_plane")
    api_client = plane.api_client()
    api = client.ResourceV1Api(api_client)
    port = KubernetesClaimWrites(api_client)
    made: list[str] = []

    def create(name: str) -> ClaimAllocation:
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
                "spec": {"devices": {"requests": [{"name": "r", "exactly": {
                    "deviceClassName": SHARE_CLASS, "capacity": {"requests": {"cores": "30", "memory": "4Gi"}}}}]}}}
        api.create_namespaced_resource_claim(NAMESPACE, body)
        made.append(name)
        claim = port.get(NAMESPACE, name)
        assert claim is not None
        return claim

    def finalizers(name: str) -> set[str]:
        return set(api.read_namespaced_resource_claim(name, NAMESPACE).metadata.finalizers or ())

    def delete(name: str) -> None:
        api.patch_namespaced_resource_claim(name, NAMESPACE, {"metadata": {"finalizers": None}})
        api.delete_namespaced_resource_claim(name, NAMESPACE)

    def status(name: str) -> dict[str, Any] | None:
        raw = api.read_namespaced_resource_claim(name, NAMESPACE, _preload_content=False)
        return dict(json.loads(raw.data)["status"])

    try:
        yield WritesUnderTest(port, create, finalizers, delete, status)
    finally:
        for name in made:
            if port.get(NAMESPACE, name) is not None:
                delete(name)
        api_client.close()


def _name() -> str:
    return f"claim-{uuid.uuid4().hex[:8]}"


def _result(device: str = "gpu-1") -> AllocationResult:
    return AllocationResult("r", DRIVER, "node-a", device, {"cores": "30", "memory": "4Gi"}, str(uuid.uuid4()))


POD_A, POD_B = Consumer("pod-a", str(uuid.uuid4())), Consumer("pod-b", str(uuid.uuid4()))


def test_allocate_stores_results_reservation_and_finalizer(writes: WritesUnderTest) -> None:
    name = _name()
    claim = writes.create(name)
    assert [(a.name, a.device_class, dict(a.capacity)) for a in claim.requests] == [
        ("r", SHARE_CLASS, {"cores": "30", "memory": "4Gi"})]
    assert not claim.allocated
    assert claim.reserved_for == ()
    result = _result()
    stored = writes.api.allocate(claim, (result,), node="node-a", consumer=POD_A)
    assert (stored.results, stored.allocated, stored.reserved_for) == ((result,), True, (POD_A.uid,))
    assert stored.resource_version != claim.resource_version
    assert writes.api.get(NAMESPACE, name) == stored
    assert DELETE_PROTECTION in writes.finalizers(name)
    wire = writes.status(name)
    if wire is not None:  # what the kubelet and the driver read: kube-scheduler's shape
        assert wire["allocation"]["nodeSelector"] == {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}]}
        assert wire["allocation"]["devices"]["results"] == [{
            "request": "r", "driver": DRIVER, "pool": "node-a", "device": "gpu-1",
            "consumedCapacity": {"cores": "30", "memory": "4Gi"}, "shareID": result.share_id}]
        assert wire["reservedFor"] == [{"resource": "pods", "name": POD_A.name, "uid": POD_A.uid}]


def test_a_changed_allocated_or_gone_claim_is_refused_and_left_as_it_was(writes: WritesUnderTest) -> None:
    name = _name()
    claim = writes.create(name)
    stored = writes.api.allocate(claim, (_result(),), node="node-a", consumer=POD_A)
    with pytest.raises(ConflictError):
        writes.api.allocate(claim, (_result("gpu-0"),), node="node-a", consumer=POD_B)  # stale resourceVersion
    with pytest.raises(ConflictError, match="already allocated"):
        writes.api.allocate(stored, (_result("gpu-0"),), node="node-a", consumer=POD_B)
    assert writes.api.get(NAMESPACE, name) == stored
    with pytest.raises(ConflictError):
        writes.api.reserve(claim, POD_B)  # stale
    other = writes.create(_name())
    writes.delete(other.name)
    with pytest.raises(NotFoundError):
        writes.api.allocate(other, (_result(),), node="node-a", consumer=POD_A)
    assert writes.api.get(NAMESPACE, other.name) is None


def test_reserve_and_unreserve_keep_the_allocation_until_the_last_consumer_leaves(writes: WritesUnderTest) -> None:
    name = _name()
    stored = writes.api.allocate(writes.create(name), (_result(),), node="node-a", consumer=POD_A)
    both = writes.api.reserve(stored, POD_B)
    assert both.reserved_for == (POD_A.uid, POD_B.uid)
    assert writes.api.reserve(both, POD_B).reserved_for == (POD_A.uid, POD_B.uid)
    one = writes.api.unreserve(both, POD_A.uid, deallocate=True)
    assert (one.allocated, one.reserved_for) == (True, (POD_B.uid,))
    kept = writes.api.unreserve(one, POD_B.uid, deallocate=False)
    assert (kept.allocated, kept.reserved_for) == (True, ())
    assert DELETE_PROTECTION in writes.finalizers(name)
    again = writes.api.reserve(kept, POD_B)
    gone = writes.api.unreserve(again, POD_B.uid, deallocate=True)
    assert (gone.allocated, gone.results, gone.reserved_for) == (False, (), ())
    assert DELETE_PROTECTION not in writes.finalizers(name)


def test_the_claims_json_reads_requests_extras_and_reservations() -> None:
    from adapters.kubernetes.resourceclaims import claim_from_json

    claim = claim_from_json({
        "metadata": {"namespace": "ns", "name": "c", "uid": "u", "resourceVersion": "5"},
        "spec": {"devices": {"requests": [
            {"name": "a", "exactly": {"deviceClassName": SHARE_CLASS, "capacity": {"requests": {"cores": 30}}}},
            {"name": "b", "exactly": {"deviceClassName": "x", "allocationMode": "All", "selectors": [{"cel": {}}]}},
            {"name": "c", "firstAvailable": [{"name": "s", "deviceClassName": "x"}]}],
            "constraints": [{"matchAttribute": "k"}]}},
        "status": {"allocation": {"devices": {"results": []}}, "reservedFor": [{"resource": "pods", "uid": "p1"}]},
    })
    assert claim.requests == (DeviceAsk("a", SHARE_CLASS, capacity={"cores": "30"}),
                              DeviceAsk("b", "x", mode="All", extras=("selectors",)),
                              DeviceAsk("c", extras=("firstAvailable",)))
    assert (claim.extras, claim.allocated, claim.reserved_for) == (("constraints",), True, ("p1",))
