"""Topologies of common multi-GPU machines, for the simulated backend (``ljrk runtime --simulated-topology``) and
tests. Each takes the node's GPU count (even, ≥ 2) and numbers GPUs as NVML does (0..n-1):

* ``nvswitch8``: every GPU reaches every other through NVSwitches (as on an 8-GPU HGX H100: 18 NVLinks per GPU);
  the first half of the GPUs on NUMA node 0, the second on node 1; GPUs in pairs behind one PCIe root.
* ``nvlink-islands-2x4``: two NVLink islands of half the GPUs each (8 GPUs: 0-3 and 4-7), fully meshed inside
  (4 NVLinks per pair), island ``i`` on NUMA node ``i``; GPUs in pairs behind one PCIe root.
* ``pcie-pairs-2numa``: no NVLink; GPUs in pairs behind one PCIe root (switch), the first half of the pairs on NUMA
  node 0, the rest on node 1.
* ``none``: no topology reported (the behaviour before Runtime 1.2.0, and the default).

PCIe roots are ``pci<domain>:<bus>``, pair ``p`` on domain ``p // 15`` and bus ``0x10 × (p mod 15 + 1)``
(``pci0000:10``, ``pci0000:20``, …, ``pci0001:10`` for the 16th pair).
Errors: :class:`InvalidRequestError` naming ``simulated-topology`` for an unknown name or a GPU count the machine
cannot have.
"""

from __future__ import annotations

from collections.abc import Callable

from domain.errors import InvalidRequestError
from domain.topology.types import GpuTopology, NodeTopology, NvLinkPeer

NVSWITCH_LINKS = 18
ISLAND_LINKS = 4


def _root(index: int) -> str:
    pair = index // 2
    return f"pci{pair // 15:04x}:{0x10 * (pair % 15 + 1):02x}"


def _numa(index: int, count: int) -> int:
    return 0 if index < count // 2 else 1


def nvswitch(count: int) -> NodeTopology:
    """Every GPU NVLinked to every other (module docstring)."""
    return NodeTopology({
        i: GpuTopology(_numa(i, count), _root(i), tuple(NvLinkPeer(j, NVSWITCH_LINKS) for j in range(count) if j != i))
        for i in range(count)
    })


def islands(count: int) -> NodeTopology:
    """Two fully meshed NVLink islands of ``count / 2`` GPUs (module docstring)."""
    half = count // 2
    return NodeTopology({
        i: GpuTopology(_numa(i, count), _root(i),
                       tuple(NvLinkPeer(j, ISLAND_LINKS) for j in range(count) if j != i and j // half == i // half))
        for i in range(count)
    })


def pcie_pairs(count: int) -> NodeTopology:
    """PCIe pairs on two NUMA nodes, no NVLink (module docstring)."""
    return NodeTopology({i: GpuTopology(_numa(i, count), _root(i)) for i in range(count)})


MACHINES: dict[str, Callable[[int], NodeTopology]] = {
    "nvswitch8": nvswitch,
    "nvlink-islands-2x4": islands,
    "pcie-pairs-2numa": pcie_pairs,
}
"""Machine name → topology of ``count`` GPUs."""

MACHINE_NAMES = ("none", *MACHINES)
"""Every value ``--simulated-topology`` accepts; ``none`` is the default."""


def machine_topology(name: str, count: int) -> NodeTopology | None:
    """The topology of machine ``name`` with ``count`` GPUs (None for ``none``). Raises
    :class:`InvalidRequestError` (field ``simulated-topology``) for an unknown name or an odd count or one below 2."""
    if name == "none":
        return None
    build = MACHINES.get(name)
    if build is None:
        raise InvalidRequestError("simulated-topology", name, f"must be one of {', '.join(MACHINE_NAMES)}")
    if count < 2 or count % 2:
        raise InvalidRequestError("simulated-topology", name,
                                  f"needs an even number of GPUs (at least 2); the node has {count}")
    return build(count)
