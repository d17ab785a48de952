"""The ``topology`` object of a GPU entry in the node inventory annotation (device plugin → scheduler).

Form (every key optional; an entry without ``topology`` has none)::

    "topology": {"numaNode": 0, "pcieRoot": "pci0000:10", "nvlink": [[1, 18], [2, 18]]}

``numaNode``: integer ≥ 0 (absent: unknown); ``pcieRoot``: ``pci<domain>:<bus>`` (the DRA attribute
``resource.kubernetes.io/pcieRoot``'s form; absent: unknown); ``nvlink``: ``[peer GPU index, links ≥ 1]`` pairs.
Readers that predate it ignore the key (the inventory's version stays 1 or 2). Errors: :class:`InvalidRequestError`
naming the field (``<key>.gpus[i].topology.<name>``).
"""

from __future__ import annotations

from collections.abc import Mapping

from domain.errors import InvalidRequestError
from domain.topology import GpuTopology, NvLinkPeer


def topology_json(topology: GpuTopology) -> dict[str, object]:
    """One GPU's topology as the annotation writes it (module docstring)."""
    data: dict[str, object] = {}
    if topology.numa_node is not None:
        data["numaNode"] = topology.numa_node
    if topology.pcie_root:
        data["pcieRoot"] = topology.pcie_root
    if topology.nvlink:
        data["nvlink"] = [[peer.index, peer.links] for peer in topology.nvlink]
    return data


def _count(field: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidRequestError(field, value, f"must be an integer >= {minimum}")
    return value


def read_topology(field: str, entry: Mapping[str, object]) -> GpuTopology | None:
    """The ``topology`` of one GPU entry (``field`` names the entry), None when absent. Raises
    :class:`InvalidRequestError` naming the field for a wrong type or value."""
    if "topology" not in entry:
        return None
    data = entry["topology"]
    where = f"{field}.topology"
    if not isinstance(data, dict):
        raise InvalidRequestError(where, data, "must be an object")
    numa = data.get("numaNode")
    root = data.get("pcieRoot", "")
    if not isinstance(root, str):
        raise InvalidRequestError(f"{where}.pcieRoot", root, "must be a string")
    links = data.get("nvlink", [])
    if not isinstance(links, list):
        raise InvalidRequestError(f"{where}.nvlink", links, "must be a list of [peer, links] pairs")
    peers = []
    for n, pair in enumerate(links):
        if not isinstance(pair, list) or len(pair) != 2:
            raise InvalidRequestError(f"{where}.nvlink[{n}]", pair, "must be a [peer, links] pair")
        peers.append(NvLinkPeer(_count(f"{where}.nvlink[{n}][0]", pair[0], 0),
                                _count(f"{where}.nvlink[{n}][1]", pair[1], 1)))
    try:
        return GpuTopology(None if numa is None else _count(f"{where}.numaNode", numa, 0), root, tuple(peers))
    except InvalidRequestError as error:
        raise InvalidRequestError(f"{where}.{error.field.removeprefix('topology.')}", error.value,
                                  error.reason) from None
