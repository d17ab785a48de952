"""Kubernetes adapter: the cluster port over the official ``kubernetes`` client (the only package importing it)."""

from .cluster import KubernetesCluster, from_kubeconfig

__all__ = ["KubernetesCluster", "from_kubeconfig"]
