"""Topology figures of a replay (``domain.simulation.topology_tally``, ``ljrk simulate --topology``).

Behaviours: which nodes get the machine's topology (even GPU counts only; ``none`` gives none; an unknown machine
is refused naming the field); the tier of each placed multi-GPU pod, judged against the machine whether the
scheduler knew it or not — on one 8-GPU node of two NVLink islands, a 1-GPU pod arriving first makes the blind
scheduler spread the next 4-GPU pod over both islands while the told one keeps it on one; whole islands counted
once, when arrivals first reach 80 % of capacity; the summary.json object and the stdout line.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from adapters.reportfiles.writer import topology_row
from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import InvalidRequestError
from domain.ledger import ClusterLedger
from domain.simulation.replay import ReplayConfig, replay
from domain.simulation.topology_tally import TopologyTally, node_topologies
from domain.simulation.workload import TraceNode, TracePod
from domain.topology import Tier
from entrypoints.simulate.__main__ import main
from entrypoints.simulate.app import format_topology

MACHINE = "nvlink-islands-2x4"
NODE = TraceNode("n1", 64000, 512 * 1024, 8, "A100")
PODS = [TracePod("a-one", 1000, 1024, 1, 1000), TracePod("b-four", 4000, 1024, 4, 1000),
        TracePod("c-four", 4000, 1024, 4, 1000)]
"""9 GPUs of pods on 8 GPUs: tune 1.125 keeps all three, in the seed's order."""


def _run(seed: int, *, known: bool) -> tuple[dict[str, int], int]:
    result = replay([NODE], PODS, ReplayConfig("fgd", seed, tune=1.125, topology=MACHINE, topology_known=known))
    assert result.topology is not None
    assert result.arrivals == 3
    return dict(result.topology.tiers[4]), result.failed_pods


def test_only_even_gpu_counts_get_the_machine() -> None:
    inventories = [TraceNode(f"n{n}", 8000, 1024, n, "A100").inventory() for n in (0, 1, 2, 3, 8)]
    assert sorted(node_topologies(MACHINE, inventories)) == ["n2", "n8"]
    assert node_topologies("none", inventories) == {}
    with pytest.raises(InvalidRequestError, match="simulated-topology"):
        node_topologies("torus", inventories)
    with pytest.raises(InvalidRequestError, match="topology"):
        ReplayConfig("fgd", 1, topology="torus")


def test_blind_scheduler_spreads_a_four_gpu_pod_the_told_one_does_not() -> None:
    # seed 1 submits the 1-GPU pod first: by index it takes GPU 0, so the next 4-GPU pod gets 1-4 (two islands)
    assert _run(1, known=False) == ({Tier.SYSTEM.label: 1}, 1)
    assert _run(1, known=True) == ({Tier.NVLINK.label: 1}, 1)
    for seed in range(8):  # told, never worse; both runs place the same number of pods here
        told, blind = _run(seed, known=True), _run(seed, known=False)
        assert told[0].get("nvlink", 0) >= blind[0].get("nvlink", 0)
        assert told[1] == blind[1]


def test_whole_islands_counted_once_at_80_percent() -> None:
    inventory = NODE.inventory()
    topologies = node_topologies(MACHINE, [inventory])
    ledger = ClusterLedger([attrs.evolve(inventory, topology=topologies["n1"])])
    tally = TopologyTally(MACHINE, known=True, topologies=topologies, ledger=ledger, capacity_milli=8000)
    tally.arrived(6399)
    assert tally.figures().islands_free_at_80 is None
    tally.arrived(6400)
    assert tally.figures().islands_free_at_80 == 2
    grant = PodAllocation(pod_uid="p", node="n1", containers=(ContainerGrant("c", (GpuGrant(5, 1000, 1),)),))
    ledger.reserve(grant)
    assert tally.whole_islands() == 1  # GPU 5 taken: its island is no longer whole...
    tally.placed(1, grant)  # 1-GPU pods are not a counted size
    tally.arrived(8000)  # ...but the figure was taken at 80 %
    figures = tally.figures()
    assert figures.islands_free_at_80 == 2
    assert figures.islands == 2
    assert all(figures.placed(size) == 0 for size in (2, 4, 8))


def test_placed_pods_by_tier_and_their_report() -> None:
    inventory = NODE.inventory()
    topologies = node_topologies(MACHINE, [inventory])
    ledger = ClusterLedger([inventory])
    tally = TopologyTally(MACHINE, known=False, topologies=topologies, ledger=ledger, capacity_milli=8000)

    def pod(indexes: tuple[int, ...], node: str = "n1") -> PodAllocation:
        return PodAllocation(pod_uid="p", node=node, containers=(
            ContainerGrant("c", tuple(GpuGrant(i, 1000, 1) for i in indexes)),))

    tally.placed(2, pod((0, 1)))  # one island
    tally.placed(2, pod((3, 4)))  # across the islands (island i on NUMA node i): system
    tally.placed(2, pod((0, 1), node="elsewhere"))  # a node without topology
    tally.placed(4, pod((4, 5, 6, 7)))
    figures = tally.figures()
    assert figures.tiers[2] == {"nvlink": 1, "system": 2}
    assert figures.placed(2) == 3
    assert figures.share(2, Tier.NVLINK) == pytest.approx(100 / 3)
    assert figures.share(4, Tier.NVLINK) == 100.0
    assert figures.share(8, Tier.NVLINK) == 0.0
    assert topology_row(figures) == {"machine": MACHINE, "known": False,
                                     "placed": {"2": {"nvlink": 1, "system": 2}, "4": {"nvlink": 1}, "8": {}},
                                     "islands": 2, "islands_free_at_80": None, "first": False}
    assert topology_row(None) is None


def test_stdout_line_per_run_on_a_machine_only() -> None:
    told = replay([NODE], PODS, ReplayConfig("fgd", 1, tune=1.125, topology=MACHINE))
    plain = replay([NODE], PODS, ReplayConfig("fgd", 1, tune=1.125))
    assert plain.topology is None
    assert format_topology([plain]) == ""
    assert format_topology([plain, told]) == (
        "fgd seed 1 (nvlink-islands-2x4, topology known): 2-GPU pods 0 placed, 0.0 % NVLink-connected; 4-GPU pods "
        "1 placed, 100.0 % NVLink-connected; 8-GPU pods 0 placed, 0.0 % NVLink-connected; whole NVLink islands at "
        "x = 80: 0 of 2\n")


def test_topology_first_is_reported_and_needs_a_known_topology() -> None:
    first = replay([NODE], PODS, ReplayConfig("fgd", 1, tune=1.125, topology=MACHINE, topology_first=True))
    assert first.topology is not None
    assert first.topology.first
    assert topology_row(first.topology)["first"] is True  # type: ignore[index]
    assert "(nvlink-islands-2x4, topology known, topology first)" in format_topology([first])
    for bad in ({}, {"topology": MACHINE, "topology_known": False}):
        with pytest.raises(InvalidRequestError, match=r"topology_first.*needs a topology known to the scheduler"):
            ReplayConfig("fgd", 1, topology_first=True, **bad)  # type: ignore[arg-type]


def test_the_replay_builds_its_profiles_topology_first(monkeypatch: pytest.MonkeyPatch) -> None:
    import domain.simulation.replay as replay_module

    asked: list[bool] = []
    real = replay_module.build_profile

    def spy(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("topology_first", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(replay_module, "build_profile", spy)
    replay([NODE], PODS, ReplayConfig("fgd", 1, tune=1.125, topology=MACHINE, topology_first=True, typical="online"))
    replay([NODE], PODS, ReplayConfig("fgd", 1, tune=1.125, topology=MACHINE))
    assert len(asked) >= 3  # the first run rebuilt its profile as it learned its typical pods
    assert set(asked[:-1]) == {True}
    assert asked[-1] is False


def test_simulate_refuses_topology_first_without_a_known_topology(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--gpu-topology-first", "--no-progress"]) == 2
    assert "gpu-topology-first: needs --topology MACHINE, told to the scheduler" in capsys.readouterr().err
    assert main(["--gpu-topology-first", "--topology", MACHINE, "--topology-blind", "--no-progress"]) == 2
    assert "not --topology-blind" in capsys.readouterr().err
