"""Contract of the cluster port's ConfigMaps (``ports.cluster.ClusterApi``), against InMemoryCluster and
KubernetesCluster.

Part of the cluster contract suite (same ``cluster`` fixture as ``test_cluster_contract.py``): every case runs
``[memory]`` and ``[kubernetes]`` (real kube-apiserver of the live version, marker ``k8s``), in a fresh namespace.

Behaviours covered:
- create: the returned object carries namespace, name, labels, string data (a multi-line value kept byte for
  byte, as ``protocol.yaml`` is) and a resourceVersion; create of an existing name → ConflictError;
- list is namespaced: a ConfigMap of another namespace is not listed, a namespace with none lists nothing; the
  list's resourceVersion is not empty;
- a ConfigMap without data or labels lists with empty mappings.
"""

from __future__ import annotations

import uuid

import pytest

from domain.kube.objects import ConfigMapObject
from ports.cluster import ConflictError

from .conftest import ClusterUnderTest

PROTOCOL = "version: 1\nresources:\n  gpu: example.com/gpu\nmemory-unit: 1Gi\n"


def _mine(cut: ClusterUnderTest) -> list[ConfigMapObject]:
    """This test's ConfigMaps (a real namespace also holds ``kube-root-ca.crt`` on servers with the root-CA
    publisher; without a controller manager it does not, but do not depend on it)."""
    return [c for c in cut.api.list_config_maps(cut.namespace).items if c.name.startswith("cm-")]


def test_create_returns_the_stored_configmap_and_list_finds_it(cluster: ClusterUnderTest) -> None:
    name = cluster.name("cm")
    created = cluster.api.create_config_map(ConfigMapObject(
        namespace=cluster.namespace, name=name, data={"protocol.yaml": PROTOCOL, "LJRK_X": "1"},
        labels={"app.kubernetes.io/component": "exporter"}))
    assert (created.namespace, created.name) == (cluster.namespace, name)
    assert created.data == {"protocol.yaml": PROTOCOL, "LJRK_X": "1"}
    assert created.labels == {"app.kubernetes.io/component": "exporter"}
    assert created.resource_version
    listing = cluster.api.list_config_maps(cluster.namespace)
    assert listing.resource_version
    assert _mine(cluster) == [created]


def test_create_of_an_existing_name_conflicts(cluster: ClusterUnderTest) -> None:
    config_map = ConfigMapObject(namespace=cluster.namespace, name=cluster.name("cm"), data={"a": "1"})
    cluster.api.create_config_map(config_map)
    with pytest.raises(ConflictError):
        cluster.api.create_config_map(config_map)


def test_list_is_namespaced_and_empty_maps_read_back_empty(cluster: ClusterUnderTest) -> None:
    assert _mine(cluster) == []
    bare = cluster.api.create_config_map(ConfigMapObject(namespace=cluster.namespace, name=cluster.name("cm")))
    assert (bare.data, bare.labels) == ({}, {})
    assert cluster.api.list_config_maps(f"none-{uuid.uuid4().hex[:8]}").items == ()
    assert [c.name for c in _mine(cluster)] == [bare.name]
