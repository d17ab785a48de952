"""Contract of the ResourceClaim list/watch port (``ports.resource_claims.ResourceClaimsWatch``), against
InMemoryResourceClaims and KubernetesResourceClaims (a real kube-apiserver of the live version serving
``resource.k8s.io/v1``, marker ``k8s``, the contract suite's shared control plane).

Behaviours covered:
- list: a claim with an allocation of our driver (a whole GPU, a share with ``consumedCapacity`` and ``shareID``)
  and one of another driver read back equal, with resourceVersions, beside an unallocated claim (no results);
- watch from the list's resourceVersion: an allocation written later arrives as MODIFIED with its results, a
  deallocation as MODIFIED without, a delete as DELETED with the last state, in order;
- get (the DRA plugin's read) returns the same claim as the list, None when absent;
- the namespace list (the quota webhook's read) holds that namespace's claims by name, none for an unknown one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import attrs
import pytest

from adapters.memory.resource_claims import InMemoryResourceClaims
from domain.dra.claims import AllocationResult, ClaimAllocation
from domain.kube.objects import EventType, WatchEvent
from ports.resource_claims import NamespaceClaimsApi, ResourceClaimsWatch

DRIVER = "gpu.lj-runtimekit.io"
NAMESPACE = "default"
REQUESTS = frozenset({"gpu", "share", "whole"})
"""The request names every real claim's spec has (an allocation must name requests of the spec)."""


@attrs.define
class ClaimsUnderTest:
    """The port, plus ``write(name, results)`` (create or allocate; returns the claim's UID) and ``delete``."""

    api: ResourceClaimsWatch
    write: Callable[[str, tuple[AllocationResult, ...]], str]
    delete: Callable[[str], None]
    get: Callable[[str], ClaimAllocation | None]
    namespaced: NamespaceClaimsApi


def _memory() -> ClaimsUnderTest:
    store = InMemoryResourceClaims()
    uids: dict[str, str] = {}

    def write(name: str, results: tuple[AllocationResult, ...]) -> str:
        uid = uids.setdefault(name, str(uuid.uuid4()))
        store.put(ClaimAllocation(NAMESPACE, name, uid, results))
        return uid

    def delete(name: str) -> None:
        uids.pop(name, None)
        store.delete(NAMESPACE, name)

    return ClaimsUnderTest(store, write, delete, lambda name: store.get(NAMESPACE, name), store)


def _status(results: tuple[AllocationResult, ...]) -> dict[str, object]:
    if not results:
        return {"status": {"allocation": None}}
    wire = []
    for r in results:
        entry: dict[str, object] = {"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device}
        if r.consumed:
            entry["consumedCapacity"] = dict(r.consumed)
        if r.share_id is not None:
            entry["shareID"] = r.share_id
        wire.append(entry)
    return {"status": {"allocation": {"devices": {"results": wire}}}}


def kubernetes_writer(api_client: object) -> tuple[Callable[[str, tuple[AllocationResult, ...]], str],
                                                   Callable[[str], None]]:
    """``write``/``delete`` of real claims: the spec has the requests :data:`REQUESTS` and those the results name
    (class ``gpu.lj-runtimekit.io``), the allocation is written through the status subresource (merge patch)."""
    from kubernetes import client

    api = client.ResourceV1Api(api_client)

    def write(name: str, results: tuple[AllocationResult, ...]) -> str:
        try:
            claim = api.read_namespaced_resource_claim(name, NAMESPACE)
        except client.ApiException as error:
            if error.status != 404:
                raise
            requests = sorted(REQUESTS | {r.request for r in results})
            body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
                    "spec": {"devices": {"requests": [{"name": n, "exactly": {"deviceClassName": DRIVER}}
                                                      for n in requests]}}}
            claim = api.create_namespaced_resource_claim(NAMESPACE, body)
        if results or (claim.status is not None and claim.status.allocation is not None):
            api.patch_namespaced_resource_claim_status(name, NAMESPACE, _status(results),
                                                       _content_type="application/merge-patch+json")
        return str(claim.metadata.uid)

    def delete(name: str) -> None:
        api.delete_namespaced_resource_claim(name, NAMESPACE)

    return write, delete


@pytest.fixture(params=["memory", pytest.param("kubernetes", marks=pytest.mark.k8s)])
def claims(request: pytest.FixtureRequest) -> Iterator[ClaimsUnderTest]:
    if request.param == "memory":
        yield _memory()
        return
    from adapters.kubernetes.resourceclaims import KubernetesResourceClaims

    plane = request.getfixturevalue("contract_k8s_plane")
    api_client = plane.api_client()
    port = KubernetesResourceClaims(api_client)
    write, delete = kubernetes_writer(api_client)
    made: list[str] = []

    def tracked(name: str, results: tuple[AllocationResult, ...]) -> str:
        made.append(name)
        return write(name, results)

    try:
        yield ClaimsUnderTest(port, tracked, delete, lambda name: port.get(NAMESPACE, name), port)
    finally:
        for name in set(made):
            if port.get(NAMESPACE, name) is not None:
                delete(name)
        api_client.close()


def _name() -> str:
    return f"claim-{uuid.uuid4().hex[:8]}"


WHOLE = AllocationResult(request="whole", driver=DRIVER, pool="node-a", device="gpu-0")
SHARE = AllocationResult(request="share", driver=DRIVER, pool="node-a", device="gpu-1",
                         consumed={"cores": "30", "memory": "4Gi"}, share_id=str(uuid.uuid4()))
OTHER = AllocationResult(request="whole", driver="other.example.com", pool="node-b", device="dev-3")


def _mine(claims: ClaimsUnderTest, names: set[str]) -> dict[str, ClaimAllocation]:
    return {c.name: c for c in claims.api.list_claims().items if c.name in names}


def test_list_reads_back_allocations_and_unallocated_claims(claims: ClaimsUnderTest) -> None:
    ours, foreign, empty = _name(), _name(), _name()
    uid = claims.write(ours, (WHOLE, SHARE))
    claims.write(foreign, (OTHER,))
    claims.write(empty, ())
    listing = claims.api.list_claims()
    assert listing.resource_version
    mine = _mine(claims, {ours, foreign, empty})
    assert set(mine) == {ours, foreign, empty}
    assert (mine[ours].namespace, mine[ours].uid, mine[ours].results) == (NAMESPACE, uid, (WHOLE, SHARE))
    assert mine[foreign].results == (OTHER,)
    assert mine[empty].results == ()
    assert all(c.resource_version for c in mine.values())
    assert claims.get(ours) == mine[ours]
    assert claims.get(_name()) is None


def _events(claims: ClaimsUnderTest, since: str, names: set[str], count: int) -> list[WatchEvent[ClaimAllocation]]:
    seen: list[WatchEvent[ClaimAllocation]] = []
    for _ in range(20):  # each watch lasts 2 s at most; the server may end it early
        for event in claims.api.watch_claims(resource_version=since, timeout_seconds=2):
            since = event.resource_version or since
            if event.object is not None and event.object.name in names:
                seen.append(event)
            if len(seen) >= count:
                return seen
    return seen


def test_watch_delivers_allocation_deallocation_and_delete_in_order(claims: ClaimsUnderTest) -> None:
    name = _name()
    claims.write(name, ())
    since = claims.api.list_claims().resource_version
    claims.write(name, (WHOLE,))
    claims.write(name, ())
    claims.delete(name)
    events = _events(claims, since, {name}, 3)
    assert [(e.type, e.object.results if e.object else None) for e in events] == [
        (EventType.MODIFIED, (WHOLE,)), (EventType.MODIFIED, ()), (EventType.DELETED, ())]
    assert all(e.resource_version for e in events)


def test_namespace_list_holds_the_namespaces_claims_by_name(claims: ClaimsUnderTest) -> None:
    first, second = sorted((_name(), _name()))
    uid = claims.write(second, (SHARE,))
    claims.write(first, ())
    listed = {c.name: c for c in claims.namespaced.list_namespace_claims(NAMESPACE) if c.name in {first, second}}
    assert list(listed) == [first, second]
    assert (listed[second].uid, listed[second].results) == (uid, (SHARE,))
    assert listed[first].results == ()
    names = [c.name for c in claims.namespaced.list_namespace_claims(NAMESPACE)]
    assert names == sorted(names)
    assert claims.namespaced.list_namespace_claims(f"absent-{uuid.uuid4().hex[:8]}") == ()
