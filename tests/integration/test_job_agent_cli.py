"""``ljrk job-agent`` as a process against a real ``ljrk runtime --backend simulated`` on a unix socket.

Both sides are the real commands (subprocesses of this interpreter); the state is read back with
``GrpcNodeConfig`` (GetStatus).

Behaviours covered:
- ``--action enable`` exits 0, GetStatus then reports enabled with the agent's reason, and the state survives a
  restart of the Runtime on the same state directory (which starts disabled when nothing was saved);
- ``--action disable`` exits 0 and GetStatus reports disabled;
- with no socket the agent keeps waiting, then exits 3 within the timeout with one error line naming the action,
  the socket and the cause;
- a Runtime started while the agent waits is picked up: exit 0, state enabled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.grpc import GrpcNodeConfig
from domain.runtime.types import ConfigStatus, RuntimeState
from support.polling import wait_for

LJRK = [sys.executable, "-c", "import sys; from entrypoints.cli import main; sys.exit(main())"]
"""The ``ljrk`` console script's entry point, run with this interpreter (no dependency on PATH)."""
ENV = {**os.environ, "PYTHONWARNINGS": "error"}



class Runtime:
    """``ljrk runtime`` in a subprocess: simulated GPUs, disabled until told otherwise, state in ``state/``."""

    def __init__(self, directory: Path) -> None:
        self.socket = directory / "runtime.sock"
        self.state_dir = directory / "state"
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        command = [*LJRK, "runtime", "--backend", "simulated", "--simulated-gpus", "1x16Gi", "--socket",
                   str(self.socket), "--state-dir", str(self.state_dir), "--initial-state", "disabled"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)

    def status(self) -> ConfigStatus:
        with GrpcNodeConfig.connect(self.socket, timeout_s=5) as client:
            wait_for(self.socket.exists)
            client.wait_ready(10)
            return client.status()

    def stop(self) -> None:
        if self.process is None:
            return
        process, self.process = self.process, None
        process.send_signal(signal.SIGTERM)
        try:
            _, stderr = process.communicate(timeout=15)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        assert process.returncode == 0, stderr


@pytest.fixture
def node(sock_dir: Path) -> Iterator[Runtime]:
    runtime = Runtime(sock_dir)
    yield runtime
    runtime.stop()


def agent(action: str, socket: Path, *extra: str) -> subprocess.Popen[str]:
    command = [*LJRK, "job-agent", "--action", action, "--config-daemon-socket", str(socket), *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def finish(process: subprocess.Popen[str], timeout_s: float = 30) -> tuple[int, list[str]]:
    """Exit code and stderr lines of ``process``."""
    try:
        _, stderr = process.communicate(timeout=timeout_s)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, stderr.splitlines()


def test_enable_is_verified_and_survives_a_runtime_restart(node: Runtime) -> None:
    node.start()
    assert node.status().state is RuntimeState.DISABLED
    code, lines = finish(agent("enable", node.socket, "--timeout", "20", "--reason", "job enable-n1"))
    assert code == 0, lines
    status = node.status()
    assert (status.state, status.reason) == (RuntimeState.ENABLED, "job enable-n1")
    node.stop()
    node.start()  # --initial-state disabled applies only when nothing was saved
    assert node.status().state is RuntimeState.ENABLED


def test_disable_is_verified(node: Runtime) -> None:
    node.start()
    assert finish(agent("enable", node.socket, "--timeout", "20"))[0] == 0
    code, lines = finish(agent("disable", node.socket, "--timeout", "20"))
    assert code == 0, lines
    assert node.status().state is RuntimeState.DISABLED


def test_missing_socket_waits_then_exits_3_within_the_timeout(sock_dir: Path) -> None:
    socket = sock_dir / "absent.sock"
    started = time.monotonic()
    code, lines = finish(agent("enable", socket, "--timeout", "2"))
    elapsed = time.monotonic() - started
    assert code == 3, lines
    assert 2.0 <= elapsed < 10.0  # waited the whole timeout (plus interpreter start-up), not more
    assert lines[-1].startswith(f"ljrk job-agent: error: enable via {socket}: gave up after 2 s and ")
    assert lines[-1].endswith(f"last error: socket {socket} does not exist (yet)")


def test_runtime_started_late_within_the_timeout_is_picked_up(node: Runtime) -> None:
    process = agent("enable", node.socket, "--timeout", "30")
    time.sleep(2.0)
    assert process.poll() is None  # still waiting for the socket
    node.start()
    code, lines = finish(process)
    assert code == 0, lines
    assert node.status().state is RuntimeState.ENABLED
