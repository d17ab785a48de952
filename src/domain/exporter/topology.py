"""The exporter's topology families, from the GPUs' topology in the Runtime's data (Runtime ≥ 1.2.0).

* ``lj_runtimekit_gpu_link_info{node, gpu_index, gpu_uuid, peer_index, peer_uuid, type}`` = 1 for every ordered
  pair of distinct GPUs of the node whose connection is known, ``type`` the pair's tier (``nvlink``, ``pcie-root``:
  one PCIe root complex, ``numa``: one NUMA node, ``system``: across NUMA nodes or unknown; :class:`Tier`). With
  ``n`` GPUs: ``n·(n−1)`` series (56 on an 8-GPU node).
* ``lj_runtimekit_gpu_nvlink_links{…same labels but type}``: NVLinks between the two GPUs, for NVLink pairs only.
* ``lj_runtimekit_gpu_topology_info{node, gpu_index, gpu_uuid, numa_node, pcie_root, nvlink_island}`` = 1 per GPU
  (``numa_node``/``pcie_root`` empty when unknown; ``nvlink_island``: the island number of
  :meth:`NodeTopology.island_of`).

A node whose Runtime reports no topology has none of these series (never a guessed ``system``).
"""

from __future__ import annotations

from collections.abc import Iterator

from domain.errors import InvalidRequestError
from domain.runtime.types import ExporterData
from domain.topology import NodeTopology, node_topology

LINK_LABELS = ("node", "gpu_index", "gpu_uuid", "peer_index", "peer_uuid", "type")
NVLINK_LABELS = LINK_LABELS[:-1]
TOPOLOGY_LABELS = ("node", "gpu_index", "gpu_uuid", "numa_node", "pcie_root", "nvlink_island")

Sample = tuple[tuple[str, ...], float]


def _topology(data: ExporterData) -> NodeTopology | None:
    try:
        return node_topology((row.device.gpu.index, row.device.topology) for row in data.gpus)
    except InvalidRequestError:  # a peer the listing lacks: serve nothing rather than a wrong matrix
        return None


def topology_samples(data: ExporterData, *, node: str) -> tuple[tuple[Sample, ...], tuple[Sample, ...],
                                                                 tuple[Sample, ...]]:
    """Samples of the link-info, NVLink-count and per-GPU topology-info families (module docstring), in GPU index
    order; all empty without topology."""
    topology = _topology(data)
    if topology is None:
        return (), (), ()
    gpus = sorted((row.device.gpu.index, row.device.gpu.uuid) for row in data.gpus)
    islands = topology.island_of()
    links: list[Sample] = []
    counts: list[Sample] = []
    places: list[Sample] = []
    for index, uuid in gpus:
        place = topology.gpus.get(index)
        numa = "" if place is None or place.numa_node is None else str(place.numa_node)
        root = "" if place is None else place.pcie_root
        places.append(((node, str(index), uuid, numa, root, str(islands.get(index, ""))), 1.0))
        for peer, peer_uuid in gpus:
            if peer == index:
                continue
            pair = (node, str(index), uuid, str(peer), peer_uuid)
            links.append(((*pair, topology.pair_tier(index, peer).label), 1.0))
            count = topology.links(index, peer)
            if count:
                counts.append((pair, float(count)))
    return tuple(links), tuple(counts), tuple(places)


def topology_families_spec() -> Iterator[tuple[str, str, tuple[str, ...]]]:
    """``(name without prefix, help, labels)`` of the three families, in the order of :func:`topology_samples`."""
    yield ("gpu_link_info", "1 for each ordered pair of GPUs of the node; type: nvlink, pcie-root (one PCIe root), "
           "numa (one NUMA node) or system", LINK_LABELS)
    yield ("gpu_nvlink_links", "NVLinks between two GPUs of the node (NVLink pairs only)", NVLINK_LABELS)
    yield ("gpu_topology_info", "1 per GPU with its NUMA node, PCIe root and NVLink island (empty: unknown)",
           TOPOLOGY_LABELS)
