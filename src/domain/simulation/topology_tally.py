"""Topology figures of a replay on simulated machines (``ljrk simulate --topology MACHINE``).

Every node with an even GPU count (at least 2) is given the machine's topology
(:func:`domain.topology.machines.machine_topology`); others have none. :class:`TopologyTally` follows the run:
for each placed pod of 2, 4 or 8 whole GPUs, the tier of its GPUs on its node (NVLink-connected, one PCIe root,
one NUMA node, system; :meth:`domain.topology.NodeTopology.tier`), and the NVLink islands of more than one GPU
left whole (every GPU of the island free) when the arrived GPU request first reaches 80 % of capacity. The
figures are judged against the machine whether the scheduler was told the topology or not, so the two runs
compare. Invariant: a pod is counted once, when placed; pods on nodes without topology count at tier ``system``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from domain.allocation import PodAllocation
from domain.gpu import NodeInventory
from domain.ledger import ClusterLedger
from domain.topology import NodeTopology, Tier
from domain.topology.machines import machine_topology

SIZES = (2, 4, 8)
"""Whole-GPU pod sizes the figures cover (the multi-GPU size classes of :mod:`domain.simulation.breakdown`)."""

ISLANDS_AT_X = 80
"""Arrived GPU request, % of capacity, at which the whole islands are counted."""


def node_topologies(machine: str, inventories: Sequence[NodeInventory]) -> dict[str, NodeTopology]:
    """Node name → the topology of ``machine`` for each node with an even GPU count ≥ 2 (module docstring);
    empty for ``none``. Raises :class:`domain.errors.InvalidRequestError` for an unknown machine name."""
    if machine == "none":
        return {}
    machine_topology(machine, 2)  # the name, before any node
    return {n.name: t for n in inventories
            if n.gpu_count >= 2 and n.gpu_count % 2 == 0 and (t := machine_topology(machine, n.gpu_count)) is not None}


@attrs.frozen
class TopologyFigures:
    """What :class:`TopologyTally` found. ``tiers``: pod size (2, 4, 8 GPUs) → tier label (``nvlink``,
    ``pcie-root``, ``numa``, ``system``) → placed pods; ``islands``: NVLink islands of more than one GPU in the
    cluster; ``islands_free_at_80``: of those, the ones whole when arrivals first reached 80 % of capacity (None
    when the run stopped short of it); ``first``: the scheduler placed multi-GPU pods topology first
    (:class:`~domain.scheduling.framework.topology.GpuTopologyFirst`)."""

    machine: str
    known: bool
    tiers: Mapping[int, Mapping[str, int]]
    islands: int
    islands_free_at_80: int | None
    first: bool = False

    def placed(self, size: int) -> int:
        """Placed pods of ``size`` whole GPUs."""
        return sum(self.tiers.get(size, {}).values())

    def share(self, size: int, tier: Tier) -> float:
        """% of the placed pods of ``size`` GPUs whose GPUs are at ``tier`` exactly (0 when none was placed)."""
        placed = self.placed(size)
        return 100 * self.tiers.get(size, {}).get(tier.label, 0) / placed if placed else 0.0


class TopologyTally:
    """Counts a run's topology figures (module docstring) from its allocations and arrivals."""

    def __init__(self, machine: str, *, known: bool, topologies: Mapping[str, NodeTopology],
                 ledger: ClusterLedger, capacity_milli: int, first: bool = False) -> None:
        self.machine = machine
        self.known = known
        self.first = first
        self.topologies = topologies
        self.ledger = ledger
        self.capacity_milli = capacity_milli
        self.tiers: dict[int, dict[str, int]] = {size: {} for size in SIZES}
        self.islands = {name: tuple(i for i in t.islands() if len(i) > 1) for name, t in topologies.items()}
        self.islands_free_at_80: int | None = None

    def placed(self, num_gpu: int, allocation: PodAllocation) -> None:
        """Count a placed pod of ``num_gpu`` GPUs (only sizes in :data:`SIZES`)."""
        if num_gpu not in self.tiers:
            return
        topology = self.topologies.get(allocation.node)
        indexes = [g.gpu_index for c in allocation.containers for g in c.grants]
        tier = topology.tier(indexes) if topology is not None else Tier.SYSTEM
        counts = self.tiers[num_gpu]
        counts[tier.label] = counts.get(tier.label, 0) + 1

    def arrived(self, arrived_milli: int) -> None:
        """After each arrival: the whole islands, once, when ``arrived_milli`` first reaches 80 % of capacity."""
        if self.islands_free_at_80 is None and 100 * arrived_milli >= ISLANDS_AT_X * self.capacity_milli:
            self.islands_free_at_80 = self.whole_islands()

    def whole_islands(self) -> int:
        """NVLink islands of more than one GPU whose every GPU is free now."""
        free = 0
        for name, islands in self.islands.items():
            untouched = self.ledger.free_whole[self.ledger.slot(name)]
            free += sum(1 for island in islands if all(untouched[i] for i in island))
        return free

    def figures(self) -> TopologyFigures:
        """The figures so far."""
        return TopologyFigures(machine=self.machine, known=self.known,
                               tiers={size: dict(counts) for size, counts in self.tiers.items()},
                               islands=sum(len(i) for i in self.islands.values()),
                               islands_free_at_80=self.islands_free_at_80, first=self.first)
