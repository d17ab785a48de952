"""The ResourceSlices of our DRA driver, per node: the GPU inventory of nodes that run the DRA driver and no device
plugin (:class:`DraSlices`; the reading itself is :func:`domain.dra.inventory.slice_inventory`).

Invariants: slices are keyed by name, so events are idempotent and a slice that moves to another node (never done
by our driver) leaves the first; only the driver's own slices are kept.
"""

from __future__ import annotations

from collections.abc import Sequence

from domain.dra.inventory import SliceInventory, slice_inventory
from domain.dra.slices import ResourceSlice
from domain.gpu import Gpu
from domain.kube.versions import older_version

CLAIMS_ONLY = ("GPUs published by the DRA driver only (no device plugin): pods get them through ResourceClaims, "
               "not the classic GPU resources (docs/migrate.md)")
"""Why a node whose GPUs come from ResourceSlices takes no classic GPU container (kubelet has no device plugin
there to admit one)."""


class DraSlices:
    """``driver``'s ResourceSlices by node (module docstring)."""

    def __init__(self, driver: str) -> None:
        self.driver = driver
        self._by_node: dict[str, dict[str, ResourceSlice]] = {}
        self._node_of: dict[str, str] = {}

    def put(self, resource_slice: ResourceSlice) -> set[str]:
        """Add or replace a slice; returns the nodes whose slices changed (none for another driver's)."""
        if resource_slice.driver != self.driver:
            return set()
        touched = self._forget(resource_slice.name)
        self._by_node.setdefault(resource_slice.node, {})[resource_slice.name] = resource_slice
        self._node_of[resource_slice.name] = resource_slice.node
        return touched | {resource_slice.node}

    def nodes_of(self, resource_slice: ResourceSlice) -> set[str]:
        """The nodes :meth:`put` of ``resource_slice`` may change: the one it names and the one the slice held under
        its name is on (none for another driver's slice)."""
        if resource_slice.driver != self.driver:
            return set()
        held = self._node_of.get(resource_slice.name)
        return {resource_slice.node} if held is None else {resource_slice.node, held}

    def delete(self, resource_slice: ResourceSlice) -> set[str]:
        """Forget a slice (by name); returns the node it was on (empty when unknown). A delete older than the slice
        held under that name (both resourceVersions numbers, the held one greater: the slice was re-created since,
        as the kubelet's wipe and our driver's repair do) is ignored."""
        node = self._node_of.get(resource_slice.name)
        if node is None or older_version(resource_slice.resource_version,
                                         self._by_node[node][resource_slice.name].resource_version):
            return set()
        return self._forget(resource_slice.name)

    def _forget(self, name: str) -> set[str]:
        node = self._node_of.pop(name, None)
        if node is None:
            return set()
        held = self._by_node[node]
        del held[name]
        if not held:
            del self._by_node[node]
        return {node}

    def nodes(self) -> list[str]:
        """The nodes some slice names, sorted."""
        return sorted(self._by_node)

    def inventory(self, node: str, known: Sequence[Gpu] = ()) -> SliceInventory | None:
        """The GPUs the node's slices publish (None: none of ours names it); ``known`` as in
        :func:`slice_inventory`."""
        held = self._by_node.get(node)
        if not held:
            return None
        return slice_inventory(held.values(), driver=self.driver, node=node, known=known)

    def slices(self) -> list[ResourceSlice]:
        """Every slice held, by name (for a rebuild)."""
        return sorted((s for held in self._by_node.values() for s in held.values()), key=lambda s: s.name)
