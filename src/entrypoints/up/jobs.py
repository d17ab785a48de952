"""The emulated Job runner: runs the controller's toggle Jobs on the emulated nodes.

The controller toggles a node by creating a Job pinned to it (``spec.nodeName``) whose one container runs
``ljrk job-agent --action enable|disable --config-daemon-socket PATH …`` with the socket's directory mounted from the
host (``domain.toggle.jobs``). Without a Job controller and a container runtime something has to run that
container. :class:`JobRunner` does what they would:

* it parses the container's command with the job agent's own parser (``entrypoints.job_agent``), maps the socket
  path through the Job's ``hostPath`` mounts onto the emulated node's host directory (its Runtime socket), builds the
  agent from the job agent's container (``JobAgentContainer``: the ``grpc`` operation, the config service on that
  socket) and runs it — Enable/Disable, then GetStatus — exactly as the pod would;
* :attr:`JobMode.JOB_STATUS` (the in-memory cluster: no Job controller) watches the Jobs of ``namespace`` and
  writes each finished Job's status through the cluster port (``set_job_status``): ``Succeeded`` with one
  succeeded pod, or ``Failed`` with one failed pod and reason ``BackoffLimitExceeded`` (the Jobs have
  ``backoffLimit: 0``), as kube-controller-manager would;
* :attr:`JobMode.POD_PHASE` (a real API server: its Job controller creates the pod, the kubelet emulator admits it
  and reports it ``Running``) watches the pods of the Jobs on our nodes (label ``job-name``) and, once one runs,
  runs its command and writes the pod's phase ``Succeeded`` or ``Failed`` with its container terminated (exit code
  0 or 1, the agent's outcome as termination message, as kubelet reads it from ``/dev/termination-log``); the Job
  controller then finishes the Job, and the controller reads the cause from the pod.

A Job (or pod) deleted while its agent runs stops the agent (it answers as if SIGTERM arrived). Each agent runs on a
thread of its own; :meth:`JobRunner.stop` stops and joins them all.
"""

from __future__ import annotations

import enum
import logging
import posixpath
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import attrs

from domain.kube.objects import (
    ContainerTermination,
    HostPathMount,
    JobObject,
    JobPhase,
    JobStatus,
    PodObject,
    PodPhase,
)
from entrypoints._shared.cli import UsageError
from entrypoints.job_agent.__main__ import build_parser, settings_from_args
from entrypoints.job_agent.app import JobAgentError, SettingsError
from entrypoints.job_agent.containers import JobAgentContainer
from ports.cluster import ClusterError, JobsApi, NotFoundError, PodsApi
from services._shared.informer import Informer

log = logging.getLogger(__name__)

AGENT_COMMAND = ("ljrk", "job-agent")
"""The only container command the runner knows how to run."""

JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
"""Labels the Job controller puts on a Job's pods (the first since Kubernetes 1.27)."""

FAILED_REASON = "BackoffLimitExceeded"
"""Reason of a failed toggle Job (``backoffLimit: 0``: the first failed pod fails the Job)."""

WRITE_RETRY_S = 0.5
"""Seconds between attempts of a status write the API refused."""


class JobMode(enum.Enum):
    """How a finished Job is reported (module docstring)."""

    JOB_STATUS = "job-status"
    POD_PHASE = "pod-phase"


@attrs.frozen
class JobOutcome:
    """What one Job's container did: ``ok`` (exit 0) and a one-line ``message``."""

    ok: bool
    message: str


def host_path(root: Path, mounts: Sequence[HostPathMount], container_path: str) -> Path:
    """``container_path`` as seen on the emulated node whose host filesystem is ``root``: through the ``hostPath``
    mount that covers it, else a path inside the container's own filesystem (absent from the node)."""
    path = posixpath.normpath(container_path)
    for mount in mounts:
        base = posixpath.normpath(mount.mount_path)
        if path == base or path.startswith(base.rstrip("/") + "/"):
            rest = posixpath.relpath(path, base)
            host = posixpath.normpath(posixpath.join(mount.host_path, rest))
            return root / host.lstrip("/")
    return root / ".container-fs" / path.lstrip("/")


def run_agent(command: Sequence[str], mounts: Sequence[HostPathMount], root: Path, stop: threading.Event) -> JobOutcome:
    """Run a Job container's ``command`` on the emulated node ``root`` (module docstring) until it finishes or
    ``stop`` is set. Never raises: every failure is a failed outcome with the agent's message."""
    if tuple(command[:2]) != AGENT_COMMAND:
        return JobOutcome(False, f"cannot run {' '.join(command)[:200]!r}: only '{' '.join(AGENT_COMMAND)}' is "
                                 "emulated")
    try:
        settings = settings_from_args(build_parser().parse_args(list(command[2:])))
        socket = host_path(root, mounts, str(settings.config_daemon_socket))
        settings = attrs.evolve(settings, config_daemon_socket=socket)
        agent = JobAgentContainer(settings=settings).agent()
    except (UsageError, SettingsError) as error:
        return JobOutcome(False, f"bad command line: {error}")
    except SystemExit:  # --help in a Job's command
        return JobOutcome(False, "bad command line: --help")
    where = f"{settings.action.value} via {settings.config_daemon_socket}"
    try:
        status = agent.run(settings.action, timeout_s=settings.timeout_s, reason=settings.reason, stop=stop)
    except JobAgentError as error:
        return JobOutcome(False, f"{where}: {error}")
    return JobOutcome(True, f"{where}: verified {status.state.value} after {agent.attempts} attempt(s)")


class JobsCluster(JobsApi, PodsApi, Protocol):
    """The cluster roles the Job runner uses: list, watch, read Jobs and write their status; watch pods and write
    their phase."""


class JobRunner:
    """Runs toggle Jobs pinned to the nodes of ``nodes`` (node name → its host directory) in ``namespace`` over
    ``cluster`` (module docstring). ``watch_timeout_s``: seconds one watch request lasts (bounds how long
    :meth:`stop` waits for the watch thread). Counters: :attr:`succeeded`, :attr:`failed`. Thread-safe."""

    def __init__(
        self, cluster: JobsCluster, *, namespace: str, nodes: Mapping[str, Path], mode: JobMode = JobMode.JOB_STATUS,
        watch_timeout_s: float = 1.0, clock: Callable[[], float] = time.time,
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.mode = mode
        self._nodes = dict(nodes)
        self._clock = clock
        self._lock = threading.Lock()
        self._runs: dict[str, tuple[threading.Thread, threading.Event]] = {}
        self._seen: set[str] = set()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self.succeeded = 0
        self.failed = 0
        self.jobs: Informer[JobObject] | None = None
        self.pods: Informer[PodObject] | None = None
        if mode is JobMode.JOB_STATUS:
            self.jobs = Informer(
                name="up-jobs", list_fn=lambda: cluster.list_jobs(namespace),
                watch_fn=lambda rv, t: cluster.watch_jobs(namespace, resource_version=rv, timeout_seconds=t),
                key=lambda j: j.key, uid=lambda j: j.uid, on_upsert=self._on_job, on_delete=self._on_gone,
                watch_timeout=watch_timeout_s)
        else:
            self.pods = Informer(
                name="up-job-pods", list_fn=cluster.list_pods,
                watch_fn=lambda rv, t: cluster.watch_pods(resource_version=rv, timeout_seconds=t),
                key=lambda p: p.key, uid=lambda p: p.uid, on_upsert=self._on_pod, on_delete=self._on_gone,
                watch_timeout=watch_timeout_s)

    def start(self) -> None:
        """Start watching (a no-op when started)."""
        if self._watcher is not None:
            return
        informer: Informer[JobObject] | Informer[PodObject] | None = self.jobs or self.pods
        assert informer is not None
        self._watcher = threading.Thread(target=informer.run, args=(self._stop,), name="ljrk-up-jobs", daemon=True)
        self._watcher.start()

    def stop(self) -> None:
        """Stop the watch and every running agent, and join their threads. Idempotent."""
        self._stop.set()
        with self._lock:
            runs = list(self._runs.values())
        for _, stop in runs:
            stop.set()
        for thread, _ in runs:
            thread.join(timeout=10)
        if self._watcher is not None:
            self._watcher.join(timeout=10)

    def running(self) -> int:
        """Agents running now."""
        with self._lock:
            return sum(1 for thread, _ in self._runs.values() if thread.is_alive())

    # ------------------------------------------------------------------ watch handlers (informer thread)
    def _on_job(self, job: JobObject) -> None:
        if (job.node_name in self._nodes and job.status.phase is JobPhase.ACTIVE and job.deletion_timestamp is None
                and job.command):
            self._launch(job.uid, f"job {job.key}", lambda stop: self._run_job(job, stop))

    def _on_pod(self, pod: PodObject) -> None:
        job_name = next((pod.labels[k] for k in JOB_NAME_LABELS if k in pod.labels), "")
        if (job_name and pod.node_name in self._nodes and pod.phase is PodPhase.RUNNING
                and pod.deletion_timestamp is None):
            self._launch(pod.uid, f"pod {pod.key} of job {job_name}", lambda stop: self._run_pod(pod, job_name, stop))

    def _on_gone(self, obj: JobObject | PodObject) -> None:
        with self._lock:
            run = self._runs.get(obj.uid)
        if run is not None:
            run[1].set()

    def _launch(self, uid: str, what: str, work: Callable[[threading.Event], None]) -> None:
        with self._lock:
            if uid in self._seen or self._stop.is_set():
                return
            self._seen.add(uid)
            stop = threading.Event()

            def body() -> None:
                try:
                    work(stop)
                except Exception:  # a runner thread must never die silently
                    log.exception("running %s failed", what)
                finally:
                    with self._lock:
                        self._runs.pop(uid, None)

            thread = threading.Thread(target=body, name=f"ljrk-up-job-{uid[:8]}", daemon=True)
            self._runs[uid] = (thread, stop)
            thread.start()

    # ------------------------------------------------------------------ one Job
    def _outcome(self, node: str, command: Sequence[str], mounts: Sequence[HostPathMount], what: str,
                 stop: threading.Event) -> JobOutcome:
        outcome = run_agent(command, mounts, self._nodes[node], stop)
        (log.info if outcome.ok else log.warning)("%s on node %s: %s", what, node, outcome.message)
        with self._lock:
            if outcome.ok:
                self.succeeded += 1
            else:
                self.failed += 1
        return outcome

    def _run_job(self, job: JobObject, stop: threading.Event) -> None:
        outcome = self._outcome(job.node_name, job.command, job.host_paths, f"job {job.key}", stop)
        if stop.is_set():
            return  # deleted meanwhile, or the runner stops: nobody reads the status any more
        now = self._clock()
        status = (JobStatus(JobPhase.SUCCEEDED, succeeded=1, finished_at=now) if outcome.ok else
                  JobStatus(JobPhase.FAILED, failed=1, finished_at=now, reason=FAILED_REASON,
                            message=f"Job has reached the specified backoff limit: {outcome.message}"[:1000]))
        self._write(f"status of job {job.key}", stop,
                    lambda: self.cluster.set_job_status(job.namespace, job.name, status))

    def _run_pod(self, pod: PodObject, job_name: str, stop: threading.Event) -> None:
        try:
            job = self.cluster.get_job(pod.namespace, job_name)
        except ClusterError as error:
            log.warning("pod %s: cannot read job %s: %s", pod.key, job_name, error)
            outcome = JobOutcome(False, f"job {job_name}: {error}")
        else:
            outcome = self._outcome(pod.node_name, job.command, job.host_paths, f"pod {pod.key}", stop)
        if stop.is_set():
            return
        phase = PodPhase.SUCCEEDED if outcome.ok else PodPhase.FAILED
        container = pod.containers[0].name if pod.containers else "main"
        ended = ContainerTermination(container, 0 if outcome.ok else 1, "Completed" if outcome.ok else "Error",
                                     outcome.message)
        self._write(f"phase of pod {pod.key}", stop,
                    lambda: self.cluster.set_pod_phase(pod.namespace, pod.name, phase, terminations=(ended,)))

    def _write(self, what: str, stop: threading.Event, call: Callable[[], object]) -> None:
        """Run ``call`` until it succeeds, the object is gone (NotFound) or ``stop`` is set."""
        while not stop.is_set():
            try:
                call()
                return
            except NotFoundError:
                return
            except ClusterError as error:
                log.warning("cannot write the %s: %s; retrying", what, error)
                stop.wait(WRITE_RETRY_S)
