"""Topology-aware whole-GPU placement in the scheduler: on each simulated machine, without topology, and a pod that
requires a connected set (domain.scheduling.framework.topology; the annotation and inventory codecs)."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, NodeInventory, NodeName
from domain.kube.annotations import decode_inventory, encode_inventory
from domain.kube.objects import ContainerSpec, PodObject
from domain.kube.protocol import ProtocolConstants
from domain.kube.translate import pod_request
from domain.ledger import ClusterLedger
from domain.request import ContainerRequest, PodRequest, single_container_pod
from domain.scheduling.framework.cycle import Scheduler
from domain.scheduling.framework.topology import TopologyClasses
from domain.scheduling.preemption.cluster import fitting_nodes, preemptable_nodes
from domain.scheduling.preemption.victims import Preemptor, RunningPod, select_victims
from domain.scheduling.registry import build_profile
from domain.topology import NodeTopology, Tier, split_connected
from domain.topology.machines import machine_topology
from domain.units import GiB

PROTOCOL = ProtocolConstants()
KEY = PROTOCOL.annotations.pod_gpu_topology


def node(name: str, machine: str, count: int = 8) -> NodeInventory:
    gpus = tuple(Gpu(i, GpuUuid(f"GPU-{name}-{i}"), "H100", 80 * GiB) for i in range(count))
    return NodeInventory(NodeName(name), gpus, cpu_milli=128_000, memory_bytes=1024 * GiB,
                         topology=machine_topology(machine, count))


def whole(uid: str, gpus: int, tier: Tier = Tier.SYSTEM) -> PodRequest:
    return attrs.evolve(single_container_pod(uid, gpus=gpus), gpu_topology=tier)


def hold(ledger: ClusterLedger, name: str, *indexes: int) -> None:
    grants = tuple(GpuGrant(i, 1000, 80 * GiB) for i in indexes)
    ledger.reserve(PodAllocation(f"held-{name}-{indexes}", name, (ContainerGrant("m", grants, whole=True),)))


def placed(ledger: ClusterLedger, pod: PodRequest, policy: str = "binpack") -> tuple[int, ...] | None:
    result = Scheduler(ledger, build_profile(policy, ledger, rng=np.random.default_rng(0))).schedule(pod)
    if result.allocation is None:
        return None
    return tuple(g.gpu_index for c in result.allocation.containers for g in c.grants)


@pytest.mark.parametrize("policy", ["binpack", "best-fit", "spread"])
def test_islands_machine_keeps_the_whole_island_for_a_four_gpu_pod(policy: str) -> None:
    ledger = ClusterLedger([node("n", "nvlink-islands-2x4")])
    hold(ledger, "n", 4)  # island 4-7 is partly used
    assert placed(ledger, whole("two", 2), policy) == (6, 7)  # first-by-index would break island 0-3
    assert placed(ledger, whole("four", 4, Tier.NVLINK), policy) == (0, 1, 2, 3)


def test_without_topology_the_first_free_gpus_by_index_as_before() -> None:
    ledger = ClusterLedger([node("n", "none")])
    hold(ledger, "n", 4)
    assert placed(ledger, whole("two", 2)) == (0, 1)
    assert placed(ledger, whole("one", 1)) == (2,)


def test_pcie_pairs_machine_gives_a_pair_on_one_root_before_one_numa_node() -> None:
    ledger = ClusterLedger([node("n", "pcie-pairs-2numa")])
    hold(ledger, "n", 0, 3, 5)  # free: 1, 2 (NUMA 0, two roots), 4 (NUMA 1), 6, 7 (one root)
    assert placed(ledger, whole("pair", 2)) == (6, 7)
    ledger = ClusterLedger([node("n", "pcie-pairs-2numa")])
    hold(ledger, "n", 0, 3, 5, 6)  # free: 1, 2 (NUMA 0), 4, 7 (NUMA 1): no two on one root
    assert placed(ledger, whole("numa", 2, Tier.NUMA)) == (1, 2)
    result = Scheduler(ledger, build_profile("binpack", ledger, rng=np.random.default_rng(0))).schedule(
        whole("root", 2, Tier.PCIE_ROOT))
    assert not result.scheduled
    assert result.rejected == (("no 2 free GPUs connected by pcie-root or better (GPU topology required by the pod)",
                                1),)


def test_nvswitch_machine_places_eight_connected_gpus() -> None:
    ledger = ClusterLedger([node("n", "nvswitch8")])
    assert placed(ledger, whole("eight", 8, Tier.NVLINK)) == tuple(range(8))


def test_required_topology_picks_the_node_that_can_meet_it() -> None:
    ledger = ClusterLedger([node("a-islands", "nvlink-islands-2x4"), node("b-switch", "nvswitch8"),
                            node("c-unknown", "none")])
    result = Scheduler(ledger, build_profile("binpack", ledger, rng=np.random.default_rng(0))).schedule(
        whole("eight", 8, Tier.NVLINK))
    assert result.allocation is not None
    assert result.allocation.node == "b-switch"
    assert dict(result.rejected) == {
        "no 8 free GPUs connected by nvlink or better (GPU topology required by the pod); 1 of these nodes report "
        "no GPU topology (node Runtime before 1.2.0, or the backend does not know it)": 2,
    }


@pytest.mark.parametrize("containers", [(500,), (500, 300)], ids=["one share", "two shares"])
def test_required_topology_needs_whole_gpus(containers: tuple[int, ...]) -> None:
    ledger = ClusterLedger([node("n", "nvswitch8")])
    asks = tuple(ContainerRequest(f"c{i}", core_milli=milli) for i, milli in enumerate(containers))
    share = PodRequest("s", containers=asks, gpu_topology=Tier.NVLINK)
    result = Scheduler(ledger, build_profile("binpack", ledger, rng=np.random.default_rng(0))).schedule(share)
    assert not result.scheduled
    assert "GPU topology nvlink is required, which only a pod asking for whole GPUs can get" in result.reason
    assert placed(ledger, attrs.evolve(share, gpu_topology=Tier.SYSTEM)) is not None  # no requirement: unchanged


def _pod(annotations: dict[str, str]) -> PodObject:
    return PodObject(uid="u1", namespace="ns", name="p", annotations=annotations,
                     containers=(ContainerSpec("m", limits={PROTOCOL.resources.gpu: "2"}),))


def test_the_pod_annotation_sets_the_requirement_and_a_bad_value_names_it() -> None:
    assert pod_request(_pod({}), PROTOCOL).gpu_topology is Tier.SYSTEM
    assert pod_request(_pod({KEY: " NVLink "}), PROTOCOL).gpu_topology is Tier.NVLINK
    assert pod_request(_pod({KEY: "pcie-root"}), PROTOCOL).gpu_topology is Tier.PCIE_ROOT
    with pytest.raises(InvalidRequestError, match=r"lj-runtimekit.io/gpu-topology.*must be one of nvlink"):
        pod_request(_pod({KEY: "fast"}), PROTOCOL)


def test_inventory_annotation_carries_the_topology() -> None:
    inventory = node("n", "nvlink-islands-2x4")
    assert inventory.topology is not None
    text = encode_inventory(inventory.gpus, heartbeat=1.0, protocol="fp", topology=inventory.topology)
    record = decode_inventory(text, key="k")
    assert record.topology == inventory.topology
    plain = decode_inventory(encode_inventory(inventory.gpus, heartbeat=1.0, protocol="fp"), key="k")
    assert plain.topology is None
    assert '"topology"' not in encode_inventory(inventory.gpus, heartbeat=1.0, protocol="fp")
    bad = text.replace('"pcieRoot":"pci0000:10"', '"pcieRoot":"17:00.0"', 1)
    assert bad != text
    with pytest.raises(InvalidRequestError, match=r"k\.gpus\[0\]\.topology\.pcieRoot"):
        decode_inventory(bad, key="k")
    with pytest.raises(InvalidRequestError, match="describes GPUs the node lacks"):
        NodeInventory(NodeName("n"), inventory.gpus[:2], topology=inventory.topology)
    assert NodeTopology({}).islands() == ()


@pytest.mark.parametrize("seed", range(5))
def test_ties_go_to_the_node_with_a_connected_set(seed: int) -> None:
    ledger = ClusterLedger([node("a", "nvlink-islands-2x4"), node("b", "nvlink-islands-2x4")])
    hold(ledger, "a", 0, 4)  # both islands broken: 4 GPUs would span them
    hold(ledger, "b", 0, 1)  # island 4-7 whole
    scheduler = Scheduler(ledger, build_profile("binpack", ledger, rng=np.random.default_rng(seed)))
    result = scheduler.schedule(whole("four", 4))
    assert result.allocation is not None
    assert (result.allocation.node, tuple(g.gpu_index for g in result.allocation.containers[0].grants)) == (
        "b", (4, 5, 6, 7))


def test_ties_on_wide_nodes_take_the_unpacked_path() -> None:
    ledger = ClusterLedger([node("a", "nvlink-islands-2x4", 64), node("b", "nvlink-islands-2x4", 64)])
    hold(ledger, "a", *range(1, 64, 2))  # every other GPU: no 32 NVLink-connected free GPUs on a... nor on b
    hold(ledger, "b", *range(32, 64))  # island 0-31 whole on b
    scheduler = Scheduler(ledger, build_profile("binpack", ledger, rng=np.random.default_rng(0)))
    result = scheduler.schedule(whole("big", 32))
    assert result.allocation is not None
    assert result.allocation.node == "b"
    assert [g.gpu_index for g in result.allocation.containers[0].grants] == list(range(32))


def test_each_profile_numbers_topologies_on_its_own() -> None:
    # profiles built one after another on one ledger (the replay rebuilds them) must not read each other's numbers
    ledger = ClusterLedger([node("a", "none"), node("b", "nvswitch8")])
    slots = np.array([ledger.slot("a"), ledger.slot("b")], dtype=np.int64)
    first = TopologyClasses()
    assert first._class(machine_topology("pcie-pairs-2numa", 8)) == 1
    assert first.of(ledger, slots).tolist() == [0, 2]
    second = TopologyClasses()
    assert second.of(ledger, slots).tolist() == [0, 1]
    assert second.topology(1) == machine_topology("nvswitch8", 8)
    for n in range(20):  # fresh profiles each time, the pattern that once read a collected profile's numbers
        assert placed(ledger, whole(f"p{n}", 1, Tier.NVLINK)) is not None or n >= 8


def split(topology: str, free: range | list[int], counts: list[int], tier: Tier = Tier.SYSTEM) -> object:
    return split_connected(machine_topology(topology, 8), free, counts, minimum=tier)


def test_split_gives_the_pod_one_connected_set_and_each_container_a_connected_part() -> None:
    # two 2-GPU containers on 4-GPU islands: one island, an NVLink pair each
    assert split("nvlink-islands-2x4", range(8), [2, 2]) == ((0, 1), (2, 3))
    # GPU 0 used: only island 4-7 holds 4 connected GPUs; the 3-GPU container chooses first, whatever its position
    assert split("nvlink-islands-2x4", range(1, 8), [1, 3]) == ((7,), (4, 5, 6))
    # PCIe pairs: one NUMA node, a pair on one root each; no NVLink set of 4 exists
    assert split("pcie-pairs-2numa", range(8), [2, 2]) == ((0, 1), (2, 3))
    assert split("pcie-pairs-2numa", range(8), [2, 2], Tier.NVLINK) is None
    assert split("nvlink-islands-2x4", [0, 1, 4], [2, 2]) is None  # fewer free than asked
    with pytest.raises(InvalidRequestError, match=r"counts.*one or more integers >= 1"):
        split("nvswitch8", range(8), [2, 0])
    with pytest.raises(InvalidRequestError, match="counts"):
        split("nvswitch8", range(8), [])


def composite(uid: str, *asks: tuple[str, int], tier: Tier = Tier.SYSTEM) -> PodRequest:
    """A pod of containers ``(kind, amount)``: ``("gpus", k)`` whole GPUs or ``("core", milli)`` a share."""
    containers = tuple(ContainerRequest(f"c{i}", gpus=n) if kind == "gpus" else ContainerRequest(f"c{i}", core_milli=n)
                       for i, (kind, n) in enumerate(asks))
    return PodRequest(uid, containers=containers, gpu_topology=tier)


def grants(ledger: ClusterLedger, pod: PodRequest) -> dict[str, tuple[int, ...]] | str:
    """Container → GPU indexes of the pod's allocation (binpack), or the reason it was not placed; the books are
    left as they were."""
    result = Scheduler(ledger, build_profile("binpack", ledger, rng=np.random.default_rng(0))).schedule(pod)
    if result.allocation is None:
        return result.reason
    ledger.release(pod.uid)
    return {c.container: tuple(g.gpu_index for g in c.grants) for c in result.allocation.containers}


def test_a_pod_with_several_whole_gpu_containers_gets_one_island() -> None:
    ledger = ClusterLedger([node("n", "nvlink-islands-2x4")])
    hold(ledger, "n", 0)
    # container by container, first by index, would span both islands: (1, 2) and (3, 4)
    assert grants(ledger, composite("p", ("gpus", 2), ("gpus", 2))) == {"c0": (4, 5), "c1": (6, 7)}
    plain = ClusterLedger([node("n", "none")])
    hold(plain, "n", 0)
    assert grants(plain, composite("p", ("gpus", 2), ("gpus", 2))) == {"c0": (1, 2), "c1": (3, 4)}  # as before


def test_a_share_before_whole_containers_does_not_take_their_gpus() -> None:
    ledger = ClusterLedger([node("n", "nvlink-islands-2x4")])
    hold(ledger, "n", 4)
    # the whole GPUs first, an NVLink pair of the partly used island; the share then opens its last GPU, not GPU 0
    assert grants(ledger, composite("p", ("core", 500), ("gpus", 1), ("gpus", 1))) == {
        "c0": (5,), "c1": (6,), "c2": (7,)}
    plain = ClusterLedger([node("n", "none")])
    hold(plain, "n", 4)
    assert grants(plain, composite("p", ("core", 500), ("gpus", 1), ("gpus", 1))) == {  # as before
        "c0": (0,), "c1": (1,), "c2": (2,)}


@pytest.mark.parametrize("policy", ["binpack", "best-fit", "spread", "random"])
def test_a_share_opening_a_gpu_keeps_whole_islands_free(policy: str) -> None:
    ledger = ClusterLedger([node("n", "nvlink-islands-2x4")])
    hold(ledger, "n", 4)  # island 4-7 partly used, island 0-3 whole
    assert placed(ledger, single_container_pod("s", core_milli=300), policy) == (5,)
    ledger.reserve(PodAllocation("s2", "n", (ContainerGrant("m", (GpuGrant(5, 300, GiB),)),)))
    assert placed(ledger, single_container_pod("s3", core_milli=800), policy) == (6,)  # 5 is too full; 6 opens
    plain = ClusterLedger([node("n", "none")])
    hold(plain, "n", 4)
    assert placed(plain, single_container_pod("s", core_milli=300), policy) == ((6,) if policy == "random" else (0,))


def test_a_share_steered_among_alike_gpus_only() -> None:
    # GPUs of another memory size are not interchangeable: the share stays on the GPU its rule chose
    gpus = tuple(Gpu(i, GpuUuid(f"GPU-n-{i}"), "H100", (40 if i < 4 else 80) * GiB) for i in range(8))
    ledger = ClusterLedger([NodeInventory(NodeName("n"), gpus, cpu_milli=128_000, memory_bytes=1024 * GiB,
                                          topology=machine_topology("nvlink-islands-2x4", 8))])
    hold(ledger, "n", 5)  # island 4-7 (80 GiB GPUs) partly used, island 0-3 (40 GiB GPUs) whole
    assert placed(ledger, single_container_pod("s", core_milli=300, gpu_memory_bytes=10 * GiB)) == (0,)
    assert placed(ledger, single_container_pod("t", core_milli=300, gpu_memory_bytes=50 * GiB)) == (4,)


def test_a_required_topology_applies_to_all_whole_gpus_of_the_pod() -> None:
    split_islands = ClusterLedger([node("n", "nvlink-islands-2x4")])
    hold(split_islands, "n", 0, 4)  # 6 free GPUs, no 4 of them NVLink-connected
    pod = composite("p", ("gpus", 2), ("gpus", 2), ("core", 300), tier=Tier.NVLINK)
    assert grants(split_islands, pod) == (
        "0 nodes available: 1 node(s): no 4 free GPUs connected by nvlink or better (GPU topology required by the pod)")
    assert isinstance(grants(split_islands, attrs.evolve(pod, gpu_topology=Tier.SYSTEM)), dict)  # fits unrequired
    whole_island = ClusterLedger([node("n", "nvlink-islands-2x4")])
    hold(whole_island, "n", 0)
    placed_on = grants(whole_island, pod)
    assert isinstance(placed_on, dict)
    assert (placed_on["c0"], placed_on["c1"]) == ((4, 5), (6, 7))
    no_topology = ClusterLedger([node("n", "none")])
    assert "report no GPU topology" in str(grants(no_topology, pod))


def test_ties_between_nodes_count_all_whole_gpus_of_a_several_container_pod() -> None:
    ledger = ClusterLedger([node("a", "nvlink-islands-2x4"), node("b", "nvlink-islands-2x4")])
    hold(ledger, "a", 0, 4)  # both islands broken: 2 + 2 GPUs would span them
    hold(ledger, "b", 0, 1)  # island 4-7 whole
    for seed in range(5):
        scheduler = Scheduler(ledger, build_profile("binpack", ledger, rng=np.random.default_rng(seed)))
        result = scheduler.schedule(composite(f"p{seed}", ("gpus", 2), ("gpus", 2)))
        assert result.allocation is not None
        assert result.allocation.node == "b"
        ledger.release(result.allocation.pod_uid)


def first_choice(ledger: ClusterLedger, pod: PodRequest, *, first: bool) -> tuple[str, tuple[int, ...]] | None:
    profile = build_profile("binpack", ledger, rng=np.random.default_rng(0), topology_first=first)
    result = Scheduler(ledger, profile).schedule(pod)
    if result.allocation is None:
        return None
    ledger.release(pod.uid)  # the books as before: each call sees the same cluster
    return result.allocation.node, tuple(g.gpu_index for c in result.allocation.containers for g in c.grants)


def test_topology_first_sends_a_multi_gpu_pod_to_the_node_with_an_island_before_the_policy_decides() -> None:
    ledger = ClusterLedger([node("a", "nvlink-islands-2x4"), node("b", "nvlink-islands-2x4")])
    hold(ledger, "a", 0, 4, 5)  # fuller (binpack's choice), but no 4 NVLink-connected free GPUs
    hold(ledger, "b", 0)  # island 4-7 whole
    assert first_choice(ledger, whole("four", 4), first=False) == ("a", (1, 2, 3, 6))
    assert first_choice(ledger, whole("four", 4), first=True) == ("b", (4, 5, 6, 7))
    # a pod of several containers counts all its whole GPUs
    assert first_choice(ledger, composite("pair", ("gpus", 2), ("gpus", 2)), first=True) == ("b", (4, 5, 6, 7))
    # pods of one GPU or a share are the policy's alone
    assert first_choice(ledger, whole("one", 1), first=True) == first_choice(ledger, whole("one", 1), first=False)
    share = single_container_pod("s", core_milli=300)
    assert first_choice(ledger, share, first=True) == first_choice(ledger, share, first=False)


def test_topology_first_never_leaves_a_pod_without_the_nodes_that_fit() -> None:
    ledger = ClusterLedger([node("a", "nvlink-islands-2x4"), node("b", "nvlink-islands-2x4")])
    hold(ledger, "a", 0, 4)  # no 4 NVLink-connected free GPUs on either: both stay, the policy chooses
    hold(ledger, "b", 0, 4, 5)
    assert first_choice(ledger, whole("four", 4), first=True) == ("b", (1, 2, 3, 6))
    assert first_choice(ledger, whole("four", 4), first=False) == ("b", (1, 2, 3, 6))
    # nodes without a topology rank below any that reports one: a set across islands beats an unknown one
    mixed = ClusterLedger([node("a", "nvlink-islands-2x4"), node("b", "none")])
    hold(mixed, "a", 0, 4)
    hold(mixed, "b", 0, 1, 2)
    assert first_choice(mixed, whole("four", 4), first=False) == ("b", (3, 4, 5, 6))
    assert first_choice(mixed, whole("four", 4), first=True) == ("a", (1, 2, 3, 5))
    plain = ClusterLedger([node("a", "none"), node("b", "none")])
    hold(plain, "a", 0)
    assert first_choice(plain, whole("four", 4), first=True) == ("a", (1, 2, 3, 4))  # no topology: the policy's


def test_composite_steering_keeps_to_the_gpus_model() -> None:
    # 80 GiB A100s on island 0-3, 80 GiB H100s on island 4-7: the share's GPU rule picks an A100; an H100 of the
    # partly used island is not interchangeable with it
    gpus = tuple(Gpu(i, GpuUuid(f"GPU-n-{i}"), "A100" if i < 4 else "H100", 80 * GiB) for i in range(8))
    ledger = ClusterLedger([NodeInventory(NodeName("n"), gpus, cpu_milli=128_000, memory_bytes=1024 * GiB,
                                          topology=machine_topology("nvlink-islands-2x4", 8))])
    hold(ledger, "n", 4)
    placed_on = grants(ledger, composite("p", ("core", 300), ("core", 200)))
    assert placed_on == {"c0": (0,), "c1": (0,)}


def test_shares_that_need_the_gpus_of_the_connected_set_go_first() -> None:
    # GPUs 0-1 of 80 GiB, 2-3 of 40 GiB (two NVLink pairs): the best pair (0, 1) would leave the 60 GiB share
    # nowhere; the share goes first, the pair is then (2, 3) — also when NVLink is required
    gpus = tuple(Gpu(i, GpuUuid(f"GPU-n-{i}"), "H100", (80 if i < 2 else 40) * GiB) for i in range(4))
    ledger = ClusterLedger([NodeInventory(NodeName("n"), gpus, cpu_milli=128_000, memory_bytes=1024 * GiB,
                                          topology=machine_topology("nvlink-islands-2x4", 4))])
    share = ContainerRequest("a", core_milli=300, memory_bytes=60 * GiB)
    pod = PodRequest("p", containers=(share, ContainerRequest("b", gpus=2)))
    assert grants(ledger, pod) == {"a": (0,), "b": (2, 3)}
    assert grants(ledger, attrs.evolve(pod, gpu_topology=Tier.NVLINK)) == {"a": (0,), "b": (2, 3)}
    # without a topology the container-by-container plan alone: the share on GPU 0, the pair on 1 and 2; with the
    # pair declared first it takes 0 and 1 and the share fits nowhere (no shares-first there)
    plain = ClusterLedger([NodeInventory(NodeName("n"), gpus, cpu_milli=128_000, memory_bytes=1024 * GiB)])
    assert grants(plain, pod) == {"a": (0,), "b": (1, 2)}
    pair_first = attrs.evolve(pod, containers=pod.containers[::-1])
    assert "the pod's containers do not all fit" in str(grants(plain, pair_first))
    assert grants(ledger, pair_first) == {"b": (2, 3), "a": (0,)}
    # GPU 2 used: the only NVLink pair left, (0, 1), is where the share must go: refused with a reason naming the
    # requirement (unrequired, the share on 0 and GPUs 1 and 3 fit)
    ledger.reserve(PodAllocation("used", "n", (ContainerGrant("m", (GpuGrant(2, 1000, 40 * GiB),), whole=True),)))
    assert grants(ledger, pod) == {"a": (0,), "b": (1, 3)}
    refused = grants(ledger, attrs.evolve(pod, gpu_topology=Tier.NVLINK))
    assert refused == ("0 nodes available: 1 node(s): no 2 free GPUs connected by nvlink or better (GPU topology "
                       "required by the pod)")


def test_a_lone_init_gpu_container_is_placed_by_topology_in_preemption_too() -> None:
    ledger = ClusterLedger([node("n", "nvlink-islands-2x4")])
    hold(ledger, "n", 4)
    pod = PodRequest("i", containers=(ContainerRequest("setup", gpus=2, init=True),), gpu_topology=Tier.NVLINK)
    assert grants(ledger, pod) == {"setup": (6, 7)}
    outcome = select_victims(ledger, "n", Preemptor(pod, 1000), [])
    assert outcome.victims is not None
    assert [g.gpu_index for c in outcome.victims.allocation.containers for g in c.grants] == [6, 7]
    assert outcome.victims.allocation.containers[0].init


def test_preemption_reaches_nodes_where_only_a_connected_set_is_missing() -> None:
    ledger = ClusterLedger([node("a", "nvlink-islands-2x4"), node("b", "none")])
    hold(ledger, "a", 0)
    hold(ledger, "a", 4)
    hold(ledger, "b", 0)
    four = whole("four", 4, Tier.NVLINK)
    for first in (False, True):
        scheduler = Scheduler(ledger, build_profile("binpack", ledger, rng=np.random.default_rng(0),
                                                    topology_first=first))
        assert not scheduler.schedule(four).scheduled  # 6 free GPUs on a, none 4 NVLink-connected
        assert preemptable_nodes(scheduler, four) == ["a"]  # b reports no topology: no eviction gives it one
        held = [RunningPod(f"held-a-({i},)", 0) for i in (0, 4)]
        outcome = select_victims(ledger, "a", Preemptor(four, 1000), held)
        assert outcome.victims is not None
        assert len(outcome.victims.uids) == 1
        assert select_victims(ledger, "b", Preemptor(four, 1000), [RunningPod("held-b-(0,)", 0)]).victims is None
    mixed = composite("mixed", ("gpus", 2), ("core", 500))
    full = ClusterLedger([node("a", "nvlink-islands-2x4"), node("b", "nvlink-islands-2x4")])
    hold(full, "a", *range(8))
    hold(full, "b", *range(6))
    scheduler = Scheduler(full, build_profile("binpack", full, rng=np.random.default_rng(0), topology_first=True))
    assert preemptable_nodes(scheduler, mixed) == ["a", "b"]  # a preference never narrows where preemption looks
    shares = composite("shares", ("core", 500), ("core", 500), tier=Tier.NVLINK)
    assert preemptable_nodes(scheduler, shares) == []  # no whole GPU: no eviction meets a requirement
    roomy = ClusterLedger([node("a", "nvlink-islands-2x4"), node("b", "nvlink-islands-2x4")])
    hold(roomy, "a", 0, 1)  # both fit a 2-GPU pod; topology first would keep only a (an NVLink pair)
    hold(roomy, "b", 0, 1, 2, 4, 5, 6)  # b: GPUs 3 and 7 free, on two islands
    scheduler = Scheduler(roomy, build_profile("binpack", roomy, rng=np.random.default_rng(0), topology_first=True))
    assert fitting_nodes(scheduler, whole("two", 2)) == {"a", "b"}
