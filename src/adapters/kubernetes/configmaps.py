"""The ConfigMap half of :class:`~adapters.kubernetes.cluster.KubernetesCluster` over ``CoreV1Api`` (a mixin
over :class:`~.base.KubernetesApis`).

Only string ``data`` is translated (``binaryData`` holds no protocol); lists are namespaced
(``list_namespaced_config_map``), so reading them needs only a Role in that namespace. Checked by
``tests/contract/test_cluster_configmaps_contract.py`` against a real kube-apiserver.
"""

from __future__ import annotations

from kubernetes import client

from domain.kube.objects import ConfigMapObject, Listing

from .base import KubernetesApis
from .errors import api_errors


def config_map_from_v1(config_map: client.V1ConfigMap) -> ConfigMapObject:
    """The domain ConfigMap of a ``V1ConfigMap`` (missing data or labels read as empty)."""
    metadata = config_map.metadata or client.V1ObjectMeta()
    return ConfigMapObject(namespace=metadata.namespace or "", name=metadata.name or "",
                           data=dict(config_map.data or {}), labels=dict(metadata.labels or {}),
                           resource_version=metadata.resource_version or "")


class KubernetesConfigMaps(KubernetesApis):
    """The ConfigMap methods of :class:`~adapters.kubernetes.cluster.KubernetesCluster` (module docstring)."""

    def list_config_maps(self, namespace: str) -> Listing[ConfigMapObject]:
        """Every ConfigMap of ``namespace`` and the list's resourceVersion. Raises ClusterError."""
        with api_errors(f"list configmaps in {namespace[:64]}"):
            found = self._core.list_namespaced_config_map(namespace, _request_timeout=self._timeout)
        version = (found.metadata.resource_version or "") if found.metadata is not None else ""
        return Listing(tuple(config_map_from_v1(c) for c in found.items), version)

    def create_config_map(self, config_map: ConfigMapObject) -> ConfigMapObject:
        """Create ``config_map``. Raises ConflictError (exists), NotFoundError (no namespace), ClusterError 422."""
        body = client.V1ConfigMap(
            api_version="v1", kind="ConfigMap", data=dict(config_map.data) or None,
            metadata=client.V1ObjectMeta(name=config_map.name, namespace=config_map.namespace,
                                         labels=dict(config_map.labels) or None))
        with api_errors(f"create configmap {config_map.namespace[:64]}/{config_map.name[:100]}"):
            created = self._core.create_namespaced_config_map(config_map.namespace, body,
                                                              _request_timeout=self._timeout)
        return config_map_from_v1(created)
