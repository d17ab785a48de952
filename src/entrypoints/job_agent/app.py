"""``ljrk job-agent`` settings and the one-shot toggle: call the node operation, verify, retry what is transient.

One run (:meth:`JobAgent.run`) is: Enable (or Disable) through the node operation, then GetStatus, whose state must
equal the requested one. Each call opens its own connection (``OperationConnector``) with a deadline of
``min(call_timeout_s, time left)``, so the whole run stays within ``--timeout`` and a socket that appears late is
picked up on the next attempt (a long-lived gRPC channel would sit in its own reconnect backoff, up to 120 s).

Errors and what happens to them:

* ``ports.runtime.RuntimeUnavailableError`` (gRPC UNAVAILABLE or DEADLINE_EXCEEDED, or the socket not there yet)
  is transient: the attempt is repeated after a capped exponential backoff (0.2 s doubling to 2 s, never past the
  deadline) until ``timeout_s`` is spent, then :class:`AgentTimeoutError`.
* GetStatus reporting another state is :class:`VerifyMismatchError` at once (something else toggled the node;
  retrying would hide it).
* Any other exception of the operation is final: :class:`OperationFailedError`, chained. The operation is
  pluggable, so "anything not declared transient" is the rule rather than a list of types.

Enable and Disable are idempotent (``ports.node_config``), so repeating a whole attempt after a transient error in
either call is safe.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import attrs

from domain.runtime.types import ConfigStatus, RuntimeState
from entrypoints._shared.command import SettingsError as SettingsError
from ports.node_config import NodeConfig
from ports.runtime import RuntimeUnavailableError

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 60.0
"""Default ``--timeout``: the whole run, waiting for the socket included, seconds."""
DEFAULT_CALL_TIMEOUT_S = 5.0
"""Deadline of one call, seconds (the config service answers from memory plus one small file write)."""
INITIAL_BACKOFF_S, MAX_BACKOFF_S = 0.2, 2.0
"""Retry delays, seconds: doubling from the first to the cap, so a late socket is noticed within 2 s."""
MIN_CALL_BUDGET_S = 0.01
"""Floor of a call's deadline, seconds, so the last call of a run fails with DEADLINE_EXCEEDED, not a 0 s budget."""
MAX_SOCKET_PATH = 107
"""Linux ``sun_path`` holds 108 bytes including the terminating NUL."""

OperationConnector = Callable[[float], AbstractContextManager[NodeConfig]]
"""``(call_timeout_s) -> context manager yielding a NodeConfig`` whose calls each take at most ``call_timeout_s``
seconds; the context closes whatever the connection holds. May raise ``RuntimeUnavailableError`` (transient)."""


class Action(enum.Enum):
    """What the Job asks for; :attr:`target` is the state GetStatus must then report."""

    ENABLE = "enable"
    DISABLE = "disable"

    @property
    def target(self) -> RuntimeState:
        """``RuntimeState.ENABLED`` for enable, ``DISABLED`` for disable."""
        return RuntimeState.ENABLED if self is Action.ENABLE else RuntimeState.DISABLED


@attrs.frozen
class JobAgentSettings:
    """Validated ``ljrk job-agent`` settings (flags in ``__main__``); times in seconds. ``operation`` names the
    adapter (``containers.OPERATIONS``); ``termination_log`` where the outcome is written (None: the Kubernetes
    default path when it exists). Raises :class:`SettingsError` for non-positive times or a socket path
    longer than 107 bytes."""

    action: Action
    config_daemon_socket: Path
    timeout_s: float = DEFAULT_TIMEOUT_S
    operation: str = "grpc"
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    reason: str = "ljrk job-agent"
    log_level: str = "INFO"
    termination_log: Path | None = None

    def __attrs_post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise SettingsError(f"--timeout {self.timeout_s:g}: must be > 0")
        if not self.call_timeout_s > 0:
            raise SettingsError(f"--call-timeout {self.call_timeout_s:g}: must be > 0")
        if len(str(self.config_daemon_socket.absolute()).encode()) > MAX_SOCKET_PATH:
            raise SettingsError(f"--config-daemon-socket {self.config_daemon_socket}: a unix socket path has at most "
                                f"{MAX_SOCKET_PATH} bytes")


class JobAgentError(Exception):
    """Base of the run's failures; the message is the cause (the caller adds action and socket)."""


class OperationFailedError(JobAgentError):
    """The node operation failed with an error that is not transient (exit 1)."""


class VerifyMismatchError(OperationFailedError):
    """The operation returned but GetStatus reports another state than the requested one (exit 1)."""


class AgentTimeoutError(JobAgentError):
    """``timeout_s`` passed while the operation was unreachable or kept failing transiently (exit 3)."""


class AgentStoppedError(JobAgentError):
    """SIGTERM/SIGINT (the stop event) arrived before the result was verified (exit 4)."""


class JobAgent:
    """Runs one verified toggle over ``connect`` (module docstring). ``clock`` returns seconds (monotonic);
    ``wait(stop, seconds)`` sleeps and returns True when ``stop`` was set (tests pass a fake clock's). Backoffs in
    seconds. :attr:`attempts` counts the attempts of the last :meth:`run`."""

    def __init__(
        self,
        connect: OperationConnector,
        *,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        initial_backoff_s: float = INITIAL_BACKOFF_S,
        max_backoff_s: float = MAX_BACKOFF_S,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[threading.Event, float], bool] = threading.Event.wait,
    ) -> None:
        self._connect = connect
        self._call_timeout_s = call_timeout_s
        self._initial_backoff_s = initial_backoff_s
        self._max_backoff_s = max_backoff_s
        self._clock = clock
        self._wait = wait
        self.attempts = 0

    def run(
        self, action: Action, *, timeout_s: float, reason: str = "", stop: threading.Event | None = None
    ) -> ConfigStatus:
        """Apply ``action`` and verify it within ``timeout_s`` seconds; returns the verified status. Raises
        :class:`VerifyMismatchError`, :class:`OperationFailedError`, :class:`AgentTimeoutError` or
        :class:`AgentStoppedError` (module docstring)."""
        stop = stop or threading.Event()
        deadline = self._clock() + timeout_s
        backoff = self._initial_backoff_s
        last: Exception | None = None
        self.attempts = 0
        while True:
            if stop.is_set():
                raise AgentStoppedError(f"stopped by a signal after {self.attempts} attempt(s)")
            if self._clock() >= deadline:
                cause = f": last error: {last}" if last is not None else ""
                raise AgentTimeoutError(f"gave up after {timeout_s:g} s and {self.attempts} attempt(s){cause}")
            self.attempts += 1
            try:
                return self._attempt(action, reason, deadline)
            except RuntimeUnavailableError as error:
                last = error
            except VerifyMismatchError:
                raise
            except Exception as error:  # a pluggable operation: whatever is not transient is final (docstring)
                raise OperationFailedError(f"{type(error).__name__}: {error}") from error
            delay = min(backoff, deadline - self._clock())
            log.info("%s attempt %d: %s; retrying in %.2f s", action.value, self.attempts, last, max(delay, 0.0))
            if delay > 0 and self._wait(stop, delay):
                raise AgentStoppedError(f"stopped by a signal after {self.attempts} attempt(s): last error: {last}")
            backoff = min(backoff * 2, self._max_backoff_s)

    def _attempt(self, action: Action, reason: str, deadline: float) -> ConfigStatus:
        if action is Action.ENABLE:
            answered = self._call(deadline, lambda operation: operation.enable(reason))
        else:
            answered = self._call(deadline, lambda operation: operation.disable(reason))
        verified = self._call(deadline, lambda operation: operation.status())
        if verified.state is not action.target:
            raise VerifyMismatchError(f"{action.value} answered {answered.state.value} but GetStatus reports "
                                      f"{verified.state.value} (expected {action.target.value})")
        return verified

    def _call(self, deadline: float, call: Callable[[NodeConfig], ConfigStatus]) -> ConfigStatus:
        budget = max(min(self._call_timeout_s, deadline - self._clock()), MIN_CALL_BUDGET_S)
        with self._connect(budget) as operation:
            return call(operation)
