"""``ljrk job-agent`` logic and exit codes over the in-process Runtime as the node operation (no sockets).

Behaviours covered:
- enable and disable set the state and verify it with GetStatus; the reason is recorded;
- transient errors (``RuntimeUnavailableError``, from Enable or from GetStatus) are retried with exponential
  backoff capped at 2 s and never sleeping past the deadline; then the run succeeds;
- each call's deadline is ``min(call timeout, time left)``;
- a GetStatus that disagrees with the request is a verify mismatch: exit 1 at once, no retry;
- a non-transient error is final: exit 1 after one attempt, cause in the one-line message;
- still unavailable when ``--timeout`` is spent: exit 3, naming the last error;
- the stop event (SIGTERM) ends the wait: exit 4;
- bad command lines exit 2 (missing/unknown action, non-positive or non-numeric timeout, unknown operation,
  over-long socket path);
- the container resolves with the default ``grpc`` operation, refuses an unknown one, and the grpc connector
  treats a missing socket as transient; ``ljrk job-agent`` is a registered subcommand.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from dependency_injector import providers

from domain.gpu import Gpu, GpuUuid
from domain.runtime.types import ConfigStatus, RuntimeState
from entrypoints import cli
from entrypoints.job_agent.__main__ import main
from entrypoints.job_agent.app import (
    Action,
    AgentTimeoutError,
    JobAgent,
    JobAgentSettings,
    OperationConnector,
    SettingsError,
    VerifyMismatchError,
)
from entrypoints.job_agent.containers import JobAgentContainer, grpc_operation, select_operation
from entrypoints.runtime.inprocess import InProcessRuntime
from ports.node_config import NodeConfig
from ports.runtime import NodeRuntimeError, RuntimeUnavailableError

SOCKET = "/run/ljrk/runtime.sock"


@attrs.define
class FakeClock:
    """Monotonic seconds that move only when the agent waits or a call takes time."""

    now: float = 1000.0
    waits: list[float] = attrs.Factory(list)
    signal_on_wait: bool = False  # SIGTERM arrives during the first wait

    def clock(self) -> float:
        return self.now

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        self.waits.append(seconds)
        self.now += seconds
        if self.signal_on_wait:
            stop.set()
        return stop.is_set()


@attrs.define
class FlakyConfig:
    """A NodeConfig in front of ``inner``: the first ``failures`` calls named in ``failing`` raise ``error``, each
    taking ``call_s`` seconds of the fake clock."""

    inner: NodeConfig
    clock: FakeClock
    failures: int = 0
    failing: tuple[str, ...] = ("enable", "disable", "status")
    error: Exception = attrs.Factory(lambda: RuntimeUnavailableError("node Runtime Enable: UNAVAILABLE: down"))
    call_s: float = 0.0
    calls: list[str] = attrs.Factory(list)

    def _maybe_fail(self, name: str) -> None:
        self.calls.append(name)
        self.clock.now += self.call_s
        if name in self.failing and self.failures > 0:
            self.failures -= 1
            raise self.error

    def enable(self, reason: str = "") -> ConfigStatus:
        self._maybe_fail("enable")
        return self.inner.enable(reason)

    def disable(self, reason: str = "") -> ConfigStatus:
        self._maybe_fail("disable")
        return self.inner.disable(reason)

    def status(self) -> ConfigStatus:
        self._maybe_fail("status")
        return self.inner.status()


class LostToggle:
    """A NodeConfig whose Enable/Disable answer as asked but change nothing (a daemon that lies)."""

    def __init__(self, inner: InProcessRuntime) -> None:
        self.inner = inner

    def enable(self, reason: str = "") -> ConfigStatus:
        return ConfigStatus(RuntimeState.ENABLED)

    def disable(self, reason: str = "") -> ConfigStatus:
        return ConfigStatus(RuntimeState.DISABLED)

    def status(self) -> ConfigStatus:
        return self.inner.status()


@attrs.define
class Connector:
    """An ``OperationConnector`` over one NodeConfig; records each call's deadline."""

    operation: NodeConfig
    budgets: list[float] = attrs.Factory(list)

    @contextlib.contextmanager
    def __call__(self, timeout_s: float) -> Iterator[NodeConfig]:
        self.budgets.append(timeout_s)
        yield self.operation


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


ONE_GPU = (Gpu(0, GpuUuid("GPU-0"), "A100", 16 * 2**30),)
"""The node's GPUs: the config service is what these tests use."""


def runtime(state: RuntimeState = RuntimeState.DISABLED) -> InProcessRuntime:
    return InProcessRuntime(ONE_GPU, state=state, clock=lambda: 1.0)


def agent(connect: OperationConnector, clock: FakeClock, call_timeout_s: float = 5.0) -> JobAgent:
    return JobAgent(connect, call_timeout_s=call_timeout_s, clock=clock.clock, wait=clock.wait)


def run_main(args: list[str], operation: NodeConfig, clock: FakeClock, stop: threading.Event | None = None) -> int:
    container = JobAgentContainer()
    container.agent.override(providers.Factory(JobAgent, Connector(operation), clock=clock.clock, wait=clock.wait))
    return main(args, container=container, stop=stop or threading.Event())


# ------------------------------------------------------------------------------------------------ the agent
def test_enable_and_disable_are_verified_and_record_the_reason(clock: FakeClock) -> None:
    node = runtime()
    status = agent(Connector(node), clock).run(Action.ENABLE, timeout_s=10, reason="job enable-n1")
    assert (status.state, status.reason) == (RuntimeState.ENABLED, "job enable-n1")
    status = agent(Connector(node), clock).run(Action.DISABLE, timeout_s=10, reason="job disable-n1")
    assert (status.state, node.status().reason) == (RuntimeState.DISABLED, "job disable-n1")
    assert clock.waits == []


def test_transient_errors_are_retried_with_growing_backoff(clock: FakeClock) -> None:
    node = runtime()
    flaky = FlakyConfig(node, clock, failures=3)
    worker = agent(Connector(flaky), clock)
    assert worker.run(Action.ENABLE, timeout_s=60).state is RuntimeState.ENABLED
    assert worker.attempts == 4
    assert clock.waits == pytest.approx([0.2, 0.4, 0.8])
    assert flaky.calls == ["enable", "enable", "enable", "enable", "status"]


def test_transient_error_in_get_status_repeats_the_whole_attempt(clock: FakeClock) -> None:
    flaky = FlakyConfig(runtime(RuntimeState.ENABLED), clock, failures=1, failing=("status",))
    worker = agent(Connector(flaky), clock)
    assert worker.run(Action.DISABLE, timeout_s=60).state is RuntimeState.DISABLED
    assert flaky.calls == ["disable", "status", "disable", "status"]


def test_backoff_is_capped_and_never_sleeps_past_the_deadline(clock: FakeClock) -> None:
    flaky = FlakyConfig(runtime(), clock, failures=10**6)
    started = clock.now
    with pytest.raises(AgentTimeoutError, match=r"gave up after 10 s and 8 attempt\(s\): last error: .*UNAVAILABLE"):
        agent(Connector(flaky), clock).run(Action.ENABLE, timeout_s=10)
    assert clock.waits == pytest.approx([0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0, 1.0])
    assert clock.now == pytest.approx(started + 10)


def test_each_call_deadline_is_bounded_by_the_time_left(clock: FakeClock) -> None:
    flaky = FlakyConfig(runtime(), clock, call_s=1.0)
    connector = Connector(flaky)
    agent(connector, clock, call_timeout_s=5.0).run(Action.ENABLE, timeout_s=3)
    assert connector.budgets == pytest.approx([3.0, 2.0])


def test_verify_mismatch_fails_at_once(clock: FakeClock) -> None:
    connector = Connector(LostToggle(runtime()))
    with pytest.raises(VerifyMismatchError, match="enable answered enabled but GetStatus reports disabled"):
        agent(connector, clock).run(Action.ENABLE, timeout_s=60)
    assert clock.waits == []


# ------------------------------------------------------------------------------------------------ exit codes
def test_success_exits_0(clock: FakeClock, capsys: pytest.CaptureFixture[str]) -> None:
    node = runtime()
    assert run_main(["--action", "enable", "--config-daemon-socket", SOCKET], node, clock) == 0
    assert node.status().state is RuntimeState.ENABLED
    assert "error" not in capsys.readouterr().err.lower()


def test_verify_mismatch_exits_1(clock: FakeClock, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_main(["--action", "enable", "--config-daemon-socket", SOCKET], LostToggle(runtime()), clock)
    assert code == 1
    line = capsys.readouterr().err.splitlines()[-1]
    assert line == (f"ljrk job-agent: error: enable via {SOCKET}: enable answered enabled but GetStatus reports "
                    "disabled (expected enabled)")


def test_non_transient_error_exits_1_after_one_attempt(clock: FakeClock, capsys: pytest.CaptureFixture[str]) -> None:
    error = NodeRuntimeError("node Runtime Disable: INTERNAL: OSError: disk full")
    flaky = FlakyConfig(runtime(RuntimeState.ENABLED), clock, failures=5, error=error)
    assert run_main(["--action", "disable", "--config-daemon-socket", SOCKET], flaky, clock) == 1
    assert flaky.calls == ["disable"]
    line = capsys.readouterr().err.splitlines()[-1]
    assert line == (f"ljrk job-agent: error: disable via {SOCKET}: NodeRuntimeError: node Runtime Disable: INTERNAL: "
                    "OSError: disk full")


def test_unreachable_until_the_timeout_exits_3(clock: FakeClock, capsys: pytest.CaptureFixture[str]) -> None:
    flaky = FlakyConfig(runtime(), clock, failures=10**6)
    assert run_main(["--action", "enable", "--config-daemon-socket", SOCKET, "--timeout", "5"], flaky, clock) == 3
    line = capsys.readouterr().err.splitlines()[-1]
    assert line.startswith(f"ljrk job-agent: error: enable via {SOCKET}: gave up after 5 s and ")
    assert line.endswith("last error: node Runtime Enable: UNAVAILABLE: down")


def test_stop_event_exits_4(clock: FakeClock, capsys: pytest.CaptureFixture[str]) -> None:
    stop = threading.Event()
    flaky = FlakyConfig(runtime(), clock, failures=10**6)
    clock.signal_on_wait = True
    assert run_main(["--action", "enable", "--config-daemon-socket", SOCKET], flaky, clock, stop) == 4
    assert "stopped by a signal after 1 attempt(s)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config-daemon-socket", SOCKET], "the following arguments are required: --action"),
        (["--action", "toggle", "--config-daemon-socket", SOCKET], "invalid choice: 'toggle'"),
        (["--action", "enable"], "the following arguments are required: --config-daemon-socket"),
        (["--action", "enable", "--config-daemon-socket", SOCKET, "--timeout", "0"], "'0' must be > 0"),
        (["--action", "enable", "--config-daemon-socket", SOCKET, "--timeout", "soon"], "not a number of seconds"),
        (["--action", "enable", "--config-daemon-socket", SOCKET, "--operation", "ssh"], "invalid choice: 'ssh'"),
        (["--action", "enable", "--config-daemon-socket", "/" + "x" * 120], "at most 107 bytes"),
    ],
)
def test_bad_command_lines_exit_2(
    clock: FakeClock, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert run_main(args, runtime(), clock) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("ljrk job-agent: error: ")
    assert message in line


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "--config-daemon-socket" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------ wiring
def test_container_resolves_with_the_grpc_operation(tmp_path: Path) -> None:
    container = JobAgentContainer(settings=JobAgentSettings(Action.ENABLE, tmp_path / "r.sock", call_timeout_s=2))
    container.check_dependencies()
    assert isinstance(container.agent(), JobAgent)
    assert container.operation() is container.operation()  # one connector; a connection per call


def test_unknown_operation_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="--operation 'ssh': choose one of grpc"):
        select_operation(JobAgentSettings(Action.ENABLE, tmp_path / "r.sock", operation="ssh"))


def test_settings_refuse_non_positive_times(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="--timeout"):
        JobAgentSettings(Action.ENABLE, tmp_path / "r.sock", timeout_s=0)
    with pytest.raises(SettingsError, match="--call-timeout"):
        JobAgentSettings(Action.ENABLE, tmp_path / "r.sock", call_timeout_s=-1)


def test_grpc_connector_treats_a_missing_socket_as_transient(tmp_path: Path) -> None:
    connect = grpc_operation(JobAgentSettings(Action.ENABLE, tmp_path / "r.sock"))
    with pytest.raises(RuntimeUnavailableError, match=r"socket .*r\.sock does not exist \(yet\)"), connect(1.0):
        pass


def test_job_agent_is_a_subcommand() -> None:
    assert "job-agent" in cli.COMMANDS
