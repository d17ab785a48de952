"""The node half of :class:`~adapters.kubernetes.cluster.KubernetesCluster` over ``CoreV1Api`` (a mixin over
:class:`~.base.KubernetesApis`).

LISTs and watches are read as raw JSON (:mod:`.rawjson`, :func:`.corejson.node_from_json`); reads and writes go
through the client's models (:mod:`.translate`); metadata patches are JSON merge patches (:func:`.compat.merge_patch`:
null deletes a key, ``metadata.resourceVersion`` makes the patch conditional).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from domain.kube.objects import Listing, NodeObject, WatchEvent

from .base import KubernetesApis
from .compat import MERGE_PATCH, NODE, merge_patch
from .corejson import node_from_json
from .errors import api_errors
from .rawjson import list_json, watch_json
from .translate import metadata_patch, node_from_v1, node_to_v1


class KubernetesNodes(KubernetesApis):
    """The node methods of :class:`~adapters.kubernetes.cluster.KubernetesCluster` (module docstring)."""

    def list_nodes(self) -> Listing[NodeObject]:
        """All nodes and the list's resourceVersion (read raw: :mod:`.rawjson`). Raises ClusterError."""
        nodes, rv = list_json(self._core.list_node, node_from_json, "list nodes", _request_timeout=self._timeout)
        return Listing(nodes, rv)

    def watch_nodes(self, *, resource_version: str, timeout_seconds: float) -> Iterator[WatchEvent[NodeObject]]:
        """Node changes after ``resource_version`` for about ``timeout_seconds`` (s, rounded up to whole seconds
        as the API takes them; read raw: :mod:`.rawjson`). The iterator raises GoneError (410) and ClusterError."""
        return watch_json(self._core.list_node, node_from_json, resource_version, timeout_seconds, "watch nodes")

    def get_node(self, name: str) -> NodeObject:
        """One node. Raises NotFoundError."""
        with api_errors(f"get node {name[:100]}"):
            return node_from_v1(self._core.read_node(name, _request_timeout=self._timeout))

    def create_node(self, node: NodeObject) -> NodeObject:
        """Create a node with its allocatable in ``status``. Raises ConflictError if it exists.

        The server's ``TaintNodesByCondition`` admission adds ``node.kubernetes.io/not-ready:NoSchedule``
        until a kubelet reports Ready; it is in the returned object."""
        with api_errors(f"create node {node.name[:100]}"):
            return node_from_v1(self._core.create_node(node_to_v1(node), _request_timeout=self._timeout))

    def delete_node(self, name: str) -> None:
        """Delete a node. Raises NotFoundError."""
        with api_errors(f"delete node {name[:100]}"):
            self._core.delete_node(name, _request_timeout=self._timeout)

    def patch_node_metadata(self, name: str, *, labels: Mapping[str, str | None] | None = None,
                            annotations: Mapping[str, str | None] | None = None,
                            resource_version: str | None = None) -> NodeObject:
        """Merge-patch labels/annotations (None deletes). Raises NotFoundError, ConflictError (stale RV)."""
        body = metadata_patch(labels=labels, annotations=annotations, resource_version=resource_version)
        with api_errors(f"patch node {name[:100]}"):
            node = merge_patch(
                lambda: self._core.patch_node(name, body, _content_type=MERGE_PATCH, _request_timeout=self._timeout),
                self._api_client, NODE, body, timeout=self._timeout, path={"name": name})
        return node_from_v1(node)
