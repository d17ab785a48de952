"""``ljrk inspect`` on the stack of ``ljrk up`` (every component wired as in production, simulated GPUs, emulated
kubelets; ``entrypoints.up.containers.UpContainer``), reading the stack's cluster and its scheduler's
``/debug/ledger`` over HTTP.

Covers, at a quiescent point of two nodes with a whole-GPU pod and two shares running: the report names each pod's
container on the GPU the device plugin allocated, nothing is flagged (fresh inventories, Runtimes enabled by the
toggle Jobs), the scheduler agrees, exit 0; on the in-memory cluster, and (``k8s``) with ``--kubeconfig`` on the
test API server, as ``ljrk up --kubeconfig`` runs.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dependency_injector import providers
from k8s_harness import ControlPlane

from adapters.grpc.kubelet_emulator import DURATION_ANNOTATION
from domain.kube.objects import PodObject, PodPhase
from domain.simulation.workload import TracePod
from entrypoints.inspect.__main__ import main
from entrypoints.inspect.containers import InspectContainer
from entrypoints.up.app import UpApp, UpSettings
from entrypoints.up.containers import UpContainer
from entrypoints.up.workload import Arrival, pod_object
from ports.cluster import ClusterApi

NODES = ("ljrk-up-node-0", "ljrk-up-node-1")


def _start(tmp_path: Path, kubeconfig: Path | None) -> Iterator[UpApp]:
    work = Path(tempfile.mkdtemp(prefix="u", dir="/tmp"))  # unix socket paths: at most 107 bytes
    settings = UpSettings(nodes=2, pods=1, output_dir=tmp_path / "out", progress=False, settle_timeout_s=60.0,
                          ready_timeout_s=120.0, work_dir=work, kubeconfig=kubeconfig)
    container = UpContainer(settings=settings)
    container.speedup.override(providers.Object(1.0))
    container.init_resources()
    app = container.app()
    try:
        app.start(threading.Event())
        yield app
    finally:
        app.shutdown()
        container.shutdown_resources()
        shutil.rmtree(work, ignore_errors=True)


def _submit_and_settle(app: UpApp) -> None:
    for name, gpus, milli in (("whole", 1, 1000), ("share-a", 1, 300), ("share-b", 1, 500)):
        pod = pod_object(Arrival(TracePod(f"inspect-{name}", 500, 512, gpus, milli), 0.0, None), app.protocol,
                         duration_annotation=DURATION_ANNOTATION, tolerations=app.tolerations)
        app.cluster.create_pod(pod)
    deadline = time.monotonic() + 120  # generous: a loaded machine admits slowly; the loop ends when they run
    while not all(p.phase is PodPhase.RUNNING for p in _ours(app.cluster)) or len(_ours(app.cluster)) < 3:
        assert time.monotonic() < deadline, "pods not running in 120 s"
        time.sleep(0.05)
    app.stack.clock.pause()  # departures frozen: the books hold still while inspect reads them
    settled = app.settle(threading.Event())
    assert settled.settled, settled.in_flight
    assert not settled.disagreements


def _ours(cluster: ClusterApi) -> list[PodObject]:
    return [p for p in cluster.list_pods(namespace="default").items if p.name.startswith("inspect-")]


def _check(app: UpApp, argv: list[str], capsys: pytest.CaptureFixture[str], *, cluster: ClusterApi | None) -> None:
    metrics_url = app.stack.scheduler_url()  # what ljrk up prints: http://127.0.0.1:PORT/metrics
    assert metrics_url.endswith("/metrics")
    container = InspectContainer()
    if cluster is not None:
        container.cluster.override(providers.Object(cluster))
    results = []
    for node in NODES:  # one node at a time: a shared API server may hold other tests' nodes
        code = main([node, *argv, "--scheduler", metrics_url, "-o", "json"], container=container)
        out, err = capsys.readouterr()
        assert err == ""
        results.append((code, json.loads(out)))
    for code, data in results:
        (node,) = data["nodes"]
        assert node["flags"] == [], node["flags"]
        assert data["disagreements"] == []
        assert code == 0
    holders = {h["pod"]: (g["uuid"], h["coreMilli"]) for _, data in results for g in data["nodes"][0]["gpus"]
               for h in g["holders"]}
    pods = {p.name: p for p in _ours(app.cluster)}
    assert {name: milli for name, (_, milli) in holders.items() if name in pods} == {
        "inspect-whole": 1000, "inspect-share-a": 300, "inspect-share-b": 500}
    for name, pod in pods.items():  # the GPU the report names is in the pod's plan, the node's inventory
        assert holders[name][0] in pod.annotations[app.protocol.annotations.pod_plan]


def test_inspect_on_the_in_memory_stack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for app in _start(tmp_path, None):
        _submit_and_settle(app)
        _check(app, [], capsys, cluster=app.cluster)


@pytest.mark.k8s
def test_inspect_on_ljrk_up_with_kubeconfig(k8s_control_plane: ControlPlane, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    for app in _start(tmp_path, k8s_control_plane.kubeconfig):
        _submit_and_settle(app)
        _check(app, ["--kubeconfig", str(k8s_control_plane.kubeconfig)], capsys, cluster=None)
