"""Kubernetes adapter: the cluster port over the official ``kubernetes`` client (the only package importing it).

The package's names load ``.cluster`` (and with it the client) on first use, so importing the client-free
``adapters.kubernetes.corejson`` (the extender's core/v1 JSON decoder) does not load the client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cluster import CONNECTION_POOL_MAXSIZE, KubernetesCluster, from_kubeconfig

__all__ = ["CONNECTION_POOL_MAXSIZE", "KubernetesCluster", "from_kubeconfig"]


def __getattr__(name: str) -> Any:
    """PEP 562: the names of :mod:`.cluster`, imported when first asked for."""
    if name in __all__:
        return getattr(importlib.import_module(".cluster", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
