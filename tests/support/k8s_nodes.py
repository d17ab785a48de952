"""Nodes without a kubelet on a live API server, made schedulable the way kubelet and a device plugin would."""

from __future__ import annotations

from collections.abc import Mapping

from kubernetes import client

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
"""The taint the API server's admission puts on a new Node until its kubelet reports Ready."""


def make_schedulable(core: client.CoreV1Api, name: str, resources: Mapping[str, str]) -> None:
    """Publish ``resources`` as Node ``name``'s capacity and allocatable and drop its not-ready taint (other
    taints stay), so pods can be placed on it."""
    core.patch_node_status(name, {"status": {"capacity": dict(resources), "allocatable": dict(resources)}})
    taints = core.read_node(name).spec.taints or []
    kept = [t.to_dict() for t in taints if t.key != NOT_READY_TAINT]
    core.patch_node(name, {"spec": {"taints": kept or None}})
