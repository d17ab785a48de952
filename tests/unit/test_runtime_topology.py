"""Topology in the Runtime inventory: the simulated machines, the gRPC wire form and the runtime's flag."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from adapters.grpc.translate import device_from_pb, device_to_pb, info_from_pb, info_to_pb
from adapters.simulated import SimulatedGpuBackend, SpecError
from domain.errors import InvalidRequestError
from domain.runtime.errors import UnsupportedFeatureError
from domain.runtime.features import GPU_TOPOLOGY, RUNTIME_FEATURES, RuntimeInfo, SemVer, features_at
from domain.topology import GpuTopology, NodeTopology, NvLinkPeer, Tier
from entrypoints.runtime.__main__ import build_parser, settings_from_args
from entrypoints.runtime.app import SettingsError


def _topology(backend: SimulatedGpuBackend) -> NodeTopology:
    devices = backend.devices()
    return NodeTopology({d.gpu.index: d.topology for d in devices if d.topology is not None})


@pytest.mark.parametrize(("machine", "islands", "numa"), [
    ("nvswitch8", ((0, 1, 2, 3, 4, 5, 6, 7),), (0, 0, 0, 0, 1, 1, 1, 1)),
    ("nvlink-islands-2x4", ((0, 1, 2, 3), (4, 5, 6, 7)), (0, 0, 0, 0, 1, 1, 1, 1)),
    ("pcie-pairs-2numa", tuple((i,) for i in range(8)), (0, 0, 0, 0, 1, 1, 1, 1)),
])
def test_simulated_machines_report_their_topology(machine: str, islands: object, numa: object) -> None:
    backend = SimulatedGpuBackend.from_spec("8x80Gi:H100", topology=machine)
    topology = _topology(backend)
    assert set(topology.gpus) == set(range(8))
    assert topology.islands() == islands
    assert tuple(topology.gpus[i].numa_node for i in range(8)) == numa
    assert [topology.gpus[i].pcie_root for i in (0, 1, 2, 7)] == ["pci0000:10", "pci0000:10", "pci0000:20",
                                                                  "pci0000:40"]
    for device in backend.devices():  # the wire form carries it unchanged
        assert device_from_pb(device_to_pb(device)) == device


def test_default_machine_reports_no_topology() -> None:
    backend = SimulatedGpuBackend.from_spec("2x16Gi:A100")
    assert [d.topology for d in backend.devices()] == [None, None]
    message = device_to_pb(backend.devices()[0])
    assert not message.HasField("topology")
    assert device_from_pb(message).topology is None


def test_machine_needs_an_even_gpu_count() -> None:
    with pytest.raises(SpecError, match=r"simulated-topology.*even number"):
        SimulatedGpuBackend.from_spec("3x16Gi:A100", topology="nvswitch8")


def test_wire_form_keeps_an_unknown_numa_node_unknown_and_refuses_bad_values() -> None:
    backend = SimulatedGpuBackend.from_spec("1x16Gi")
    device = backend.devices()[0]
    unknown = attrs.evolve(device, topology=GpuTopology(None, "pci0000:00", ()))
    assert device_from_pb(device_to_pb(unknown)) == unknown
    zero = attrs.evolve(device, topology=GpuTopology(0, ""))
    assert device_from_pb(device_to_pb(zero)).topology == GpuTopology(0, "")
    message = device_to_pb(attrs.evolve(device, topology=GpuTopology(0, "pci0000:00", (NvLinkPeer(0, 1),))))
    message.topology.pcie_root = "17:00.0"
    with pytest.raises(InvalidRequestError, match="pcieRoot"):
        device_from_pb(message)


def test_topology_is_a_1_2_0_feature_announced_by_getversion() -> None:
    assert RUNTIME_FEATURES[GPU_TOPOLOGY].minimum == SemVer(1, 2, 0)
    assert GPU_TOPOLOGY in features_at(SemVer(1, 2, 0))
    old = RuntimeInfo("old", SemVer(1, 1, 0), features_at(SemVer(1, 1, 0)))
    assert not old.supports(GPU_TOPOLOGY)
    with pytest.raises(UnsupportedFeatureError, match=r"needs Runtime >= 1\.2\.0"):
        old.require(GPU_TOPOLOGY)
    new = info_from_pb(info_to_pb(RuntimeInfo("new", SemVer(1, 2, 0), features_at(SemVer(1, 2, 0)), "simulated")))
    assert new.supports(GPU_TOPOLOGY)
    assert Tier.NVLINK > Tier.PCIE_ROOT > Tier.NUMA > Tier.SYSTEM


def test_runtime_flag_picks_the_machine(tmp_path: Path) -> None:
    socket = str(tmp_path / "rt.sock")

    def read(*argv: str) -> str:
        return str(settings_from_args(build_parser().parse_args(["--socket", socket, *argv])).simulated_topology)

    assert read("--simulated-topology", "nvlink-islands-2x4") == "nvlink-islands-2x4"
    assert read() == "none"
    with pytest.raises(SettingsError, match="--simulated-topology needs --backend simulated"):
        read("--backend", "nvml", "--simulated-topology", "nvswitch8")
