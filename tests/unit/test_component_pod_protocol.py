"""The scheduler and the controller publish the protocol they loaded on their own Pod (annotation key
``annotations.node-protocol``; ``--pod-name``/``--pod-namespace``, defaulting to ``$POD_NAME``/``$POD_NAMESPACE``),
retrying while the API refuses, without making the replica unhealthy once done; without a pod name nothing is
published."""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from adapters.memory.cluster import InMemoryCluster
from domain.kube.objects import ContainerSpec, PodObject
from domain.kube.protocol import ProtocolConstants
from entrypoints.controller.__main__ import build_parser as controller_parser
from entrypoints.controller.__main__ import settings_from_args as controller_settings
from entrypoints.controller.app import ControllerSettings
from entrypoints.controller.app import SettingsError as ControllerSettingsError
from entrypoints.controller.containers import ControllerContainer
from entrypoints.scheduler.__main__ import build_parser as scheduler_parser
from entrypoints.scheduler.__main__ import settings_from_args as scheduler_settings
from entrypoints.scheduler.app import SchedulerSettings, SettingsError
from entrypoints.scheduler.containers import SchedulerContainer
from ports.cluster import UnavailableError
from services._shared.publish import ProtocolPublisher

NAMESPACE, POD = "kube-system", "replica-0"
KEY = ProtocolConstants().annotations.node_protocol


def _pod(cluster: InMemoryCluster) -> None:
    cluster.create_pod(PodObject(uid="", namespace=NAMESPACE, name=POD, containers=(ContainerSpec("c"),)))


def _wait_published(container: Any, cluster: InMemoryCluster) -> str:
    publisher = container.publisher()
    assert isinstance(publisher, ProtocolPublisher)
    assert publisher.published.wait(5)
    return cluster.get_pod(NAMESPACE, POD).annotations[KEY]


@pytest.mark.parametrize("component", ["scheduler", "controller"])
def test_the_replica_annotates_its_own_pod_with_its_fingerprint(component: str, tmp_path: Path) -> None:
    protocol_file = tmp_path / "protocol.yaml"
    protocol_file.write_text("memory-unit: 2Gi\n")
    expected = ProtocolConstants(memory_unit="2Gi").fingerprint()
    common: Mapping[str, Any] = {"in_memory": True, "host": "127.0.0.1", "port": 0, "protocol_file": protocol_file,
                                 "pod_name": POD, "pod_namespace": NAMESPACE}
    container: Any
    if component == "scheduler":
        container = SchedulerContainer(settings=SchedulerSettings(mode="standalone", watch_timeout_seconds=0.2,
                                                                  **common))
    else:
        container = ControllerContainer(settings=ControllerSettings(
            watch_timeout_seconds=0.2, leader_elect=False, **common))
    container.init_resources()
    try:
        cluster = container.cluster()
        assert isinstance(cluster, InMemoryCluster)
        _pod(cluster)
        app = container.app()
        app.start()
        try:
            assert _wait_published(container, cluster) == expected
            time.sleep(0.05)  # the publishing thread has ended by now
            assert app.health() == (True, "ok")
        finally:
            app.stop()
    finally:
        container.shutdown_resources()


def test_without_a_pod_name_nothing_is_published() -> None:
    scheduler = SchedulerContainer(settings=SchedulerSettings(in_memory=True, port=0))
    controller = ControllerContainer(settings=ControllerSettings(in_memory=True, port=0))
    for container in (scheduler, controller):
        container.init_resources()
        try:
            assert container.publisher() is None
        finally:
            container.shutdown_resources()


class RefusingCluster(InMemoryCluster):
    """Refuses the first ``refusals`` pod annotation patches (API server down)."""

    def __init__(self, refusals: int) -> None:
        super().__init__()
        self.refusals = refusals

    def patch_pod_annotations(self, namespace: str, name: str, changes: Mapping[str, str | None],
                              **kwargs: Any) -> PodObject:
        if self.refusals > 0:
            self.refusals -= 1
            raise UnavailableError("API server unavailable")
        return super().patch_pod_annotations(namespace, name, changes, **kwargs)


def test_pod_publisher_retries_until_written_and_stops_when_asked() -> None:
    cluster = RefusingCluster(refusals=2)
    _pod(cluster)
    publisher = ProtocolPublisher(cluster, pod=(NAMESPACE, POD), key=KEY, fingerprint="abc", first_retry_s=0.01)
    publisher(threading.Event())
    assert (publisher.published.is_set(), cluster.refusals) == (True, 0)
    assert cluster.get_pod(NAMESPACE, POD).annotations[KEY] == "abc"
    stopped = ProtocolPublisher(RefusingCluster(10**6), pod=(NAMESPACE, POD), key=KEY, fingerprint="abc")
    stop = threading.Event()
    stop.set()
    stopped(stop)
    assert not stopped.published.is_set()


def test_a_missing_pod_is_retried_not_raised() -> None:
    cluster = InMemoryCluster()
    publisher = ProtocolPublisher(cluster, pod=(NAMESPACE, POD), key=KEY, fingerprint="abc", first_retry_s=0.01)
    stop = threading.Event()
    thread = threading.Thread(target=publisher, args=(stop,))
    thread.start()
    try:
        assert not publisher.published.wait(0.1)
        _pod(cluster)
        assert publisher.published.wait(5)
    finally:
        stop.set()
        thread.join(5)
    assert cluster.get_pod(NAMESPACE, POD).annotations[KEY] == "abc"


def test_publisher_targets_are_validated() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ProtocolPublisher(InMemoryCluster(), key=KEY, fingerprint="f")
    with pytest.raises(ValueError, match="exactly one"):
        ProtocolPublisher(InMemoryCluster(), key=KEY, fingerprint="f", node="n", pod=("a", "b"))
    with pytest.raises(ValueError, match="must not be empty"):
        ProtocolPublisher(InMemoryCluster(), key=KEY, fingerprint="f", pod=("", "b"))


def test_pod_identity_comes_from_the_downward_api_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "sched-abc")
    monkeypatch.setenv("POD_NAMESPACE", "gpu")
    args: argparse.Namespace = scheduler_parser().parse_args(["--mode", "extender", "--listen", "127.0.0.1:0"])
    assert (scheduler_settings(args).pod_namespace, scheduler_settings(args).pod_name) == ("gpu", "sched-abc")
    args = controller_parser().parse_args(["--pod-name", "ctl-1"])
    assert (controller_settings(args).pod_namespace, controller_settings(args).pod_name) == ("gpu", "ctl-1")
    monkeypatch.delenv("POD_NAME")
    args = scheduler_parser().parse_args(["--mode", "extender", "--listen", "127.0.0.1:0"])
    assert (scheduler_settings(args).pod_namespace, scheduler_settings(args).pod_name) == ("", "")


def test_a_pod_name_needs_its_namespace() -> None:
    with pytest.raises(SettingsError, match="pod_name='p'"):
        SchedulerSettings(pod_name="p")
    with pytest.raises(ControllerSettingsError, match="give both"):
        ControllerSettings(pod_namespace="ns")
