"""Nodes of :class:`~adapters.memory.cluster.InMemoryCluster` (a mixin over :class:`~.cluster_store.InMemoryStore`).

As kube-apiserver does with no kubelet: a create assigns a uuid4 ``uid`` and an RV and refuses an existing name
(409) or an empty one (422); a delete is immediate (nodes have no graceful deletion); a metadata patch merges
labels and annotations (None deletes a key), honours a ``resource_version`` precondition (409 when stale) and is
no write when it changes nothing. Lists and watches are in name order.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping

import attrs

from domain.kube.objects import Listing, NodeObject, WatchEvent
from ports.cluster import ConflictError, NotFoundError

from .cluster_store import InMemoryStore, merged
from .cluster_watch import History, status_error


def _always(_: object) -> bool:
    return True


class InMemoryNodes(InMemoryStore):
    """The node methods of :class:`~adapters.memory.cluster.InMemoryCluster` (module docstring)."""

    _nodes: dict[str, NodeObject]
    _node_history: History[NodeObject]

    def list_nodes(self) -> Listing[NodeObject]:
        """All nodes sorted by name, and the list's resourceVersion."""
        with self._cond:
            return Listing(tuple(self._current_nodes()), str(self._rv))

    def watch_nodes(self, *, resource_version: str, timeout_seconds: float) -> Iterator[WatchEvent[NodeObject]]:
        """Node changes after ``resource_version`` for ``timeout_seconds`` (s). The iterator raises GoneError."""
        return self._watch(self._node_history, self._current_nodes, resource_version, timeout_seconds, _always)

    def get_node(self, name: str) -> NodeObject:
        """One node. Raises NotFoundError."""
        with self._cond:
            return self._node(name)

    def create_node(self, node: NodeObject) -> NodeObject:
        """Store a new node with a fresh uid and RV. Raises ConflictError if the name exists, 422 if empty."""
        if not node.name:
            raise status_error(422, "node name is required")
        with self._cond:
            if node.name in self._nodes:
                raise ConflictError(f'nodes "{node.name}" already exists')
            fresh = attrs.evolve(node, uid=str(uuid.uuid4()), labels=dict(node.labels),
                                 annotations=dict(node.annotations), allocatable=dict(node.allocatable))
            return self._put(self._nodes, node.name, self._node_history, fresh, None)

    def delete_node(self, name: str) -> None:
        """Delete a node at once (nodes have no graceful deletion). Raises NotFoundError."""
        with self._cond:
            self._node(name)
            self._drop(self._nodes, name, self._node_history)

    def patch_node_metadata(self, name: str, *, labels: Mapping[str, str | None] | None = None,
                            annotations: Mapping[str, str | None] | None = None,
                            resource_version: str | None = None) -> NodeObject:
        """Merge labels/annotations (None deletes a key). Raises NotFoundError, ConflictError (stale RV)."""
        with self._cond:
            prev = self._node(name)
            self._check_rv(prev.resource_version, resource_version, f'nodes "{name}"')
            new = attrs.evolve(prev, labels=merged(prev.labels, labels or {}),
                               annotations=merged(prev.annotations, annotations or {}))
            return prev if new == prev else self._put(self._nodes, name, self._node_history, new, prev)

    # ------------------------------------------------------------------ internals (callers hold the lock)
    def _node(self, name: str) -> NodeObject:
        try:
            return self._nodes[name]
        except KeyError:
            raise NotFoundError(f'nodes "{name[:100]}" not found') from None

    def _current_nodes(self) -> Iterable[NodeObject]:
        return [self._nodes[name] for name in sorted(self._nodes)]
