"""GPU interconnect topology of one node: NUMA node, PCIe root and NVLink peers per GPU.

Shapes: a :class:`GpuTopology` describes one GPU (by its NVML index); a :class:`NodeTopology` maps every GPU index
of a node to its :class:`GpuTopology`. ``pcie_root`` uses the form of the standard DRA attribute
``resource.kubernetes.io/pcieRoot`` (Kubernetes ``k8s.io/dynamic-resource-allocation/deviceattribute``): the PCI
root complex as ``pci<domain>:<bus>``, lower-case hex, e.g. ``pci0000:00``; empty when unknown. ``numa_node`` is
the Linux NUMA node (``/sys/bus/pci/devices/<bus id>/numa_node``, ``nvmlDeviceGetNumaNodeId``), None when
unknown. NVLink peers are other GPUs of the node with the number of NVLinks joining them (≥ 1); GPUs joined through
NVSwitches list every GPU on the same switch fabric (links: the GPU's own switch links).

Connection tiers (:class:`Tier`, best first): ``NVLINK`` (the GPUs form a connected NVLink graph), ``PCIE_ROOT``
(one PCIe root complex), ``NUMA`` (one NUMA node), ``SYSTEM`` (across NUMA nodes, or unknown). An *island* is a
connected component of the NVLink graph; a GPU without NVLink is an island of its own.

Errors: :class:`InvalidRequestError` naming the field for a negative index or NUMA node, a link count below 1, a
GPU listed as its own peer or twice, a malformed PCIe root, or peers naming a GPU the node lacks.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType

import attrs

from domain.errors import InvalidRequestError

PCIE_ROOT = re.compile(r"^pci[0-9a-f]{4,8}:[0-9a-f]{2}$")
"""``pci<domain>:<bus>`` (4 to 8 hex digits of PCI domain, 2 of bus), the ``resource.kubernetes.io/pcieRoot``
form."""


class Tier(enum.IntEnum):
    """How well a set of GPUs is connected (higher is better; module docstring)."""

    SYSTEM = 0
    NUMA = 1
    PCIE_ROOT = 2
    NVLINK = 3

    @classmethod
    def parse(cls, field: str, text: str) -> Tier:
        """``nvlink``, ``pcie-root``, ``numa`` or ``system`` (case-insensitive). Raises InvalidRequestError."""
        names = {tier.label: tier for tier in sorted(cls, reverse=True)}
        tier = names.get(text.strip().lower())
        if tier is None:
            raise InvalidRequestError(field, text, f"must be one of {', '.join(names)}")
        return tier

    @property
    def label(self) -> str:
        """The lower-case name used in annotations and messages (``pcie-root`` for PCIE_ROOT)."""
        return self.name.lower().replace("_", "-")


def _int(field: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidRequestError(field, value, f"must be an integer >= {minimum}")
    return value


@attrs.frozen
class NvLinkPeer:
    """Another GPU of the node (``index``) joined to this one by ``links`` NVLinks (≥ 1)."""

    index: int
    links: int

    def __attrs_post_init__(self) -> None:
        _int("nvlink.peer", self.index, 0)
        _int(f"nvlink[{self.index}].links", self.links, 1)


def _peers(value: Iterable[NvLinkPeer]) -> tuple[NvLinkPeer, ...]:
    return tuple(sorted(value, key=lambda peer: peer.index))


@attrs.frozen
class GpuTopology:
    """One GPU's place in the node (module docstring): ``numa_node`` (None: unknown), ``pcie_root`` (empty:
    unknown) and ``nvlink`` peers sorted by index, each at most once."""

    numa_node: int | None = None
    pcie_root: str = ""
    nvlink: tuple[NvLinkPeer, ...] = attrs.field(default=(), converter=_peers)

    def __attrs_post_init__(self) -> None:
        if self.numa_node is not None:
            _int("topology.numaNode", self.numa_node, 0)
        if self.pcie_root and not PCIE_ROOT.match(self.pcie_root):
            raise InvalidRequestError("topology.pcieRoot", self.pcie_root, "must be pci<domain>:<bus> in lower-case "
                                      "hex, e.g. pci0000:00")
        indexes = [peer.index for peer in self.nvlink]
        if len(set(indexes)) != len(indexes):
            raise InvalidRequestError("topology.nvlink", indexes, "lists a peer twice")

    def links_to(self, index: int) -> int:
        """NVLinks to GPU ``index`` (0 when none)."""
        return next((peer.links for peer in self.nvlink if peer.index == index), 0)


def _entries(
    value: Mapping[int, GpuTopology] | Iterable[tuple[int, GpuTopology]],
) -> tuple[tuple[int, GpuTopology], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple(sorted(items, key=lambda item: item[0]))


@attrs.frozen
class NodeTopology:
    """Every GPU's :class:`GpuTopology` by NVML index (module docstring): built from a mapping or ``(index,
    topology)`` pairs (``entries``, sorted by index), read through :attr:`gpus`. NVLink is read symmetrically: two
    GPUs are linked when either lists the other (links: the larger count)."""

    entries: tuple[tuple[int, GpuTopology], ...] = attrs.field(converter=_entries)
    gpus: Mapping[int, GpuTopology] = attrs.field(init=False, eq=False, hash=False, repr=False)
    _links: Mapping[tuple[int, int], int] = attrs.field(init=False, eq=False, hash=False, repr=False)

    def __attrs_post_init__(self) -> None:
        indexes = [index for index, _ in self.entries]
        if len(set(indexes)) != len(indexes):
            raise InvalidRequestError("topology.gpus", indexes, "lists a GPU twice")
        object.__setattr__(self, "gpus", MappingProxyType(dict(self.entries)))
        links: dict[tuple[int, int], int] = {}
        for index, gpu in self.entries:
            for peer in gpu.nvlink:
                for key in ((index, peer.index), (peer.index, index)):
                    links[key] = max(links.get(key, 0), peer.links)
        object.__setattr__(self, "_links", links)
        for index, gpu in self.entries:
            _int("topology.gpu", index, 0)
            for peer in gpu.nvlink:
                if peer.index == index:
                    raise InvalidRequestError(f"topology.gpus[{index}].nvlink", peer.index, "a GPU is not its own peer")
                if peer.index not in self.gpus:
                    raise InvalidRequestError(f"topology.gpus[{index}].nvlink", peer.index,
                                              f"names no GPU of the node ({sorted(self.gpus)})")

    def links(self, a: int, b: int) -> int:
        """NVLinks between GPUs ``a`` and ``b`` (0 when none or unknown)."""
        return self._links.get((a, b), 0)

    def pair_tier(self, a: int, b: int) -> Tier:
        """The tier of the pair ``{a, b}``."""
        if self.links(a, b):
            return Tier.NVLINK
        first, second = self.gpus.get(a), self.gpus.get(b)
        if first is None or second is None:
            return Tier.SYSTEM
        if first.pcie_root and first.pcie_root == second.pcie_root:
            return Tier.PCIE_ROOT
        if first.numa_node is not None and first.numa_node == second.numa_node:
            return Tier.NUMA
        return Tier.SYSTEM

    def tier(self, indexes: Iterable[int]) -> Tier:
        """The tier of a set of GPUs: NVLINK when its NVLink graph is connected, else PCIE_ROOT when all share a
        root, NUMA when all share a NUMA node, else SYSTEM. One GPU (or none) is NVLINK."""
        chosen = sorted(set(indexes))
        if len(chosen) <= 1:
            return Tier.NVLINK
        if self._nvlink_connected(chosen):
            return Tier.NVLINK
        gpus = [self.gpus.get(i) for i in chosen]
        roots = {g.pcie_root if g else "" for g in gpus}
        if len(roots) == 1 and "" not in roots:
            return Tier.PCIE_ROOT
        numa = {g.numa_node if g else None for g in gpus}
        if len(numa) == 1 and None not in numa:
            return Tier.NUMA
        return Tier.SYSTEM

    def _nvlink_connected(self, chosen: list[int]) -> bool:
        inside = set(chosen)
        seen, stack = {chosen[0]}, [chosen[0]]
        while stack:
            current = stack.pop()
            for other in inside - seen:
                if self.links(current, other):
                    seen.add(other)
                    stack.append(other)
        return seen == inside

    def islands(self) -> tuple[tuple[int, ...], ...]:
        """The NVLink islands (connected components), each sorted, ordered by their lowest index."""
        left = set(self.gpus)
        found: list[tuple[int, ...]] = []
        while left:
            start = min(left)
            seen, stack = {start}, [start]
            while stack:
                current = stack.pop()
                for other in [i for i in left if i not in seen and self.links(current, i)]:
                    seen.add(other)
                    stack.append(other)
            left -= seen
            found.append(tuple(sorted(seen)))
        return tuple(found)

    def island_of(self) -> Mapping[int, int]:
        """GPU index → island id (the position of its island in :meth:`islands`)."""
        return {index: number for number, island in enumerate(self.islands()) for index in island}


def node_topology(gpus: Iterable[tuple[int, GpuTopology | None]]) -> NodeTopology | None:
    """The :class:`NodeTopology` of ``(index, topology)`` pairs (what a Runtime lists per GPU), GPUs without one
    taking an unknown :class:`GpuTopology`; None when no GPU has one (a Runtime before 1.2.0, or one that does not
    know). Raises :class:`InvalidRequestError` as :class:`NodeTopology` does."""
    pairs = list(gpus)
    if all(topology is None for _, topology in pairs):
        return None
    return NodeTopology({index: topology or GpuTopology() for index, topology in pairs})


def numa_nodes(topology: NodeTopology | None) -> dict[int, int]:
    """GPU index → NUMA node, for the GPUs whose NUMA node is known (empty without topology)."""
    if topology is None:
        return {}
    return {index: gpu.numa_node for index, gpu in topology.gpus.items() if gpu.numa_node is not None}
