"""Contract of the Namespace port (``ports.namespaces.NamespacesApi``), against InMemoryNamespaces and
KubernetesNamespaces (a real kube-apiserver, marker ``k8s``, the contract suite's shared control plane).

Behaviours covered:
- ``namespace_labels`` returns a Namespace's labels (empty without any), a copy the caller may change;
- an unknown Namespace raises NotFoundError;
- ``list_namespace_labels`` holds every Namespace made, by name, with its labels.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import attrs
import pytest

from adapters.memory.namespaces import InMemoryNamespaces
from ports.cluster import NotFoundError
from ports.namespaces import NamespacesApi


@attrs.define
class NamespacesUnderTest:
    """The port, plus ``make(name, labels)`` creating a Namespace."""

    api: NamespacesApi
    make: Callable[[str, dict[str, str]], None]


@pytest.fixture(params=["memory", pytest.param("kubernetes", marks=pytest.mark.k8s)])
def namespaces(request: pytest.FixtureRequest) -> Iterator[NamespacesUnderTest]:
    if request.param == "memory":
        store = InMemoryNamespaces()
        yield NamespacesUnderTest(store, store.put)
        return
    from kubernetes import client

    from adapters.kubernetes.namespaces import KubernetesNamespaces

    plane = request.getfixturevalue("contract_k8s_plane")
    api_client = plane.api_client()
    core = client.CoreV1Api(api_client)
    made: list[str] = []

    def make(name: str, labels: dict[str, str]) -> None:
        core.create_namespace({"metadata": {"name": name, "labels": labels}})
        made.append(name)

    try:
        yield NamespacesUnderTest(KubernetesNamespaces(api_client), make)
    finally:
        for name in made:
            core.delete_namespace(name)
        api_client.close()


def _name() -> str:
    return f"ns-{uuid.uuid4().hex[:8]}"


def test_labels_read_back_and_are_a_copy(namespaces: NamespacesUnderTest) -> None:
    labelled, bare = _name(), _name()
    namespaces.make(labelled, {"lj-runtimekit.io/claim-quota-cores": "150", "team": "a"})
    namespaces.make(bare, {})
    labels = namespaces.api.namespace_labels(labelled)
    assert labels["lj-runtimekit.io/claim-quota-cores"] == "150"
    assert labels["team"] == "a"
    labels["team"] = "changed"
    assert namespaces.api.namespace_labels(labelled)["team"] == "a"
    assert "lj-runtimekit.io/claim-quota-cores" not in namespaces.api.namespace_labels(bare)


def test_unknown_namespace_is_not_found(namespaces: NamespacesUnderTest) -> None:
    with pytest.raises(NotFoundError):
        namespaces.api.namespace_labels(_name())


def test_list_holds_every_namespace_with_its_labels(namespaces: NamespacesUnderTest) -> None:
    first, second = _name(), _name()
    namespaces.make(first, {"lj-runtimekit.io/claim-quota-memory": "64Gi"})
    namespaces.make(second, {})
    listed = namespaces.api.list_namespace_labels()
    assert listed[first]["lj-runtimekit.io/claim-quota-memory"] == "64Gi"
    assert second in listed
    assert list(listed) == sorted(listed)
