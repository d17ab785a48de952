"""Whether the API server serves ``resource.k8s.io/v1``, and what the scheduler watches when it does not.

Behaviours covered:
- :func:`adapters.kubernetes.resourceclaims.serves_resource_v1` against a loopback fake API server's discovery
  (``GET /apis``): True when the ``resource.k8s.io`` group lists ``v1``; False when it lists only beta versions (as
  Kubernetes 1.32-1.33 do) or the group is absent (1.30-1.31 without the feature gate); None when discovery answers an
  error status (500, or 403 where RBAC forbids it) or nothing listens; and True against the real kube-apiserver of the
  live version (marker ``k8s``);
- the scheduler's wiring (:func:`entrypoints.scheduler.containers.dra_watched`): against an API server without
  ``resource.k8s.io/v1`` it watches neither ResourceClaims nor ResourceSlices (its container provides no port for
  either, after one discovery request) and says why in a warning; with the API,
  or when discovery fails (its informers then retry), it watches them; ``--no-dra-claims`` turns them off without
  asking the API server.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from dependency_injector import providers
from kubernetes import client

from adapters.kubernetes import KubernetesCluster
from adapters.kubernetes.resourceclaims import serves_resource_v1
from entrypoints.scheduler.app import SchedulerSettings
from entrypoints.scheduler.containers import SchedulerContainer, dra_watched
from support.fake_apiserver import JsonHandler, serving


def _group(name: str, *versions: str) -> dict[str, Any]:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


SERVED = {"kind": "APIGroupList", "apiVersion": "v1",
          "groups": [_group("apps", "v1"), _group("resource.k8s.io", "v1", "v1beta2")]}
BETA_ONLY = {"kind": "APIGroupList", "apiVersion": "v1",
             "groups": [_group("apps", "v1"), _group("resource.k8s.io", "v1beta2", "v1beta1")]}
ABSENT = {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group("apps", "v1")]}
ERROR = {"kind": "Status", "apiVersion": "v1", "code": 500, "reason": "InternalError", "message": "boom"}
FORBIDDEN = {"kind": "Status", "apiVersion": "v1", "code": 403, "reason": "Forbidden", "message": "no discovery"}


@contextlib.contextmanager
def discovery(status: int, payload: dict[str, Any]) -> Iterator[tuple[client.ApiClient, list[str]]]:
    """A loopback API server answering every GET with ``status`` and ``payload``; yields a client and the paths
    asked."""
    asked: list[str] = []

    class Handler(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server names it
            asked.append(self.path)
            self.answer(status, payload)

    with serving(Handler) as api_client:
        yield api_client, asked


@pytest.mark.parametrize(("status", "payload", "expected"), [
    (200, SERVED, True), (200, BETA_ONLY, False), (200, ABSENT, False), (500, ERROR, None), (403, FORBIDDEN, None)])
def test_discovery_tells_whether_resource_v1_is_served(status: int, payload: dict[str, Any],
                                                       expected: bool | None) -> None:
    with discovery(status, payload) as (api_client, asked):
        assert serves_resource_v1(api_client, request_timeout=5.0) is expected
    assert asked == ["/apis/"]


def test_discovery_of_an_api_server_nobody_runs_is_unknown() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again below: nothing listens there
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    with client.ApiClient(configuration) as api_client:
        assert serves_resource_v1(api_client, request_timeout=2.0) is None


@pytest.mark.parametrize(("status", "payload", "watched"), [
    (200, SERVED, True), (200, BETA_ONLY, False), (200, ABSENT, False), (500, ERROR, True), (403, FORBIDDEN, True)])
def test_scheduler_watches_claims_and_slices_only_where_the_api_is_served(
        status: int, payload: dict[str, Any], watched: bool, caplog: pytest.LogCaptureFixture) -> None:
    with discovery(status, payload) as (api_client, asked), caplog.at_level(logging.WARNING):
        assert dra_watched(KubernetesCluster(api_client, request_timeout=5.0), SchedulerSettings()) is watched
        assert len(asked) == 1
        assert not dra_watched(KubernetesCluster(api_client), SchedulerSettings(dra_claims=False))
        assert len(asked) == 1  # --no-dra-claims asks nothing
    warned = [r.getMessage() for r in caplog.records if "resource.k8s.io/v1" in r.getMessage()]
    assert warned == ([] if watched else [
        "the API server does not serve resource.k8s.io/v1 (Kubernetes before 1.34): ResourceClaims and "
        "ResourceSlices are not watched, as with --no-dra-claims; restart the scheduler once the API server "
        "serves it"])


@pytest.mark.parametrize(("payload", "watched"), [(SERVED, True), (BETA_ONLY, False)])
def test_the_scheduler_container_wires_no_claim_or_slice_port_without_the_api(payload: dict[str, Any],
                                                                             watched: bool) -> None:
    with discovery(200, payload) as (api_client, asked):
        container = SchedulerContainer(settings=SchedulerSettings())
        container.cluster.override(providers.Object(KubernetesCluster(api_client, request_timeout=5.0)))
        assert (container.claims() is not None, container.slices() is not None) == (watched, watched)
        assert len(asked) == 1  # one discovery for both ports


@pytest.mark.k8s
def test_the_live_kube_apiserver_serves_resource_v1(request: pytest.FixtureRequest) -> None:
    plane = request.getfixturevalue("contract_k8s_plane")
    api_client = plane.api_client()
    try:
        assert serves_resource_v1(api_client) is True
        assert dra_watched(KubernetesCluster(api_client), SchedulerSettings())
    finally:
        api_client.close()
