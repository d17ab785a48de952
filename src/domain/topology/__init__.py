"""GPU interconnect topology (NUMA node, PCIe root, NVLink peers) and the best-connected choice of whole GPUs.

Parts: :mod:`.types` (values, tiers, islands), :mod:`.choose` (:func:`best_connected`, :func:`can_connect`,
:func:`split_connected`, :func:`least_breaking`),
:mod:`.machines` (the simulated machines' topologies). Pure: stdlib and attrs only.
"""

from domain.topology.choose import Choice, best_connected, can_connect, least_breaking, split_connected
from domain.topology.types import PCIE_ROOT, GpuTopology, NodeTopology, NvLinkPeer, Tier, node_topology, numa_nodes

__all__ = ["PCIE_ROOT", "Choice", "GpuTopology", "NodeTopology", "NvLinkPeer", "Tier", "best_connected",
           "can_connect", "least_breaking", "node_topology", "numa_nodes", "split_connected"]
