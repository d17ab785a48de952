"""``entrypoints._shared.cluster``: the cluster port of the controller, scheduler, inspect and ``ljrk up``.

In memory when asked; otherwise the Kubernetes adapter over the kubeconfig (writing Events as the component,
with the request timeout given), its API client closed when the resource ends; a missing kubeconfig is the
client's configuration error.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes.config import ConfigException

from adapters.kubernetes import KubernetesCluster
from adapters.memory.cluster import InMemoryCluster
from entrypoints._shared.cluster import api_server, in_memory_or_api_server


def _kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n")
    return path


def test_in_memory_yields_an_empty_in_memory_cluster(tmp_path: Path) -> None:
    resource = in_memory_or_api_server(True, _kubeconfig(tmp_path), component="c")
    cluster = next(resource)
    assert isinstance(cluster, InMemoryCluster)
    assert tuple(cluster.list_nodes().items) == ()
    resource.close()


def test_api_server_is_the_kubernetes_adapter_and_its_client_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[bool] = []
    resource = api_server(_kubeconfig(tmp_path), component="lj-runtimekit-test", request_timeout=3.0)
    cluster = next(resource)
    assert isinstance(cluster, KubernetesCluster)
    assert (cluster._component, cluster._seconds) == ("lj-runtimekit-test", 3.0)
    monkeypatch.setattr(cluster._api_client, "close", lambda: closed.append(True))
    assert closed == []
    resource.close()
    assert closed == [True]


def test_not_in_memory_goes_to_the_api_server(tmp_path: Path) -> None:
    resource = in_memory_or_api_server(False, _kubeconfig(tmp_path), component="c")
    assert isinstance(next(resource), KubernetesCluster)
    resource.close()


def test_missing_kubeconfig_is_the_clients_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigException, match="Invalid kube-config file"):
        next(api_server(tmp_path / "absent", component="c"))
