"""``ljrk scheduler``: command line, composition root, start and clean stop.

Covers: ``--help`` exits 0; unknown policy, bad ``--listen``, missing ``--mode`` and an invalid protocol file exit 2
with one ``error:`` line before anything starts; the container resolves every provider with the in-memory
cluster (check_dependencies); ``main`` runs with ``--in-memory`` and returns 0 once stopped; ``parse_listen``.
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import pytest

from entrypoints import cli
from entrypoints.scheduler.__main__ import main, parse_listen
from entrypoints.scheduler.app import SchedulerApp, SchedulerSettings, SettingsError
from entrypoints.scheduler.containers import SchedulerContainer

BASE = ["--mode", "standalone", "--listen", "127.0.0.1:0", "--in-memory", "--watch-timeout-seconds", "0.2"]


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["scheduler", "--help"]) == 0
    assert "--mode" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    ([*BASE, "--policy", "nope"], "unknown policy"),
    (["--mode", "extender", "--listen", "localhost"], "HOST:PORT"),
    (["--listen", "127.0.0.1:0"], "--mode"),
    ([*BASE, "--tie-break", "coin"], "tie_break"),
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


def test_main_runs_in_memory_and_stops_cleanly() -> None:
    stop = threading.Event()
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(main(BASE, stop=stop)))
    thread.start()
    time.sleep(0.5)
    stop.set()
    thread.join(10)
    assert codes == [0]
