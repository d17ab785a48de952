"""The best-connected choice of whole GPUs (domain.topology) on each simulated machine."""

from __future__ import annotations

import pytest

from domain.errors import InvalidRequestError
from domain.topology import GpuTopology, NodeTopology, NvLinkPeer, Tier, best_connected, can_connect, least_breaking
from domain.topology.machines import machine_topology

ALL = range(8)


def _pick(machine: str, free: object, count: int, minimum: Tier = Tier.SYSTEM) -> tuple[int, ...] | None:
    topology = machine_topology(machine, 8)
    assert topology is not None
    choice = best_connected(topology, free, count, minimum=minimum)  # type: ignore[arg-type]
    return None if choice is None else choice.indexes


def test_islands_machine_two_gpus_take_an_nvlink_pair_inside_one_island() -> None:
    topology = machine_topology("nvlink-islands-2x4", 8)
    assert topology is not None
    assert topology.islands() == ((0, 1, 2, 3), (4, 5, 6, 7))
    # 3 is free in one island, 5 and 6 form an NVLink pair in the other
    choice = best_connected(topology, [3, 6, 5], 2)
    assert choice is not None
    assert choice.indexes == (5, 6)
    assert choice.tier is Tier.NVLINK
    assert choice.links == 4


def test_islands_machine_keeps_a_whole_island_free() -> None:
    # GPU 4 is used: a first-by-index rule would take 0 and 1, breaking the only whole island; this takes 6 and 7
    # (a whole PCIe root, leaving 5 whose root partner is used)
    assert _pick("nvlink-islands-2x4", [0, 1, 2, 3, 5, 6, 7], 2) == (6, 7)
    # one GPU likewise goes to the partly used island
    assert _pick("nvlink-islands-2x4", [0, 1, 2, 3, 5, 6, 7], 1) == (5,)
    # four GPUs: the one whole island
    assert _pick("nvlink-islands-2x4", [0, 1, 2, 3, 5, 6, 7], 4) == (0, 1, 2, 3)


def test_islands_machine_fills_the_partly_used_island_first() -> None:
    # island 0 has 2 free, island 1 has 3 free: the pair goes where it leaves least behind
    assert _pick("nvlink-islands-2x4", [2, 3, 5, 6, 7], 2) == (2, 3)


def test_islands_machine_eight_gpus_are_not_nvlink_connected() -> None:
    topology = machine_topology("nvlink-islands-2x4", 8)
    assert topology is not None
    assert _pick("nvlink-islands-2x4", ALL, 8) == tuple(ALL)
    assert topology.tier(ALL) is Tier.SYSTEM
    assert _pick("nvlink-islands-2x4", ALL, 8, Tier.NVLINK) is None
    assert not can_connect(topology, ALL, 8, Tier.NVLINK)
    assert can_connect(topology, ALL, 4, Tier.NVLINK)
    # with one GPU used in each island no 4 NVLink-connected GPUs remain
    assert not can_connect(topology, [1, 2, 3, 5, 6, 7], 4, Tier.NVLINK)
    assert _pick("nvlink-islands-2x4", [1, 2, 3, 5, 6, 7], 4, Tier.NVLINK) is None


def test_pcie_pairs_machine_prefers_one_root_then_one_numa_node() -> None:
    topology = machine_topology("pcie-pairs-2numa", 8)
    assert topology is not None
    assert topology.pair_tier(0, 1) is Tier.PCIE_ROOT
    assert topology.pair_tier(1, 2) is Tier.NUMA
    assert topology.pair_tier(3, 4) is Tier.SYSTEM
    # 1, 2 share NUMA node 0; 6, 7 share a PCIe root
    assert _pick("pcie-pairs-2numa", [1, 2, 6, 7], 2) == (6, 7)
    # no pair on one root: one NUMA node before a cross-NUMA pair
    assert _pick("pcie-pairs-2numa", [1, 4, 6], 2) == (4, 6)
    choice = best_connected(topology, [3, 4], 2)
    assert choice is not None
    assert choice.tier is Tier.SYSTEM
    assert best_connected(topology, [3, 4], 2, minimum=Tier.NUMA) is None
    assert not can_connect(topology, [3, 4], 2, Tier.NUMA)
    assert can_connect(topology, [1, 2], 2, Tier.NUMA)
    assert not can_connect(topology, [1, 2], 2, Tier.PCIE_ROOT)
    assert not can_connect(topology, ALL, 2, Tier.NVLINK)


def test_pcie_pairs_machine_keeps_whole_roots_and_numa_nodes_free() -> None:
    # GPU 0 used: a lone GPU goes to its pair's partner, keeping the other roots whole
    assert _pick("pcie-pairs-2numa", [1, 2, 3, 4, 5, 6, 7], 1) == (1,)
    # GPU 0 used: a pair takes 2, 3 (NUMA node 1 stays whole)
    assert _pick("pcie-pairs-2numa", [1, 2, 3, 4, 5, 6, 7], 2) == (2, 3)


def test_nvswitch_machine_any_set_is_connected_and_packs_by_index() -> None:
    topology = machine_topology("nvswitch8", 8)
    assert topology is not None
    assert len(topology.islands()) == 1
    choice = best_connected(topology, ALL, 8, minimum=Tier.NVLINK)
    assert choice is not None
    assert choice.links == 28 * 18
    # one island only: the NUMA nodes decide, then PCIe roots (GPU 4 used: the pair stays on NUMA node 1)
    assert _pick("nvswitch8", [0, 1, 2, 3, 5, 6, 7], 2) == (6, 7)


def test_bad_input_names_the_field() -> None:
    topology = machine_topology("nvswitch8", 8)
    assert topology is not None
    with pytest.raises(InvalidRequestError, match="count"):
        best_connected(topology, ALL, 0)
    assert best_connected(topology, [0], 2) is None
    with pytest.raises(InvalidRequestError, match="simulated-topology"):
        machine_topology("torus", 8)
    with pytest.raises(InvalidRequestError, match="even number"):
        machine_topology("nvswitch8", 3)
    assert machine_topology("none", 8) is None
    with pytest.raises(InvalidRequestError, match="pcieRoot"):
        GpuTopology(0, "0000:17:00.0")
    with pytest.raises(InvalidRequestError, match="names no GPU"):
        NodeTopology({0: GpuTopology(0, "", (NvLinkPeer(5, 1),))})
    with pytest.raises(InvalidRequestError, match="own peer"):
        NodeTopology({0: GpuTopology(0, "", (NvLinkPeer(0, 1),))})
    with pytest.raises(InvalidRequestError, match="links"):
        NvLinkPeer(1, 0)
    assert Tier.parse("f", "PCIe-Root") is Tier.PCIE_ROOT
    with pytest.raises(InvalidRequestError, match="must be one of nvlink"):
        Tier.parse("f", "fast")


def test_large_nodes_rank_greedy_sets() -> None:
    topology = machine_topology("nvlink-islands-2x4", 32)
    assert topology is not None
    choice = best_connected(topology, range(32), 8, minimum=Tier.NVLINK)
    assert choice is not None
    assert choice.tier is Tier.NVLINK
    assert set(choice.indexes) <= set(range(16))
    assert topology.island_of()[31] == 1


def test_least_breaking_opens_a_gpu_of_a_partly_used_island() -> None:
    topology = machine_topology("nvlink-islands-2x4", 8)
    free = [0, 1, 2, 3, 5, 6, 7]  # GPU 4 used
    assert least_breaking(topology, free, [0, 1, 5, 6]) == 5
    assert least_breaking(topology, free, [0, 2]) == 0  # both break island 0-3: the lower index
    assert least_breaking(topology, range(8), [3, 7]) == 3
    with pytest.raises(InvalidRequestError, match=r"candidates.*one or more of the free GPUs"):
        least_breaking(topology, free, [4])
    with pytest.raises(InvalidRequestError, match="candidates"):
        least_breaking(topology, free, [])
