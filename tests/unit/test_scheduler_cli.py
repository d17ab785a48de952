"""``ljrk scheduler``: command line, composition root, start and clean stop.

Covers: ``--help`` exits 0; unknown policy, bad ``--listen``, missing ``--mode`` and an invalid protocol file exit 2
with one ``error:`` line before anything starts; the container resolves every provider with the in-memory
cluster (check_dependencies); ``main`` runs with ``--in-memory`` and returns 0 once stopped; ``parse_listen``;
``/readyz`` (``SchedulerApp.ready``) is 200 only for the leader with a rebuilt ledger, in standalone mode as in
extender mode (a standalone standby used to answer 200); ``--metrics-listen`` serves ``/metrics`` and the probes but
never the extender verbs, and a bad one exits 2;
commits over the API server use a request timeout below ``lease_duration − renew_deadline``.
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

import pytest

from adapters.memory.cluster import InMemoryCluster
from entrypoints import cli
from entrypoints.scheduler.__main__ import main, parse_listen
from entrypoints.scheduler.app import SchedulerApp, SchedulerSettings, SettingsError
from entrypoints.scheduler.containers import SchedulerContainer
from support.polling import wait_for

BASE = ["--mode", "standalone", "--listen", "127.0.0.1:0", "--in-memory", "--watch-timeout-seconds", "0.2"]


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["scheduler", "--help"]) == 0
    assert "--mode" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    ([*BASE, "--policy", "nope"], "unknown policy"),
    (["--mode", "extender", "--listen", "localhost"], "HOST:PORT"),
    (["--listen", "127.0.0.1:0"], "--mode"),
    (["--mode", "extender", "--listen", "127.0.0.1:0", "--metrics-listen", "9402"], "HOST:PORT"),
    ([*BASE, "--tie-break", "coin"], "tie_break"),
    (["--mode", "extender", "--listen", "0.0.0.0:0", "--in-memory"], "--insecure-listen"),
])
def test_bad_input_exits_2_with_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ljrk scheduler: error: ")
    assert message in err
    assert err.count("\n") == 1


def test_invalid_protocol_file_exits_2_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "protocol.yaml"
    bad.write_text("memory-unit: 1Gi\nbogus-key: 1\n")
    assert main([*BASE, "--protocol", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bogus" in err
    assert str(bad) in err


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:8888") == ("127.0.0.1", 8888)
    assert parse_listen(":9000") == ("0.0.0.0", 9000)
    assert parse_listen("[::1]:80") == ("::1", 80)
    with pytest.raises(argparse.ArgumentTypeError):
        parse_listen("host:99999")


def test_settings_validation() -> None:
    with pytest.raises(SettingsError, match="mode"):
        SchedulerSettings(mode="both")
    with pytest.raises(SettingsError, match="leader timings"):
        SchedulerSettings(lease_duration=5, renew_deadline=10)


def test_container_resolves_every_provider_in_memory() -> None:
    settings = SchedulerSettings(mode="extender", host="127.0.0.1", port=0, in_memory=True, watch_timeout_seconds=0.2)
    container = SchedulerContainer(settings=settings)
    container.check_dependencies()
    container.init_resources()
    try:
        app = container.app()
        assert isinstance(app, SchedulerApp)
        assert app.extender is not None
        assert app.loop is None
        assert container.metrics_text()().startswith(b"# HELP")
        assert container.protocol().scheduler_name == "lj-runtimekit-scheduler"
        app.http.stop()
    finally:
        container.shutdown_resources()


def test_main_runs_in_memory_and_stops_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    apps: list[SchedulerApp] = []
    start = SchedulerApp.start

    def spy(self: SchedulerApp) -> None:
        apps.append(self)
        start(self)

    monkeypatch.setattr(SchedulerApp, "start", spy)
    stop = threading.Event()
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(main(BASE, stop=stop)))
    thread.start()
    try:
        wait_for(lambda: apps and apps[0].ready()[0] and apps[0].service.serving)
        assert apps
        assert apps[0].ready() == (True, "ok")
        assert apps[0].service.serving
        assert apps[0].health() == (True, "ok")
    finally:
        stop.set()
        thread.join(10)
    assert codes == [0]


@pytest.mark.parametrize("mode", ["standalone", "extender"])
def test_only_the_leader_with_a_rebuilt_ledger_is_ready(mode: str) -> None:
    from adapters.prometheus import PrometheusSchedulerMetrics
    from domain.kube.protocol import ProtocolConstants
    from services.scheduler.service import SchedulerService

    leader = [False]
    cluster = InMemoryCluster()
    service = SchedulerService(cluster, ProtocolConstants(), PrometheusSchedulerMetrics(), is_leader=lambda: leader[0])
    settings = SchedulerSettings(mode=mode, host="127.0.0.1", port=0, in_memory=True)
    app = SchedulerApp(settings=settings, cluster=cluster, service=service, elector=None, metrics_text=lambda: b"")
    try:
        assert app.ready() == (False, "informers not synced")
        app.nodes.synced.set()
        app.pods.synced.set()
        assert app.ready() == (False, "standby (not the leader, or rebuilding the ledger)")  # standalone said ok
        leader[0] = True
        term = service.begin_leading()
        assert not app.ready()[0]  # leading, ledger not rebuilt yet
        service.rebuild_ledger(term)
        assert app.ready() == (True, "ok")
        leader[0] = False
        assert not app.ready()[0]
    finally:
        app.http.stop()


def test_commits_over_the_api_server_time_out_before_a_successor_can_lead() -> None:
    from kubernetes import client

    from adapters.kubernetes import KubernetesCluster
    from entrypoints.scheduler.containers import commit_cluster, commit_timeout

    settings = SchedulerSettings(lease_duration=15, renew_deadline=10, retry_period=2)
    assert commit_timeout(settings) == pytest.approx(4.0)
    with client.ApiClient() as api_client:
        cluster = KubernetesCluster(api_client)
        view = commit_cluster(cluster, settings)
        assert isinstance(view, KubernetesCluster)
        assert view.request_timeout == pytest.approx(4.0)
        assert view.request_timeout < settings.lease_duration - settings.renew_deadline
        assert cluster.request_timeout == 30.0  # listings keep their own, longer timeout
    memory = InMemoryCluster()
    assert commit_cluster(memory, settings) is memory


def test_metrics_listener_serves_metrics_and_probes_but_no_verbs() -> None:
    import urllib.error
    import urllib.request

    settings = SchedulerSettings(mode="extender", host="127.0.0.1", port=0, metrics_listen=("127.0.0.1", 0),
                                 in_memory=True, watch_timeout_seconds=0.2)
    from entrypoints.scheduler.__main__ import build_parser, settings_from_args

    parsed = settings_from_args(build_parser().parse_args(
        ["--mode", "extender", "--listen", "127.0.0.1:8888", "--metrics-listen", ":9402"]))
    assert parsed.metrics_listen == ("0.0.0.0", 9402)
    bare = build_parser().parse_args(["--mode", "extender", "--listen", "127.0.0.1:1"])
    assert settings_from_args(bare).metrics_listen is None
    container = SchedulerContainer(settings=settings)
    container.init_resources()
    try:
        app = container.app()
        assert app.metrics_http is not None
        app.http.start()
        app.metrics_http.start()
        host, port = app.metrics_http.address
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as reply:
            page = reply.read().decode()
        assert "lj_runtimekit_scheduler_drift_repairs_total" in page
        assert "# TYPE lj_runtimekit_scheduler_protocol_mismatch_nodes gauge" in page
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(f"http://{host}:{port}/filter", data=b"{}", method="POST"),
                                   timeout=5)
        refused.value.close()
        assert refused.value.code == 501  # no POST handler at all on this listener
        with pytest.raises(urllib.error.HTTPError) as standby:
            urllib.request.urlopen(f"http://{host}:{port}/readyz", timeout=5)
        standby.value.close()
        assert standby.value.code == 503  # the same readiness as the main listener: informers not synced
        verbs_host, verbs_port = app.http.address
        with urllib.request.urlopen(f"http://{verbs_host}:{verbs_port}/metrics", timeout=5) as reply:
            assert reply.status == 200  # the main listener keeps its /metrics
    finally:
        app.stop(join_seconds=0.5)
        container.shutdown_resources()
    with pytest.raises(SettingsError, match="metrics_listen"):
        SchedulerSettings(metrics_listen=("0.0.0.0", 70000))


@pytest.mark.parametrize("listen", [":8888", "0.0.0.0:8888", "10.0.0.7:8888", "[::]:8888", "scheduler.local:8888"])
def test_extender_verbs_off_loopback_need_insecure_listen(listen: str) -> None:
    """The verbs bind pods to nodes without authentication: off loopback only with the explicit flag (the
    exposure HAMi#3030 had); standalone mode serves no verbs and is not limited."""
    from entrypoints.scheduler.__main__ import build_parser, settings_from_args

    with pytest.raises(SettingsError, match=r"listen host=.*--insecure-listen"):
        settings_from_args(build_parser().parse_args(["--mode", "extender", "--listen", listen]))
    allowed = settings_from_args(build_parser().parse_args(["--mode", "extender", "--listen", listen,
                                                            "--insecure-listen"]))
    assert allowed.insecure_listen
    assert allowed.port == 8888
    assert settings_from_args(build_parser().parse_args(["--mode", "standalone", "--listen", listen])).port == 8888


@pytest.mark.parametrize("listen", ["127.0.0.1:8888", "127.3.4.5:8888", "[::1]:8888", "localhost:8888"])
def test_extender_verbs_on_loopback_need_no_flag(listen: str) -> None:
    from entrypoints.scheduler.__main__ import build_parser, settings_from_args

    settings = settings_from_args(build_parser().parse_args(["--mode", "extender", "--listen", listen]))
    assert not settings.insecure_listen
    assert settings.port == 8888


@pytest.mark.parametrize("mode", ["extender", "standalone"])
def test_the_container_watches_slices_and_follows_nominations_in_extender_mode_only(mode: str) -> None:
    container = SchedulerContainer(settings=SchedulerSettings(mode=mode, host="127.0.0.1", port=0, in_memory=True))
    app = container.app()
    try:
        assert container.service().config.follow_nominations is (mode == "extender")
        assert app.slices is not None
        assert app.service.listing.slice_watermark is not None
    finally:
        app.http.stop()
    off = SchedulerContainer(settings=SchedulerSettings(mode=mode, host="127.0.0.1", port=0, in_memory=True,
                                                        dra_claims=False))
    app = off.app()
    try:
        assert app.slices is None
        assert app.claims is None
    finally:
        app.http.stop()
