"""The standalone scheduler allocates DRA claims itself (``services.scheduler.claimcycle``): placed with the pod
by the ledger's policy, written as kube-scheduler writes them, counted once, rolled back when the binding fails,
rebuilt after a restart."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest

from adapters.memory.resource_claims import InMemoryResourceClaims
from adapters.prometheus import PrometheusSchedulerMetrics
from domain.dra.claims import AllocationResult, ClaimAllocation, DeviceAsk
from domain.kube.objects import ClusterEvent, ContainerSpec, PodClaim, PodObject
from domain.units import GiB
from ports.claim_writes import DELETE_PROTECTION
from ports.cluster import UnavailableError
from services.scheduler.commit import CommitError
from services.scheduler.service import SchedulerService, ServiceConfig
from services.scheduler.standalone import StandaloneLoop
from support.kube_builders import KEYS, NOW, PROTOCOL, Clock, make_node
from support.scheduler_world import FlakyCluster, World

DRA = PROTOCOL.dra


@attrs.define
class ClaimWorld(World):
    """:class:`~support.scheduler_world.World` with DRA claims (in memory, also the claim writer) and the loop."""

    claims: InMemoryResourceClaims = attrs.field(kw_only=True)
    loop: StandaloneLoop = attrs.field(kw_only=True)

    def claim(self, name: str, *asks: DeviceAsk) -> ClaimAllocation:
        return self.claims.put(ClaimAllocation("default", name, f"uid-{name}", requests=asks))

    def pod(self, name: str, *claims: PodClaim, core: str | None = None, priority: int = 0) -> PodObject:
        limits = {} if core is None else {PROTOCOL.resources.core: core, PROTOCOL.resources.memory: "1"}
        pod = self.cluster.create_pod(PodObject("", "default", name, containers=(ContainerSpec("main", limits=limits),),
                                                scheduler_name=PROTOCOL.scheduler_name, resource_claims=claims,
                                                priority=priority))
        self.service.on_pod(pod)
        return pod

    def reasons(self, name: str) -> list[str]:
        return [e.message for e in self.cluster.events if isinstance(e, ClusterEvent) and e.name == name
                and e.reason == "FailedScheduling"]


def new_world(claims: InMemoryResourceClaims | None = None, cluster: FlakyCluster | None = None,
              nodes: tuple[str, ...] = ("n1",), leading: Callable[[], bool] = lambda: True) -> ClaimWorld:
    claims = claims or InMemoryResourceClaims()
    cluster = cluster or FlakyCluster()
    metrics, clock = PrometheusSchedulerMetrics(), Clock(NOW)
    service = SchedulerService(cluster, PROTOCOL, metrics,
                               config=ServiceConfig(policy="binpack", admission_hold_seconds=None), clock=clock,
                               claims=claims, claim_writes=claims, is_leader=leading)
    for name in nodes:
        try:
            node = cluster.create_node(make_node(name))
        except Exception:  # already there: a restarted scheduler over the same cluster
            node = cluster.get_node(name)
        service.on_node(node)
    return ClaimWorld(cluster, service, metrics, clock, [True], claims=claims, loop=StandaloneLoop(service))


def share(cores: str = "30", memory: str = "4Gi") -> DeviceAsk:
    return DeviceAsk("r", DRA.device_class_share, capacity={"cores": cores, "memory": memory})


def test_a_share_claim_is_placed_allocated_reserved_and_counted_once() -> None:
    w = new_world()
    w.claim("c", share())
    pod = w.pod("p", PodClaim("g", claim_name="c"))
    assert w.loop.attempt(pod)
    stored = w.claims.get("default", "c")
    assert stored is not None
    (result,) = stored.results
    assert (result.request, result.driver, result.pool, result.device) == ("r", DRA.driver, "n1", "gpu-0")
    assert result.consumed == {"cores": "30", "memory": str(4 * GiB)}
    assert result.share_id
    assert stored.allocated
    assert stored.reserved_for == (pod.uid,)
    assert w.claims.finalizers[stored.uid] == {DELETE_PROTECTION}
    assert w.used("n1") == [(300, 4), (0, 0)]  # before the watch shows the pod bound: the claim's record alone
    bound = w.deliver("p")
    assert bound.node_name == "n1"
    assert "dra-claim/" not in bound.annotations[KEYS.pod_plan]
    assert w.used("n1") == [(300, 4), (0, 0)]
    w.service.on_claim(stored)  # the informer's event for the written claim
    assert w.used("n1") == [(300, 4), (0, 0)]


def test_claims_and_the_pods_own_share_are_packed_by_one_policy() -> None:
    w = new_world()
    w.claim("c", share("50", "8Gi"))
    pod = w.pod("p", PodClaim("g", claim_name="c"), core="40")
    assert w.loop.attempt(pod)
    w.deliver("p")
    assert w.used("n1") == [(900, 9), (0, 0)]  # binpack: the claim's share beside the pod's own on GPU 0


def test_a_whole_gpu_claim_and_a_second_that_no_longer_fits() -> None:
    w = new_world()
    w.claim("c1", DeviceAsk("r", DRA.device_class_gpu, count=2))
    w.claim("c2", share("10", "1Gi"))
    first = w.pod("p1", PodClaim("g", claim_name="c1"))
    assert w.loop.attempt(first)
    assert [r.device for r in w.claims.get("default", "c1").results] == ["gpu-0", "gpu-1"]  # type: ignore[union-attr]
    second = w.pod("p2", PodClaim("g", claim_name="c2"))
    assert not w.loop.attempt(second)
    assert "no GPU with enough free core and memory" in w.reasons("p2")[-1]
    assert not w.claims.get("default", "c2").allocated  # type: ignore[union-attr]


def test_a_shared_claim_pins_the_next_pod_to_its_node_and_reserves_it_too() -> None:
    w = new_world(nodes=("n1", "n2"))
    w.claim("c", share())
    first = w.pod("p1", PodClaim("g", claim_name="c"))
    assert w.loop.attempt(first)
    node = w.deliver("p1").node_name
    second = w.pod("p2", PodClaim("g", claim_name="c"))
    assert w.loop.attempt(second)
    assert w.deliver("p2").node_name == node
    assert w.claims.get("default", "c").reserved_for == (first.uid, second.uid)  # type: ignore[union-attr]
    assert sum(core for core, _ in w.used(node)) == 300  # the claim once, not once per pod


def test_a_claim_changed_after_it_was_read_fails_the_commit_and_the_retry_reads_it_again() -> None:
    w = new_world()
    w.claim("c", share())
    pod = w.pod("p", PodClaim("g", claim_name="c"))
    need = w.service.claim_need(pod)
    assert not isinstance(need, str)
    result = w.service.schedule_pod(pod, claims=need)
    assert result.allocation is not None
    w.claims.put(w.claims.get("default", "c"))  # type: ignore[arg-type]  # someone wrote it: a new resourceVersion
    with pytest.raises(CommitError, match="changed since it was read"):
        w.service.commit(pod, result.allocation, claims=need)
    assert w.used("n1") == [(0, 0), (0, 0)]
    assert not w.claims.get("default", "c").allocated  # type: ignore[union-attr]
    assert w.loop.attempt(pod)
    assert w.claims.get("default", "c").reserved_for == (pod.uid,)  # type: ignore[union-attr]


def test_a_failed_binding_rolls_the_claims_back() -> None:
    w = new_world()
    w.claim("c", share())
    pod = w.pod("p", PodClaim("g", claim_name="c"))
    w.cluster.bind_failures.append(UnavailableError("API server down"))
    heard: list[tuple[str, str]] = []
    w.service.claim_listeners.append(lambda namespace, name: heard.append((namespace, name)))
    rolled_back: list[int] = []
    w.service.room_listeners.append(lambda: rolled_back.append(1))
    assert not w.loop.attempt(pod)
    assert heard == [("default", "c"), ("default", "c")]  # allocated by us, then rolled back
    assert rolled_back  # the room the claim held counts as given back
    stored = w.claims.get("default", "c")
    assert stored is not None
    assert not stored.allocated
    assert stored.results == ()
    assert stored.reserved_for == ()
    assert stored.uid not in w.claims.finalizers
    assert w.used("n1") == [(0, 0), (0, 0)]
    assert "binding to node n1 failed" in w.reasons("p")[-1]


def test_a_replica_deposed_before_the_claim_writes_writes_nothing() -> None:
    answers = iter([True, False])  # the commit's first check, then right before the first claim write
    w = new_world(leading=lambda: next(answers, False))
    w.claim("c", share())
    pod = w.pod("p", PodClaim("g", claim_name="c"))
    assert not w.loop.attempt(pod)
    assert not w.claims.get("default", "c").allocated  # type: ignore[union-attr]
    assert w.cluster.get_pod("default", "p").node_name == ""
    assert w.used("n1") == [(0, 0), (0, 0)]


def test_claims_written_by_a_replica_deposed_before_the_binding_stay_for_the_next_leader() -> None:
    answers = iter([True, True, False])  # the commit's check, the claim write's, then the binding's
    w = new_world(leading=lambda: next(answers, False))
    w.claim("c", share())
    pod = w.pod("p", PodClaim("g", claim_name="c"))
    assert not w.loop.attempt(pod)
    stored = w.claims.get("default", "c")
    assert stored is not None
    assert stored.reserved_for == (pod.uid,)  # not rolled back: the next leader may already be using it
    successor = new_world(w.claims, w.cluster)
    successor.service.resync()
    successor.service.on_pod(w.cluster.get_pod("default", "p"))
    assert successor.loop.attempt(w.cluster.get_pod("default", "p"))
    assert successor.deliver("p").node_name == "n1"
    assert w.claims.get("default", "c") == stored  # reused as written: no new allocation
    assert successor.used("n1") == [(300, 4), (0, 0)]


def test_pods_wait_for_their_template_claim_and_a_missing_claim() -> None:
    w = new_world()
    waiting = w.pod("p1", PodClaim("g", template_name="t"))
    assert not w.loop.attempt(waiting)
    assert "waiting for the ResourceClaim made from template 't'" in w.reasons("p1")[-1]
    missing = w.pod("p2", PodClaim("g", claim_name="nope"))
    assert not w.loop.attempt(missing)
    assert "ResourceClaim default/nope does not exist" in w.reasons("p2")[-1]
    w.claim("p1-g-x", share())
    # the in-memory cluster has no resourceclaim controller: the pod's status names the claim by hand
    generated = attrs.evolve(waiting, resource_claims=(PodClaim("g", template_name="t", generated="p1-g-x"),))
    assert w.loop.attempt(generated)
    assert w.claims.get("default", "p1-g-x").reserved_for == (waiting.uid,)  # type: ignore[union-attr]


def test_a_restarted_scheduler_rebuilds_the_same_books_from_claims_and_plans() -> None:
    w = new_world()
    w.claim("c", share())
    pod = w.pod("p", PodClaim("g", claim_name="c"), core="20")
    assert w.loop.attempt(pod)
    w.deliver("p")
    before = w.used("n1")
    restarted = new_world(w.claims, w.cluster)
    restarted.service.resync()
    assert restarted.used("n1") == before == [(500, 5), (0, 0)]


def test_extender_mode_chooses_the_node_by_the_claims_and_leaves_their_allocation_to_kube_scheduler() -> None:
    from services.scheduler.extender import Extender

    w = new_world(nodes=("n1", "n2"))
    for name in ("busy-0", "busy-1"):  # n1: both GPUs at 60 %; binpack would put a claim-less pod there
        w.claim(name, share("60", "8Gi"))
        assert w.loop.attempt(w.pod(name, PodClaim("g", claim_name=name)))
        w.deliver(name)
    assert w.used("n1") == [(600, 8), (600, 8)]
    w.service.start_leading()  # the extender answers only as the serving leader
    extender = Extender(w.service, rank_all_pods=True)
    w.claim("c", share("50", "4Gi"))
    pod = w.pod("p", PodClaim("g", claim_name="c"))
    assert extender.filter(pod, ["n1", "n2"]).passed == ("n2",)
    assert w.used("n2") == [(500, 4), (0, 0)]  # the reservation holds what the claim asks
    stored = w.claims.get("default", "c")
    assert stored is not None
    # kube-scheduler's DynamicResources PreBind allocates (first fit on our node) before calling our bind
    written = w.claims.put(attrs.evolve(stored, allocated=True, reserved_for=(pod.uid,), results=(
        AllocationResult("r", DRA.driver, "n2", "gpu-1", {"cores": "50", "memory": "4Gi"}, "s"),)))
    w.service.on_claim(written)
    assert w.used("n2") == [(0, 0), (500, 4)]  # handed over to the claim's record: counted once, never twice
    assert extender.bind("default", "p", pod.uid, "n2") == ""
    assert "dra-claim/" not in w.deliver("p").annotations[KEYS.pod_plan]
    assert w.used("n2") == [(0, 0), (500, 4)]


def test_extender_bind_without_the_filter_result_plans_no_ask() -> None:
    from services.scheduler.extender import Extender

    w = new_world()
    w.service.start_leading()
    w.claim("c", share("30", "4Gi"))
    pod = w.pod("p", PodClaim("g", claim_name="c"), core="20")
    assert Extender(w.service, rank_all_pods=True).filter(pod, ["n1"]).passed == ("n1",)
    other = Extender(w.service, rank_all_pods=True)  # remembers nothing of the filter (a restart, an overflow)
    assert other.bind("default", "p", pod.uid, "n1") == ""
    assert "dra-claim/" not in w.deliver("p").annotations[KEYS.pod_plan]
    assert w.used("n1") == [(200, 1), (0, 0)]  # the pod's own share; the claim counts once kube-scheduler writes it


class EchoClaims(InMemoryResourceClaims):
    """Claims whose informer event reaches the service before the write's answer does."""

    service: SchedulerService | None = None

    def allocate(self, *args: object, **kwargs: object) -> ClaimAllocation:
        stored = super().allocate(*args, **kwargs)  # type: ignore[arg-type]
        assert self.service is not None
        self.service.on_claim(stored)
        return stored


def test_an_informer_event_ahead_of_the_writes_answer_counts_the_claim_once() -> None:
    claims = EchoClaims()
    w = new_world(claims)
    claims.service = w.service
    w.claim("c", DeviceAsk("r", DRA.device_class_gpu))
    assert w.loop.attempt(w.pod("p", PodClaim("g", claim_name="c")))
    with w.service.books() as books:
        assert not books.overbooked
    assert w.used("n1") == [(1000, 16), (0, 0)]


def test_a_pod_with_gpu_init_containers_and_claims_is_refused_before_anything_is_written() -> None:
    w = new_world()
    w.claim("c", share("50", "4Gi"))
    init = ContainerSpec("setup", limits={PROTOCOL.resources.core: "60", PROTOCOL.resources.memory: "1"}, init=True)
    pod = w.cluster.create_pod(PodObject("", "default", "p", containers=(init, ContainerSpec("main")),
                                         scheduler_name=PROTOCOL.scheduler_name,
                                         resource_claims=(PodClaim("g", claim_name="c"),)))
    w.service.on_pod(pod)
    assert not w.loop.attempt(pod)
    assert "init container asking GPU resources" in w.reasons("p")[-1]
    assert not w.claims.get("default", "c").allocated  # type: ignore[union-attr]


def test_a_claim_pod_preempts_the_pod_whose_own_claim_holds_the_gpu_it_needs() -> None:
    w = new_world()
    for name in ("low", "shared"):
        w.claim(name, DeviceAsk("r", DRA.device_class_gpu))
    low = w.pod("low", PodClaim("g", claim_name="low"), priority=1)
    assert w.loop.attempt(low)
    w.deliver("low")
    users = [w.pod(f"user-{i}", PodClaim("g", claim_name="shared"), priority=1) for i in range(2)]
    for user in users:
        assert w.loop.attempt(user)
        w.deliver(user.name)
    assert w.used("n1") == [(1000, 16), (1000, 16)]
    w.claim("high", DeviceAsk("r", DRA.device_class_gpu))
    high = w.pod("high", PodClaim("g", claim_name="high"), priority=1000)
    assert not w.loop.attempt(high)
    assert "evicting default/low" in w.reasons("high")[-1]  # the shared claim's two pods would free nothing
    assert w.service.nominated_node(high.uid) == "n1"
    assert w.deliver("low").deletion_timestamp is not None  # the informer shows it terminating
    assert not w.loop.attempt(w.deliver("high"))  # nothing more evicted
    # kubelet ends the victim; before the resourceclaim controller deallocates its claim, a retry evicts nobody more
    w.cluster.delete_pod("default", "low")
    w.service.on_pod_deleted(low)
    assert not w.loop.attempt(w.deliver("high"))
    assert w.reasons("high")[-1].endswith("waiting for the pods it evicted to terminate")
    assert all(w.deliver(user.name).deletion_timestamp is None for user in users)
    assert w.service.nominated_node(high.uid) == "n1"
    # the resourceclaim controller takes it out of reservedFor and deallocates
    freed = w.claims.unreserve(w.claims.get("default", "low"), low.uid, deallocate=True)  # type: ignore[arg-type]
    w.service.on_claim(freed)
    assert w.loop.attempt(high)
    assert w.deliver("high").node_name == "n1"


def test_claims_the_informer_showed_are_placed_without_reading_the_api() -> None:
    class NoReads(InMemoryResourceClaims):
        def get(self, namespace: str, name: str) -> ClaimAllocation | None:
            raise AssertionError(f"read {namespace}/{name}")

    claims = NoReads()
    w = new_world(claims)
    w.service.on_claim(w.claim("c", share()))  # the informer's event
    pod = w.pod("p", PodClaim("g", claim_name="c"))
    assert w.loop.attempt(pod)
    assert w.claims.list_claims().items[0].reserved_for == (pod.uid,)


def test_a_victims_claim_the_preemptor_shares_is_not_counted_as_freed() -> None:
    w = new_world()
    for name in ("s", "t", "n"):
        w.claim(name, DeviceAsk("r", DRA.device_class_gpu))
    v = w.pod("v", PodClaim("g", claim_name="s"), priority=0)  # holds claim s alone
    assert w.loop.attempt(v)
    w.deliver("v")
    assert w.loop.attempt(w.pod("w", PodClaim("g", claim_name="t"), priority=1))
    w.deliver("w")
    high = w.pod("high", PodClaim("a", claim_name="s"), PodClaim("b", claim_name="n"), priority=1000)
    assert not w.loop.attempt(high)
    # evicting v would end s's only reservation, but high uses s: only w's claim t frees a GPU it can take
    assert "evicting default/w" in w.reasons("high")[-1]


def test_extender_leaves_claims_to_kube_scheduler_on_nodes_whose_gpus_only_the_dra_driver_publishes() -> None:
    from services.scheduler.extender import Extender

    w = new_world()
    w.service.on_node(w.cluster.create_node(make_node("dra-only", annotation=None)))  # no device-plugin inventory
    w.service.start_leading()
    w.claim("c", share("30", "4Gi"))
    pod = w.pod("p", PodClaim("g", claim_name="c"))
    extender = Extender(w.service, rank_all_pods=True)
    assert extender.filter(pod, ["dra-only"]).passed == ("dra-only",)  # placed as if it had no claims
    assert extender.bind("default", "p", pod.uid, "dra-only") == ""
    assert w.deliver("p").node_name == "dra-only"


def test_a_resync_listing_a_claim_allocated_meanwhile_hands_the_asks_over_too() -> None:
    from services.scheduler.extender import Extender

    w = new_world()
    w.service.start_leading()
    w.claim("c", DeviceAsk("r", DRA.device_class_gpu))
    pod = w.pod("p", PodClaim("g", claim_name="c"))
    assert Extender(w.service, rank_all_pods=True).filter(pod, ["n1"]).passed == ("n1",)
    stored = w.claims.get("default", "c")
    assert stored is not None
    w.claims.put(attrs.evolve(stored, allocated=True, reserved_for=(pod.uid,), results=(
        AllocationResult("r", DRA.driver, "n1", "gpu-0"),)))  # kube-scheduler's write; its event not delivered
    w.service.resync()
    with w.service.books() as books:
        assert not books.overbooked
    assert w.used("n1") == [(1000, 16), (0, 0)]
