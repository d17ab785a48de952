"""Kubernetes adapter: the cluster port over the official ``kubernetes`` client (the only package importing it)."""

from .cluster import CONNECTION_POOL_MAXSIZE, KubernetesCluster, from_kubeconfig

__all__ = ["CONNECTION_POOL_MAXSIZE", "KubernetesCluster", "from_kubeconfig"]
