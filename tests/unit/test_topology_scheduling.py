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
from domain.request import PodRequest, single_container_pod
from domain.scheduling.framework.cycle import Scheduler
from domain.scheduling.framework.topology import TopologyClasses
from domain.scheduling.registry import build_profile
from domain.topology import NodeTopology, Tier
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


def test_required_topology_needs_one_whole_gpu_container() -> None:
    ledger = ClusterLedger([node("n", "nvswitch8")])
    share = attrs.evolve(single_container_pod("s", core_milli=500), gpu_topology=Tier.NVLINK)
    result = Scheduler(ledger, build_profile("binpack", ledger, rng=np.random.default_rng(0))).schedule(share)
    assert not result.scheduled
    assert "only a pod with one container asking for whole GPUs" in result.reason
    assert placed(ledger, single_container_pod("plain", core_milli=500)) is not None  # no requirement: unchanged


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
