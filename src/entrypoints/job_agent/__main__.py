"""``ljrk job-agent`` (also ``python -m entrypoints.job_agent``): enable or disable the node Runtime, verified.

``ljrk job-agent --action enable|disable --config-daemon-socket PATH [--timeout SECONDS] [--operation NAME]
[--call-timeout SECONDS] [--reason TEXT] [--termination-log PATH] [--log-level LEVEL]``

Runs once in the pod of a Job pinned to the node (the node controller creates it): calls Enable or Disable on the
node config daemon (``--operation grpc``, the default: ``ljrk.config.v1.ConfigService`` as served by
``ljrk runtime``), then GetStatus, whose state must equal the requested one. Transient errors (UNAVAILABLE,
DEADLINE_EXCEEDED, socket not there yet) are retried with capped backoff until ``--timeout`` (default 60 s, waiting
for the socket included) is spent. How to plug in another node operation: ``entrypoints.job_agent.containers``.

Exit codes:

- 0 the requested state is set and verified;
- 1 the operation failed (a non-transient error), or GetStatus reports another state than requested;
- 2 bad command line;
- 3 timed out: the daemon stayed unreachable (socket missing, not serving) or kept failing transiently;
- 4 stopped by SIGTERM/SIGINT before the result was verified.

Errors are one line on stderr, ``ljrk job-agent: error: ACTION via SOCKET: CAUSE``; logs are JSON lines on stderr.
The outcome (``ACTION via SOCKET: CAUSE``, or ``ACTION via SOCKET: verified STATE …``) is also written to
``--termination-log`` (default: :data:`TERMINATION_LOG` when it exists, which kubelet bind-mounts into the pod), so
the pod's ``state.terminated.message`` carries the cause to the controller; an unwritable file is logged and never
changes the exit code.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from domain.kube.objects import MAX_TERMINATION_MESSAGE
from entrypoints._shared.command import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    SettingsError,
    shutting_down,
)
from entrypoints._shared.flags import LOG_LEVEL, cli, flag
from entrypoints._shared.signals import stop_on_signals

from .app import (
    DEFAULT_CALL_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    Action,
    AgentStoppedError,
    AgentTimeoutError,
    JobAgentSettings,
    OperationFailedError,
)
from .containers import OPERATIONS, JobAgentContainer

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_STOPPED", "EXIT_TIMEOUT", "EXIT_USAGE", "TERMINATION_LOG", "build_parser",
           "main", "settings_from_args", "write_termination_log"]

log = logging.getLogger(__name__)

EXIT_TIMEOUT, EXIT_STOPPED = 3, 4

TERMINATION_LOG = Path("/dev/termination-log")
"""Kubernetes' default ``terminationMessagePath``; the Job pod template keeps it (``adapters.kubernetes``)."""


def write_termination_log(path: Path | None, message: str) -> None:
    """Write ``message`` (cut to :data:`MAX_TERMINATION_MESSAGE` bytes) to ``path``; None = :data:`TERMINATION_LOG`
    only when it exists (outside a pod nothing is created in /dev). Never raises: a failure is logged."""
    if path is None:
        if not TERMINATION_LOG.exists():
            return
        path = TERMINATION_LOG
    data = message.encode()[:MAX_TERMINATION_MESSAGE].decode(errors="ignore")
    try:
        path.write_text(data)
    except OSError as error:
        log.warning("termination message not written to %s: %s", path, error)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


CLI = cli(
    "ljrk job-agent",
    "Enable or disable GPU sharing on this node through the node config daemon, verify the result with "
    "GetStatus, and exit 0 only when it holds.",
    JobAgentSettings,
    flag("--action", convert=Action, required=True, choices=[a.value for a in Action], help="what to do"),
    flag("--config-daemon-socket", type=Path, required=True, metavar="PATH",
         help="unix socket of the node config daemon (ljrk runtime's --socket)"),
    flag("--timeout", setting="timeout_s", type=_seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
         help=f"give up after this long, waiting for the socket included (default: {DEFAULT_TIMEOUT_S:g})"),
    flag("--operation", choices=sorted(OPERATIONS), default="grpc",
         help="node operation adapter (default: grpc, the ljrk.config.v1 config service)"),
    flag("--call-timeout", setting="call_timeout_s", type=_seconds, default=DEFAULT_CALL_TIMEOUT_S,
         metavar="SECONDS", help=f"deadline of one call (default: {DEFAULT_CALL_TIMEOUT_S:g})"),
    flag("--reason", default="ljrk job-agent", metavar="TEXT",
         help="recorded with the change (who, why; e.g. the Job's name)"),
    flag("--termination-log", type=Path, metavar="PATH",
         help=f"where the outcome is written for kubelet's terminationMessagePath (default: {TERMINATION_LOG} when "
         "it exists)"),
    LOG_LEVEL,
)
"""The command line (module docstring): program name, ``--help`` description, settings class and flags."""
build_parser, settings_from_args = CLI.parser, CLI.settings_from


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk job-agent",
         stop: threading.Event | None = None, container: JobAgentContainer | None = None) -> int:
    """Run once; returns the exit code (module docstring). ``stop`` replaces the signal handlers and ``container``
    (settings still taken from ``argv``) lets tests override the operation."""
    return CLI.main(argv, prog, lambda settings: _run(settings, stop, container or JobAgentContainer()))


def _run(settings: JobAgentSettings, stop: threading.Event | None, container: JobAgentContainer) -> int:

    def failed(message: str, code: int) -> CommandError:
        write_termination_log(settings.termination_log, message)
        return CommandError(code, message)

    container.settings.override(settings)
    where = f"{settings.action.value} via {settings.config_daemon_socket}"
    container.init_resources()
    with shutting_down(container):
        try:
            agent = container.agent()
        except SettingsError as error:
            raise failed(str(error), EXIT_USAGE) from error
        log.info("%s (operation %s, timeout %g s)", where, settings.operation, settings.timeout_s)
        try:
            with stop_on_signals(stop) as event:
                status = agent.run(settings.action, timeout_s=settings.timeout_s, reason=settings.reason, stop=event)
        except OperationFailedError as error:
            raise failed(f"{where}: {error}", EXIT_FAILED) from error
        except AgentTimeoutError as error:
            raise failed(f"{where}: {error}", EXIT_TIMEOUT) from error
        except AgentStoppedError as error:
            raise failed(f"{where}: {error}", EXIT_STOPPED) from error
        outcome = (f"{where}: verified {status.state.value} after {agent.attempts} attempt(s) "
                   f"({status.active_allocations} allocation record(s))")
        log.info("%s", outcome)
        write_termination_log(settings.termination_log, outcome)
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
