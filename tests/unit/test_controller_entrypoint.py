"""``ljrk controller``: command line, composition root, threads, HTTP endpoints, clean stop.

Covers: ``ljrk controller --help`` exits 0 and lists the contract's options; bad input — syntax, ``--listen``,
negative retries, a deadline shorter than the agent timeout, a relative socket path, an invalid protocol file —
exits 2 with one ``error:`` line before anything starts; the container resolves every provider with the
in-memory cluster (check_dependencies), with and without leader election, and takes the annotation keys and the
label from the protocol file; the running app (real threads, in-memory cluster, leader election on a Lease):
``/healthz``, ``/readyz``, ``/metrics`` answer, a label set to true creates an enable Job within 2 s, the Job's
success is written back as ``enabled``, and a succeeded Job is deleted; ``main`` returns 0 once stopped.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.memory.cluster import InMemoryCluster
from domain.kube.objects import JobPhase, JobStatus, NodeObject
from domain.toggle.jobs import is_ours
from entrypoints import cli
from entrypoints.controller.__main__ import main
from entrypoints.controller.app import ControllerApp, ControllerSettings, SettingsError
from entrypoints.controller.containers import ControllerContainer
from support.polling import eventually

BASE = ["--in-memory", "--listen", "127.0.0.1:0", "--watch-timeout-seconds", "0.2"]


def test_help_lists_the_contract(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["controller", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--kubeconfig", "--protocol", "--namespace", "--job-image", "--config-daemon-socket",
                   "--max-retries", "--backoff-base", "--failed-job-ttl", "--listen", "--leader-elect",
                   "--no-leader-elect"):
        assert option in out


@pytest.mark.parametrize(("argv", "message"), [
    (["--listen", "localhost"], "HOST:PORT"),
    ([*BASE, "--max-retries", "-1"], "max_retries"),
    ([*BASE, "--job-timeout", "120", "--job-deadline", "60"], "job_deadline"),
    ([*BASE, "--config-daemon-socket", "run/x.sock"], "config_daemon_socket"),
    ([*BASE, "--backoff-base", "0"], "backoff"),
    ([*BASE, "--bogus"], "unrecognized"),
])
def test_bad_input_exits_2_with_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ljrk controller: error: ")
    assert message in err
    assert err.count("\n") == 1


def test_invalid_protocol_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "protocol.yaml"
    bad.write_text("bogus-key: 1\n")
    assert main([*BASE, "--protocol", str(bad)]) == 2
    assert "bogus" in capsys.readouterr().err


def test_settings_validation() -> None:
    assert ControllerSettings(max_retries=2).max_tries == 3
    with pytest.raises(SettingsError):
        ControllerSettings(namespace="")
    with pytest.raises(SettingsError):
        ControllerSettings(lease_duration=5, renew_deadline=10)


@pytest.mark.parametrize("leader_elect", [True, False])
def test_container_resolves_every_provider(leader_elect: bool, tmp_path: Path) -> None:
    protocol = tmp_path / "protocol.yaml"
    protocol.write_text("node-label: gpu_share\nannotations: {node-state: example.com/state}\n")
    settings = ControllerSettings(in_memory=True, port=0, leader_elect=leader_elect, protocol_file=protocol)
    container = ControllerContainer(settings=settings)
    container.check_dependencies()
    container.init_resources()
    try:
        app = container.app()
        assert isinstance(app, ControllerApp)
        assert (container.elector() is not None) is leader_elect
        controller = container.controller()
        assert controller.enable_label == "gpu_share"
        assert controller.settings.state_key == "example.com/state"
        assert controller.settings.template.namespace == "kube-system"
        fingerprint = container.protocol().fingerprint()
        assert (f'lj_runtimekit_protocol_info{{component="controller",fingerprint="{fingerprint}"}} 1.0'
                in container.metrics_text()().decode())
        app.http.stop()
    finally:
        container.shutdown_resources()


@pytest.fixture
def running() -> Iterator[tuple[ControllerApp, InMemoryCluster]]:
    settings = ControllerSettings(in_memory=True, port=0, host="127.0.0.1", namespace="ljrk",
                                  watch_timeout_seconds=0.2, lease_duration=3, renew_deadline=2, retry_period=0.1)
    container = ControllerContainer(settings=settings)
    container.init_resources()
    app = container.app()
    cluster = container.cluster()
    assert isinstance(cluster, InMemoryCluster)
    app.start()
    try:
        yield app, cluster
    finally:
        app.stop()
        container.shutdown_resources()


def _get(app: ControllerApp, path: str) -> tuple[int, str]:
    host, port = app.http.address
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_running_app_toggles_a_node_and_serves_http(running: tuple[ControllerApp, InMemoryCluster]) -> None:
    app, cluster = running
    eventually(lambda: app.synced, what="informers synced")
    assert _get(app, "/healthz") == (200, "ok\n")
    assert _get(app, "/readyz") == (200, "ok\n")
    assert _get(app, "/nope")[0] == 404
    eventually(lambda: app.elector is not None and app.elector.is_leader, what="leadership")
    started = time.monotonic()
    cluster.create_node(NodeObject("gpu-1", labels={"lj_runtimekit_enable": "true"}))
    jobs = eventually(lambda: [j for j in cluster.list_jobs("ljrk").items if is_ours(j)], timeout=2.0,
                      what="an enable Job")
    assert time.monotonic() - started < 2.0
    (job,) = jobs
    assert job.command[3] == "enable"
    cluster.set_job_status("ljrk", job.name, JobStatus(JobPhase.SUCCEEDED, succeeded=1, finished_at=time.time()))
    eventually(lambda: cluster.get_node("gpu-1").annotations.get("lj-runtimekit.io/runtime-state") == "enabled",
               what="state enabled")
    eventually(lambda: cluster.list_jobs("ljrk").items == (), what="succeeded Job deleted")
    status, text = _get(app, "/metrics")
    assert status == 200
    assert 'lj_runtimekit_controller_nodes{state="enabled"} 1.0' in text
    assert "lj_runtimekit_controller_leader 1.0" in text


def test_main_runs_in_memory_and_stops_cleanly() -> None:
    stop = threading.Event()
    timer = threading.Timer(0.5, stop.set)
    timer.start()
    try:
        assert main([*BASE, "--no-leader-elect"], stop=stop) == 0
    finally:
        timer.cancel()
