"""The NVML backend's topology (adapters.nvml.topology) against the fake NVML module and a sysfs tree of its own."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from adapters.nvml import NvmlGpuBackend
from adapters.nvml.topology import sysfs_bus_id
from domain.topology import GpuTopology, NodeTopology, NvLinkPeer, Tier
from domain.units import GiB
from support.fake_pynvml import FakeNvml

SWITCH, GPU = 2, 0


def _gpu(n: int, **topology: Any) -> dict[str, Any]:
    return {"uuid": f"GPU-{n}{n}{n}{n}", "name": "NVIDIA H100 80GB HBM3", "memory": 80 * GiB, **topology}


def five_gpus() -> list[dict[str, Any]]:
    """0-1: two NVLinks to each other; 2-3: three links each to NVSwitches; 4: nothing known."""
    return [
        _gpu(0, bus="00000000:17:00.0", numa=0, nvlinks=[("00000000:18:00.0", GPU)] * 2),
        _gpu(1, bus="00000000:18:00.0", nvlinks=[("00000000:17:00.0", GPU)] * 2),
        _gpu(2, bus="00000000:85:00.0", nvlinks=[("00000000:C1:00.0", SWITCH)] * 3),
        _gpu(3, bus="00000001:86:00.0", nvlinks=[("00000000:C1:00.0", SWITCH)] * 3),
        _gpu(4),
    ]


def sysfs(root: Path) -> Path:
    """/sys/devices/pci<root>/<bridge>/<gpu> folders with numa_node files and /sys/bus/pci/devices links."""
    devices = root / "bus" / "pci" / "devices"
    devices.mkdir(parents=True)
    for bus, parent, numa in (("0000:17:00.0", "pci0000:16/0000:16:02.0", "0"),
                              ("0000:18:00.0", "pci0000:16/0000:16:03.0", "0"),
                              ("0000:85:00.0", "pci0000:80/0000:80:01.0", "-1"),
                              ("0001:86:00.0", "pci0001:80/0001:80:01.0", "1")):
        folder = root / "devices" / parent / bus
        folder.mkdir(parents=True)
        (folder / "numa_node").write_text(numa + "\n")
        (devices / bus).symlink_to(folder)
    return root


def test_nvml_backend_reports_numa_pcie_root_and_nvlink_peers(tmp_path: Path) -> None:
    backend = NvmlGpuBackend(FakeNvml(five_gpus()).module, sysfs=sysfs(tmp_path))
    try:
        found = {d.gpu.index: d.topology for d in backend.devices()}
    finally:
        backend.close()
    assert found == {
        0: GpuTopology(0, "pci0000:16", (NvLinkPeer(1, 2),)),  # NUMA from NVML
        1: GpuTopology(0, "pci0000:16", (NvLinkPeer(0, 2),)),  # NUMA from sysfs
        2: GpuTopology(None, "pci0000:80", (NvLinkPeer(3, 3),)),  # sysfs numa_node -1: none
        3: GpuTopology(1, "pci0001:80", (NvLinkPeer(2, 3),)),  # peers through the NVSwitch fabric
        4: GpuTopology(None, "", ()),  # no PCI info, no NVLink: unknown, not an error
    }
    node = NodeTopology({i: t for i, t in found.items() if t is not None})
    assert node.islands() == ((0, 1), (2, 3), (4,))
    assert node.pair_tier(0, 1) is Tier.NVLINK
    assert node.pair_tier(1, 2) is Tier.SYSTEM


def test_nvml_backend_without_sysfs_still_reads_nvml(tmp_path: Path) -> None:
    backend = NvmlGpuBackend(FakeNvml(five_gpus()).module, sysfs=tmp_path / "missing")
    try:
        found = {d.gpu.index: d.topology for d in backend.devices()}
    finally:
        backend.close()
    assert found[0] == GpuTopology(0, "", (NvLinkPeer(1, 2),))
    assert found[1] == GpuTopology(None, "", (NvLinkPeer(0, 2),))


@pytest.mark.parametrize(("text", "expected"), [
    (b"00000000:17:00.0\x00", "0000:17:00.0"), ("00000001:86:00.0", "0001:86:00.0"), ("0000:C1:00.0", "0000:c1:00.0"),
    ("garbage", ""), ("zz:17:00.0", ""),
])
def test_bus_ids_take_the_sysfs_form(text: object, expected: str) -> None:
    assert sysfs_bus_id(text) == expected


@pytest.mark.gpu
@pytest.mark.skipif(os.environ.get("LJRK_GPU_TESTS") != "1", reason="needs LJRK_GPU_TESTS=1 and a GPU")
def test_real_nvml_reports_a_topology_per_gpu() -> None:
    backend = NvmlGpuBackend.open()
    try:
        devices = backend.devices()
    finally:
        backend.close()
    assert devices
    node = NodeTopology({d.gpu.index: d.topology for d in devices if d.topology is not None})
    assert set(node.gpus) == {d.gpu.index for d in devices}  # every GPU gets a topology, unknown parts empty
    for topology in node.gpus.values():
        assert topology.pcie_root.startswith("pci")  # a real GPU sits under a PCI root complex
