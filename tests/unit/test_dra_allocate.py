"""The standalone scheduler's DRA allocator (``domain.dra.allocate``): a pod's claims as ledger asks, refusals with
the claim, request and field named, and the allocation results written back."""

from __future__ import annotations

import itertools

import attrs
import pytest

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.dra.allocate import (
    ClaimRefusedError,
    ask_name,
    claim_names,
    claim_need,
    claim_results,
    default_memory,
    mig_class_profiles,
    without_asks,
)
from domain.dra.claims import AllocationResult, ClaimAllocation, DeviceAsk
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid
from domain.kube.objects import PodClaim, PodObject
from domain.mig.ledger import MigBooking, MigPodAllocation
from domain.request import PodRequest
from domain.units import GiB
from support.kube_builders import PROTOCOL, make_pod

DRA = PROTOCOL.dra
SHARE, WHOLE = DRA.device_class_share, DRA.device_class_gpu
MIG_3G = "mig-3g-40gb.lj-runtimekit.io"


def pod(*claims: PodClaim) -> PodObject:
    return attrs.evolve(make_pod("p"), resource_claims=claims, containers=())


def claim(name: str = "c", *asks: DeviceAsk, uid: str = "", **kwargs: object) -> ClaimAllocation:
    return ClaimAllocation("default", name, uid or f"uid-{name}", requests=asks, **kwargs)  # type: ignore[arg-type]


def share(name: str = "r", **capacity: str) -> DeviceAsk:
    return DeviceAsk(name, SHARE, capacity=capacity)


def test_claims_are_named_directly_or_through_the_template_status() -> None:
    p = pod(PodClaim("a", claim_name="c1"), PodClaim("b", template_name="t", generated="p-b-x"),
            PodClaim("none", template_name="t", generated=""))
    assert claim_names(p) == (("a", "c1"), ("b", "p-b-x"))
    with pytest.raises(ClaimRefusedError, match="waiting for the ResourceClaim made from template 't'"):
        claim_names(pod(PodClaim("b", template_name="t")))


def test_a_share_asks_its_cores_and_memory_rounded_up_to_the_memory_unit() -> None:
    c = claim("c", share(cores="30", memory="3500Mi"))
    need = claim_need(pod(PodClaim("g", claim_name="c")), {"c": c}, PROTOCOL)
    (ask,) = need.asks
    (container,) = ask.containers
    assert (container.name, container.core_milli, container.memory_bytes) == (ask_name("g", "r"), 300, 4 * GiB)
    assert ask.consumed == ((30, 4 * GiB),)
    assert need.node is None
    assert need.shared == ()


def test_omitted_capacity_takes_the_whole_of_it_as_the_slice_default_says() -> None:
    p = pod(PodClaim("g", claim_name="c"))
    memory_only = claim_need(p, {"c": claim("c", share(memory="8Gi"))}, PROTOCOL).asks[0]
    assert (memory_only.containers[0].core_milli, memory_only.consumed) == (1000, ((None, 8 * GiB),))
    cores_only = claim_need(p, {"c": claim("c", share(cores="20"))}, PROTOCOL).asks[0]
    assert cores_only.containers[0].gpus == 1
    assert cores_only.consumed == ((20, None),)
    whole = claim_need(p, {"c": claim("c", DeviceAsk("r", WHOLE, count=2))}, PROTOCOL).asks[0]
    assert whole.containers[0].gpus == 2
    assert whole.consumed == ((None, None),)


@pytest.mark.parametrize(("ask", "message"), [
    (DeviceAsk("r", "mig-9g-99gb.lj-runtimekit.io"), "device class 'mig-9g-99gb.lj-runtimekit.io' is not allocated"),
    (DeviceAsk("r", MIG_3G, capacity={"memory": "1Gi"}), r"capacity.requests \{'memory': '1Gi'\}: class mig-3g-40gb"),
    (DeviceAsk("r", MIG_3G, count=65), "count=65 must be 1..64 MIG instances"),
    (DeviceAsk("r", MIG_3G, mode="All"), "allocationMode 'All'"),
    (DeviceAsk("r", "gpu.example.com"), "device class 'gpu.example.com'"),
    (DeviceAsk("r", WHOLE, mode="All"), "allocationMode 'All'"),
    (DeviceAsk("r", SHARE, count=2, capacity={"cores": "10"}), "count=2: a share request takes one GPU"),
    (DeviceAsk("r", SHARE, capacity={"cores": "0"}), r"capacity.requests.cores='0' must be 1..100"),
    (DeviceAsk("r", SHARE, capacity={"cores": "101"}), r"capacity.requests.cores='101' must be 1..100"),
    (DeviceAsk("r", SHARE, capacity={"cores": "0.5"}), "capacity.requests.cores"),
    (DeviceAsk("r", SHARE, capacity={"watts": "10"}), r"capacity.requests \['watts'\]"),
    (DeviceAsk("r", WHOLE, capacity={"cores": "10"}), "takes whole GPUs: no capacity.requests"),
    (DeviceAsk("r", WHOLE, count=0), "count=0 must be 1..64"),
    (DeviceAsk("r", WHOLE, extras=("selectors",)), "sets selectors"),
    (DeviceAsk("r", extras=("firstAvailable",)), "sets firstAvailable"),
])
def test_what_is_not_allocated_here_is_refused_naming_claim_request_and_field(ask: DeviceAsk, message: str) -> None:
    with pytest.raises(ClaimRefusedError, match=message) as error:
        claim_need(pod(PodClaim("g", claim_name="c")), {"c": claim("c", ask)}, PROTOCOL)
    assert "ResourceClaim default/c request 'r'" in str(error.value)


def test_claim_level_refusals() -> None:
    p = pod(PodClaim("g", claim_name="c"))
    with pytest.raises(ClaimRefusedError, match="ResourceClaim default/c does not exist"):
        claim_need(p, {"c": None}, PROTOCOL)
    with pytest.raises(ClaimRefusedError, match=r"sets spec\.devices constraints"):
        claim_need(p, {"c": claim("c", share(cores="1"), extras=("constraints",))}, PROTOCOL)
    with pytest.raises(ClaimRefusedError, match="asks no device"):
        claim_need(p, {"c": claim("c")}, PROTOCOL)
    percent = attrs.evolve(PROTOCOL, memory_unit="1%", resources=attrs.evolve(
        PROTOCOL.resources, memory="alibabacloud.com/gpu-memory.percentage"))
    assert percent.memory_unit_bytes is None
    with pytest.raises(ClaimRefusedError, match="memory unit is a percentage"):
        claim_need(p, {"c": claim("c", share(cores="10", memory="1Gi"))}, percent)


def allocated(name: str, node: str, *, reserved: tuple[str, ...] = (), driver: str = DRA.driver) -> ClaimAllocation:
    result = AllocationResult("r", driver, node, "gpu-0", {"cores": "10", "memory": "1Gi"}, "s")
    return claim(name, share(cores="10"), results=(result,), allocated=True, reserved_for=reserved)


def test_allocated_claims_pin_the_pod_to_their_node_and_book_nothing_new() -> None:
    p = pod(PodClaim("a", claim_name="s1"), PodClaim("b", claim_name="c"))
    need = claim_need(p, {"s1": allocated("s1", "n2"), "c": claim("c", share(cores="10", memory="1Gi"))}, PROTOCOL)
    assert need.node == "n2"
    assert [c.key for c in need.shared] == ["default/s1"]
    assert [a.claim.key for a in need.asks] == ["default/c"]


def test_allocated_claims_that_cannot_be_used_are_refused() -> None:
    p = pod(PodClaim("a", claim_name="s1"), PodClaim("b", claim_name="s2"))
    with pytest.raises(ClaimRefusedError, match="lie on different nodes: default/s1 on n1, default/s2 on n2"):
        claim_need(p, {"s1": allocated("s1", "n1"), "s2": allocated("s2", "n2")}, PROTOCOL)
    with pytest.raises(ClaimRefusedError, match="without devices of driver"):
        claim_need(pod(PodClaim("a", claim_name="s1")), {"s1": allocated("s1", "n1", driver="x.example.com")},
                   PROTOCOL)
    full = tuple(f"u{i}" for i in range(256))
    with pytest.raises(ClaimRefusedError, match="already reserved for 256 pods"):
        claim_need(pod(PodClaim("a", claim_name="s1")), {"s1": allocated("s1", "n1", reserved=full)}, PROTOCOL)
    listed = claim_need(attrs.evolve(pod(PodClaim("a", claim_name="s1")), uid="u3"),
                        {"s1": allocated("s1", "n1", reserved=full)}, PROTOCOL)
    assert listed.node == "n1"  # a pod already listed needs no new entry


def test_the_request_gains_the_asks_and_the_plan_keeps_only_the_pods_own_containers() -> None:
    from domain.request import ContainerRequest, PodRequest
    need = claim_need(pod(PodClaim("g", claim_name="c")), {"c": claim("c", share(cores="30", memory="4Gi"))},
                      PROTOCOL)
    base = PodRequest("p", (ContainerRequest("main", core_milli=100, memory_bytes=GiB),), cpu_milli=500)
    request = need.request(base)
    assert [c.name for c in request.containers] == ["main", "dra-claim/g/r"]
    assert request.cpu_milli == 500
    allocation = PodAllocation("p", "n1", (ContainerGrant("main", (GpuGrant(0, 100, GiB),)),
                                           ContainerGrant("dra-claim/g/r", (GpuGrant(1, 300, 4 * GiB),))))
    assert [c.container for c in without_asks(allocation).containers] == ["main"]


GPUS = (Gpu(0, GpuUuid("GPU-0"), "A100", 16 * GiB), Gpu(1, GpuUuid("GPU-1"), "A100", 16 * GiB + 100))


def test_results_name_device_pool_consumed_capacity_and_a_share_id_per_device() -> None:
    need = claim_need(pod(PodClaim("g", claim_name="c")),
                      {"c": claim("c", share("a", cores="30", memory="4Gi"), DeviceAsk("b", WHOLE, count=2))},
                      PROTOCOL)
    (ask,) = need.asks
    allocation = PodAllocation("p", "n1", (
        ContainerGrant("dra-claim/g/a", (GpuGrant(1, 300, 4 * GiB),)),
        ContainerGrant("dra-claim/g/b", (GpuGrant(0, 1000, 16 * GiB), GpuGrant(1, 1000, 16 * GiB)), whole=True)))
    ids = (f"id-{i}" for i in itertools.count())
    results = claim_results(ask, allocation, GPUS, PROTOCOL, lambda: next(ids))
    assert results == (
        AllocationResult("a", DRA.driver, "n1", "gpu-1", {"cores": "30", "memory": str(4 * GiB)}, "id-0"),
        AllocationResult("b", DRA.driver, "n1", "gpu-0", {"cores": "100", "memory": str(16 * GiB)}, "id-1"),
        AllocationResult("b", DRA.driver, "n1", "gpu-1", {"cores": "100", "memory": str(16 * GiB)}, "id-2"),
    )
    assert default_memory(GPUS[1], PROTOCOL) == 16 * GiB  # the largest multiple of the 1 GiB step


def test_results_refuse_a_placement_that_grants_an_ask_nothing() -> None:
    need = claim_need(pod(PodClaim("g", claim_name="c")), {"c": claim("c", share(cores="30", memory="4Gi"))},
                      PROTOCOL)
    with pytest.raises(ClaimRefusedError, match="grants it no GPU"):
        claim_results(need.asks[0], PodAllocation("p", "n1"), GPUS, PROTOCOL, lambda: "x")
    placed = PodAllocation("p", "n1", (ContainerGrant("dra-claim/g/r", (GpuGrant(7, 300, 4 * GiB),)),))
    with pytest.raises(ClaimRefusedError, match="lists no GPU 7"):
        claim_results(need.asks[0], placed, GPUS, PROTOCOL, lambda: "x")


def test_a_mig_class_asks_instances_of_its_profile_and_the_results_name_the_booked_instances() -> None:
    assert mig_class_profiles(DRA)["mig-1g-10gb-me.lj-runtimekit.io"] == "1g.10gb+me"
    need = claim_need(pod(PodClaim("g", claim_name="c")), {"c": claim("c", DeviceAsk("m", MIG_3G, count=2))},
                      PROTOCOL)
    (ask,) = need.asks
    (container,) = ask.containers
    assert (container.name, container.mig_profile, container.mig_count) == ("dra-claim/g/m", "3g.40gb", 2)
    assert need.request(PodRequest("p", ())).wants_mig
    mig = MigPodAllocation("p", "n1", (MigBooking(1, "3g.40gb", 0, "dra-claim/g/m"),
                                       MigBooking(0, "3g.40gb", 4, "dra-claim/g/m", create=True),
                                       MigBooking(0, "1g.10gb", 0, "main")))
    results = claim_results(ask, PodAllocation("p", "n1"), GPUS, PROTOCOL, lambda: "unused", mig)
    assert results == (AllocationResult("m", DRA.driver, "n1", "gpu-0-mig-3g-40gb-4"),
                       AllocationResult("m", DRA.driver, "n1", "gpu-1-mig-3g-40gb-0"))
    assert all(r.share_id is None and not r.consumed for r in results)
    with pytest.raises(ClaimRefusedError, match="books 0 of its 2 MIG instances"):
        claim_results(ask, PodAllocation("p", "n1"), GPUS, PROTOCOL, lambda: "x")
    short = attrs.evolve(mig, bookings=mig.bookings[:1])
    with pytest.raises(ClaimRefusedError, match="books 1 of its 2 MIG instances"):
        claim_results(ask, PodAllocation("p", "n1"), GPUS, PROTOCOL, lambda: "x", short)


def test_a_claim_mixing_mig_instances_with_gpus_is_refused_and_a_pod_mixing_them_in_two_claims_too() -> None:
    p = pod(PodClaim("g", claim_name="c"))
    with pytest.raises(ClaimRefusedError, match="asks MIG instances and whole GPUs or shares in one claim"):
        claim_need(p, {"c": claim("c", DeviceAsk("m", MIG_3G), DeviceAsk("w", WHOLE))}, PROTOCOL)
    two = claim_need(pod(PodClaim("g", claim_name="c"), PodClaim("h", claim_name="d")),
                     {"c": claim("c", DeviceAsk("m", MIG_3G)), "d": claim("d", DeviceAsk("w", WHOLE))}, PROTOCOL)
    with pytest.raises(InvalidRequestError, match="time-sharing"):
        two.request(PodRequest("p", ()))
