"""Fixtures for the port contract suites: each runs against the in-memory adapter and the real one.

The real cluster adapter needs the control plane of ``tests/integration/k8s_harness.py`` (binaries from
``scripts/k8s-control-plane.sh``); without it the ``kubernetes`` cases are skipped, or fail when
``LJRK_REQUIRE_K8S=1`` — the same rule, and the same code, as ``tests/integration/conftest.py``.

This suite starts its own etcd + kube-apiserver (no scheduler: contract pods must stay where the test puts them)
and, only for the 410 case, a second one with the watch cache off (see ``uncached_k8s_plane``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import pytest

from adapters.memory.cluster import InMemoryCluster
from domain.kube.objects import EventType, WatchEvent
from ports.cluster import ClusterApi

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"
if str(INTEGRATION) not in sys.path:
    sys.path.insert(0, str(INTEGRATION))

import k8s_harness  # noqa: E402  (tests/integration is not a package; it has to be put on sys.path first)


def _integration_conftest() -> ModuleType:
    """``tests/integration/conftest.py`` loaded under a private name, for its binary lookup (skip/fail rule)."""
    name = "_ljrk_integration_conftest"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, INTEGRATION / "conftest.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def contract_k8s_bin_dir() -> Path:
    """Directory of the control plane binaries (skips, or fails under LJRK_REQUIRE_K8S=1, when absent)."""
    bin_dir: Path = _integration_conftest()._bin_dir()
    return bin_dir


@pytest.fixture(scope="session")
def contract_k8s_plane(contract_k8s_bin_dir: Path) -> Iterator[k8s_harness.ControlPlane]:
    """etcd + kube-apiserver with default settings (watch cache on), shared by the whole contract session."""
    plane = k8s_harness.start_control_plane(contract_k8s_bin_dir)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def uncached_k8s_plane(contract_k8s_bin_dir: Path) -> Iterator[k8s_harness.ControlPlane]:
    """A second plane with ``--watch-cache=false``: its watches are served by etcd, so compacting etcd makes
    old resourceVersions answer 410. With the watch cache on (the default) kube-apiserver keeps every event since its
    start-up list (at least 100, doubling while events are younger than 75 s), so no test can age an RV out
    of it quickly."""
    plane = k8s_harness.start_control_plane(contract_k8s_bin_dir, extra_apiserver_args=["--watch-cache=false"])
    try:
        yield plane
    finally:
        plane.stop()


def compact_etcd(plane: k8s_harness.ControlPlane, revision: int) -> None:
    """Compact the plane's etcd up to ``revision`` through etcd's v3 JSON gateway."""
    body = json.dumps({"revision": str(revision), "physical": True}).encode()
    request = urllib.request.Request(
        f"{plane.etcd_url}/v3/kv/compaction", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def collect_events(
    events: Iterator[WatchEvent[object]],
    keep: Callable[[WatchEvent[object]], bool],
    done: Callable[[list[WatchEvent[object]]], bool],
) -> list[WatchEvent[object]]:
    """Events passing ``keep`` (never BOOKMARKs) until ``done`` says so or the watch ends."""
    seen: list[WatchEvent[object]] = []
    try:
        for event in events:
            if event.type is EventType.BOOKMARK or not keep(event):
                continue
            seen.append(event)
            if done(seen):
                break
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()
    return seen


@attrs.define
class ClusterUnderTest:
    """One adapter under test plus the per-test names and cleanup the shared real server needs.

    ``kind`` is ``"memory"`` or ``"kubernetes"``; ``namespace`` is fresh for this test; ``node_name()`` makes
    a unique node name and deletes that node after the test; ``memory`` is the InMemoryCluster (or None).
    """

    kind: str
    api: ClusterApi
    namespace: str
    memory: InMemoryCluster | None = None
    plane: Any = None
    _nodes: list[str] = attrs.field(factory=list)

    def node_name(self, prefix: str = "node") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self._nodes.append(name)
        return name

    def name(self, prefix: str = "pod") -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    def cleanup(self) -> None:
        from ports.cluster import NotFoundError

        for node in self._nodes:
            with contextlib.suppress(NotFoundError):
                self.api.delete_node(node)


def _kubernetes_cluster(plane: k8s_harness.ControlPlane) -> Iterator[ClusterUnderTest]:
    from kubernetes import client

    from adapters.kubernetes import KubernetesCluster

    api_client = plane.api_client()
    core = client.CoreV1Api(api_client)
    namespace = f"c-{uuid.uuid4().hex[:10]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    under_test = ClusterUnderTest("kubernetes", KubernetesCluster(api_client), namespace, plane=plane)
    try:
        yield under_test
    finally:
        try:
            under_test.cleanup()
            core.delete_namespace(namespace)  # stays Terminating (no namespace controller); harmless
        finally:
            api_client.close()


@pytest.fixture(params=["memory", pytest.param("kubernetes", marks=pytest.mark.k8s)])
def cluster(request: pytest.FixtureRequest) -> Iterator[ClusterUnderTest]:
    """The cluster port under test: a fresh InMemoryCluster, or KubernetesCluster on the shared real server."""
    if request.param == "memory":
        memory = InMemoryCluster()
        yield ClusterUnderTest("memory", memory, f"c-{uuid.uuid4().hex[:10]}", memory=memory)
        return
    plane = request.getfixturevalue("contract_k8s_plane")
    yield from _kubernetes_cluster(plane)
