"""DRA slices carry the Runtime's topology: numaNode, resource.kubernetes.io/pcieRoot and nvlinkIsland per whole GPU
(domain.dra.build), on each simulated machine."""

from __future__ import annotations

import attrs
import pytest

from adapters.simulated import SimulatedGpuBackend
from domain.dra.build import GpuTopology, desired_content
from domain.kube.protocol import ProtocolConstants
from domain.topology import GpuTopology as RuntimeTopology
from domain.topology import NvLinkPeer

PROTOCOL = ProtocolConstants()
ROOT = "resource.kubernetes.io/pcieRoot"


def attributes(machine: str) -> list[dict[str, object]]:
    devices = SimulatedGpuBackend.from_spec("8x80Gi:H100", topology=machine).devices()
    (content,) = desired_content(devices, protocol=PROTOCOL)
    return [dict(d.attributes) for d in content.devices]


@pytest.mark.parametrize(("machine", "islands"), [
    ("nvswitch8", [0] * 8),
    ("nvlink-islands-2x4", [0, 0, 0, 0, 1, 1, 1, 1]),
    ("pcie-pairs-2numa", list(range(8))),
])
def test_each_machine_publishes_numa_pcie_root_and_island(machine: str, islands: list[int]) -> None:
    found = attributes(machine)
    assert [a["nvlinkIsland"] for a in found] == islands
    assert [a["numaNode"] for a in found] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [a[ROOT] for a in found] == ["pci0000:10", "pci0000:10", "pci0000:20", "pci0000:20", "pci0000:30",
                                        "pci0000:30", "pci0000:40", "pci0000:40"]


def test_without_topology_the_attributes_are_absent() -> None:
    for found in attributes("none"):
        assert not {"numaNode", ROOT, "nvlinkIsland"} & set(found)


def test_an_override_wins_and_an_unknown_part_stays_absent() -> None:
    devices = list(SimulatedGpuBackend.from_spec("2x80Gi:H100", topology="nvswitch8").devices())
    devices[1] = attrs.evolve(devices[1], topology=RuntimeTopology(None, "", (NvLinkPeer(0, 18),)))
    (content,) = desired_content(devices, protocol=PROTOCOL,
                                 topology={devices[0].gpu.uuid: GpuTopology(numa_node=3, pcie_root="pci0000:aa")})
    first, second = (dict(d.attributes) for d in content.devices)
    assert (first["numaNode"], first[ROOT], first["nvlinkIsland"]) == (3, "pci0000:aa", 0)
    assert "numaNode" not in second
    assert ROOT not in second
    assert second["nvlinkIsland"] == 0
