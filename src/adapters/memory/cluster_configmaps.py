"""ConfigMaps of :class:`~adapters.memory.cluster.InMemoryCluster` (a mixin over
:class:`~.cluster_store.InMemoryStore`).

As kube-apiserver does: a create assigns an RV (one write of the global counter) and refuses an existing name
(409) or an empty name or namespace (422); a list is namespaced, in name order (etcd's key order), and a namespace
holding none lists nothing. Namespaces are implicit here (the server answers 404 for a missing one).
"""

from __future__ import annotations

import attrs

from domain.kube.objects import ConfigMapObject, Listing
from ports.cluster import ConflictError

from .cluster_store import InMemoryStore
from .cluster_watch import status_error


class InMemoryConfigMaps(InMemoryStore):
    """The ConfigMap methods of :class:`~adapters.memory.cluster.InMemoryCluster` (module docstring)."""

    _config_maps: dict[tuple[str, str], ConfigMapObject]

    def list_config_maps(self, namespace: str) -> Listing[ConfigMapObject]:
        """Every ConfigMap of ``namespace`` by name, and the current resourceVersion."""
        with self._cond:
            found = sorted((c for (ns, _), c in self._config_maps.items() if ns == namespace), key=lambda c: c.name)
            return Listing(tuple(found), str(self._rv_now()))

    def create_config_map(self, config_map: ConfigMapObject) -> ConfigMapObject:
        """Store a new ConfigMap with an RV. Raises ConflictError if it exists, ClusterError 422 without a name or
        namespace."""
        with self._cond:
            if not config_map.name or not config_map.namespace:
                raise status_error(422, "configmap namespace and name are required")
            key = (config_map.namespace, config_map.name)
            if key in self._config_maps:
                raise ConflictError(f'configmaps "{config_map.name}" already exists')
            stored = attrs.evolve(config_map, data=dict(config_map.data), labels=dict(config_map.labels),
                                  resource_version=str(self._bump()))
            self._config_maps[key] = stored
            return stored
