"""Share enforcement is stated, not implied (``domain.runtime.enforcement``): the reference Runtime announces its
mode in GetVersion (none without HAMi-core, hami-core with it, mig when every GPU is in MIG mode), the device
plugin publishes it as the protocol's node label, the exporter as ``lj_runtimekit_share_enforcement``; a Runtime
that announces no mode (older) reads as ``unknown``."""

from __future__ import annotations

import pytest

from adapters.memory.cluster import InMemoryCluster
from domain.exporter.metrics import build_families
from domain.exporter.snapshot import Snapshot
from domain.gpu import Gpu, GpuUuid
from domain.kube.objects import NodeObject
from domain.kube.protocol import ProtocolConstants
from domain.runtime.edits import ContainerEdits
from domain.runtime.enforcement import (
    ENFORCEMENT_FEATURES,
    Enforcement,
    advertised_enforcement,
    node_enforcement,
)
from domain.runtime.features import V1_0, V1_1, features_at
from entrypoints.runtime.inprocess import InProcessRuntime
from services.device_plugin.service import DevicePluginService
from support.mig_builders import mig_gpus

GIB = 1024**3
HAMI = ContainerEdits(hami_library="/usr/local/vgpu/libvgpu.so", preload_file="/usr/local/vgpu/ld.so.preload")


def _gpus(count: int = 2) -> list[Gpu]:
    return [Gpu(i, GpuUuid(f"GPU-enf-{i}"), "A100", 16 * GIB) for i in range(count)]


@pytest.mark.parametrize(("gpus", "hami", "mps", "expected"), [
    (_gpus(), False, False, Enforcement.NONE),
    (_gpus(), True, False, Enforcement.HAMI_CORE),
    (_gpus(), True, True, Enforcement.MPS),
    (mig_gpus("n", 2), True, False, Enforcement.MIG),
    (mig_gpus("n", 1, shared=1), False, False, Enforcement.NONE),  # a time-shared GPU remains: not all MIG
    ([], True, False, Enforcement.HAMI_CORE),
])
def test_node_enforcement(gpus: list[Gpu], hami: bool, mps: bool, expected: Enforcement) -> None:
    assert node_enforcement(gpus, hami_core=hami, mps=mps) is expected


def test_a_runtime_announcing_no_mode_or_two_reads_as_unknown() -> None:
    assert advertised_enforcement({"allocate", "inventory"}) is Enforcement.UNKNOWN
    both = {ENFORCEMENT_FEATURES[Enforcement.NONE], ENFORCEMENT_FEATURES[Enforcement.HAMI_CORE]}
    assert advertised_enforcement(both) is Enforcement.UNKNOWN
    assert advertised_enforcement({"share-enforcement-mig"}) is Enforcement.MIG


@pytest.mark.parametrize(("gpus", "edits", "expected"), [
    (_gpus(), None, Enforcement.NONE),
    (_gpus(), HAMI, Enforcement.HAMI_CORE),
    (mig_gpus("n", 2), HAMI, Enforcement.MIG),
])
def test_the_reference_runtime_announces_exactly_its_own_mode(
        gpus: list[Gpu], edits: ContainerEdits | None, expected: Enforcement) -> None:
    runtime = InProcessRuntime(gpus, edits=edits)
    try:
        capabilities = runtime.get_version().capabilities
        announced = {feature for feature in ENFORCEMENT_FEATURES.values() if feature in capabilities}
        assert announced == {ENFORCEMENT_FEATURES[expected]}
        assert advertised_enforcement(capabilities) is expected
    finally:
        runtime.close()


@pytest.mark.parametrize(("edits", "older", "label"), [
    (None, False, "none"), (HAMI, False, "hami-core"), (HAMI, True, "unknown"),
])
def test_the_device_plugin_labels_its_node(edits: ContainerEdits | None, older: bool, label: str) -> None:
    """``older``: the Runtime announces 1.0.0 and its features, none of which states a mode."""
    protocol = ProtocolConstants()
    runtime = InProcessRuntime(_gpus(), edits=edits, version=V1_0 if older else None,
                               capabilities=features_at(V1_0) if older else None)
    cluster = InMemoryCluster()
    cluster.create_node(NodeObject("node-a"))
    try:
        service = DevicePluginService(node="node-a", runtime=runtime, cluster=cluster, protocol=protocol)
        service.publish_inventory()
        assert cluster.get_node("node-a").labels[protocol.enforcement_label] == label
    finally:
        runtime.close()


def test_the_exporter_serves_the_mode_as_a_series() -> None:
    page = list(build_families(Snapshot(enforcement="hami-core"), node="node-a", now=0.0))
    (family,) = [f for f in page if f.name == "lj_runtimekit_share_enforcement"]
    assert family.samples == ((("node-a", "hami-core"), 1.0),)
    assert not [f for f in build_families(Snapshot(), node="node-a", now=0.0)
                if f.name == "lj_runtimekit_share_enforcement"]  # before the first pull: no claim


def test_every_mode_feature_is_in_the_contract_table_at_1_1() -> None:
    from domain.runtime.features import RUNTIME_FEATURES

    assert all(RUNTIME_FEATURES[feature].minimum == V1_1 for feature in ENFORCEMENT_FEATURES.values())


def test_inspect_says_which_nodes_hold_shares_to_nothing() -> None:
    from domain.inspection.report import build_report
    from entrypoints.inspect.render import render

    protocol = ProtocolConstants()
    nodes = [NodeObject("a", labels={protocol.enforcement_label: "hami-core"}),
             NodeObject("b", labels={protocol.enforcement_label: "hami-core"}),
             NodeObject("c", labels={protocol.enforcement_label: "none"})]
    report = build_report(nodes, [], protocol, now=0.0)
    assert [n.enforcement for n in report.nodes] == ["hami-core", "hami-core", "none"]
    assert "ENFORCEMENT  hami-core: 2 nodes; none (accounting only): 1 node (c)" in render(report).splitlines()
