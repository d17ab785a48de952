"""Parts of ``ljrk up`` on their own: the pausable clock, the emulated container runtime's releaser, the Job
runner's path mapping and command handling, the Event tap and the report.

Covers: the clock stands still while paused, resumes where it stopped and wakes waiters; the releaser calls Release
once per queued pod, retries while the Runtime is unavailable and reports idle only when done; a container path is
mapped through the Job's hostPath mounts onto the node's directory (else it is not on the node); a container command
other than the job agent, bad agent flags and an unreachable config socket fail the Job with the agent's message;
the JobRunner finishes an in-memory Job as Failed with ``BackoffLimitExceeded`` then; the tap forwards Events and
keeps the last per object; pods are summarized by phase and reason and the report renders and serializes.
"""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest

from adapters.memory.cluster import InMemoryCluster
from domain.kube.objects import ClusterEvent, HostPathMount, JobObject, JobPhase, PodObject, PodPhase
from domain.ledger import GpuUsage
from entrypoints.up.agreement import Disagreement
from entrypoints.up.clock import PausableClock
from entrypoints.up.cri import RuntimeReleaser
from entrypoints.up.events import EventTap
from entrypoints.up.jobs import FAILED_REASON, JobRunner, host_path, run_agent
from entrypoints.up.report import Report, Timing, render, summarize_pods, write_json
from ports.runtime import RuntimeUnavailableError
from support.polling import eventually

MOUNT = (HostPathMount("config-daemon", "/run/ljrk", "/run/ljrk"),)


def test_clock_pauses_and_resumes_where_it_stopped() -> None:
    clock = PausableClock()
    clock.pause()
    frozen = clock.now()
    time.sleep(0.05)
    assert clock.now() == frozen
    assert clock.paused
    condition = threading.Condition()
    woke = threading.Event()

    def waiter() -> None:
        with condition:
            clock.wait(condition, 30.0)
        woke.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.05)
    clock.resume()
    assert woke.wait(5)
    thread.join()
    assert not clock.paused
    assert frozen <= clock.now() < frozen + 0.05  # the pause is not counted


class FlakyRuntime:
    """Release fails ``failures`` times with UNAVAILABLE, then answers 1."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[str] = []

    def release(self, pod_uid: str, container: str | None = None) -> int:
        self.calls.append(pod_uid)
        if self.failures:
            self.failures -= 1
            raise RuntimeUnavailableError("socket gone")
        return 1


def test_releaser_retries_until_the_runtime_answers() -> None:
    runtime = FlakyRuntime(failures=2)
    releaser = RuntimeReleaser(runtime, node="n0", retry_s=0.01)  # type: ignore[arg-type]
    releaser.start()
    try:
        releaser.submit("uid-1")
        releaser.submit("uid-1")  # repeats coalesce
        assert releaser.wait_idle(5)
        assert runtime.calls == ["uid-1"] * 3
        assert releaser.released == 1
        releaser.submit("uid-2")
        assert releaser.wait_idle(5)
        assert releaser.idle()
        assert releaser.released == 2
    finally:
        releaser.stop()


def test_host_path_follows_the_mounts(tmp_path: Path) -> None:
    assert host_path(tmp_path, MOUNT, "/run/ljrk/runtime.sock") == tmp_path / "run/ljrk/runtime.sock"
    other = (HostPathMount("v", "/var/lib/x", "/mnt/x"),)
    assert host_path(tmp_path, other, "/mnt/x/a/b.sock") == tmp_path / "var/lib/x/a/b.sock"
    assert host_path(tmp_path, other, "/run/ljrk/runtime.sock") == tmp_path / ".container-fs/run/ljrk/runtime.sock"


def test_run_agent_failures_carry_the_reason(tmp_path: Path) -> None:
    stop = threading.Event()
    wrong = run_agent(("sh", "-c", "true"), MOUNT, tmp_path, stop)
    assert not wrong.ok
    assert "only 'ljrk job-agent'" in wrong.message
    flags = run_agent(("ljrk", "job-agent", "--action", "reboot", "--config-daemon-socket", "/run/ljrk/r.sock"),
                      MOUNT, tmp_path, stop)
    assert not flags.ok
    assert flags.message.startswith("bad command line")
    missing = run_agent(("ljrk", "job-agent", "--action", "enable", "--config-daemon-socket", "/run/ljrk/r.sock",
                         "--timeout", "0.3"), MOUNT, tmp_path, stop)
    assert not missing.ok
    assert "enable via" in missing.message
    assert "gave up" in missing.message


def test_job_runner_fails_a_job_whose_agent_fails(tmp_path: Path) -> None:
    cluster = InMemoryCluster()
    runner = JobRunner(cluster, namespace="kube-system", nodes={"n0": tmp_path}, watch_timeout_s=0.2)
    runner.start()
    try:
        cluster.create_job(JobObject("kube-system", "elsewhere", node_name="other", command=("ljrk", "job-agent")))
        cluster.create_job(JobObject(
            "kube-system", "toggle", node_name="n0", host_paths=MOUNT,
            command=("ljrk", "job-agent", "--action", "disable", "--config-daemon-socket", "/run/ljrk/r.sock",
                     "--timeout", "0.2")))
        eventually(lambda: cluster.get_job("kube-system", "toggle").status.phase is not JobPhase.ACTIVE, what="end")
        status = cluster.get_job("kube-system", "toggle").status
        assert (status.phase, status.failed, status.succeeded, status.reason) == (JobPhase.FAILED, 1, 0, FAILED_REASON)
        assert "disable via" in status.message
        assert cluster.get_job("kube-system", "elsewhere").status.phase is JobPhase.ACTIVE  # not our node
        assert (runner.succeeded, runner.failed) == (0, 1)
    finally:
        runner.stop()
    assert runner.running() == 0


def test_event_tap_forwards_and_remembers() -> None:
    cluster = InMemoryCluster()
    tap = EventTap(cluster)
    tap.create_event(ClusterEvent("Pod", "p", "FailedScheduling", "no room"))
    tap.create_event(ClusterEvent("Pod", "p", "FailedScheduling", "still no room"))
    assert [e.message for e in cluster.events] == ["no room", "still no room"]
    last = tap.last_event("Pod", "default", "p")
    assert last is not None
    assert last.message == "still no room"
    assert tap.list_nodes().items == ()  # everything else goes through
    assert tap.last_event("Pod", "default", "other") is None


def test_summary_and_report(tmp_path: Path) -> None:
    pods = [
        PodObject("1", "default", "run", node_name="n0", phase=PodPhase.RUNNING),
        PodObject("2", "default", "done", node_name="n0", phase=PodPhase.SUCCEEDED),
        PodObject("3", "default", "bad", node_name="n0", phase=PodPhase.FAILED),
        PodObject("4", "default", "wait1"),
        PodObject("5", "default", "wait2"),
        PodObject("6", "default", "new"),
    ]
    full = ClusterEvent("Pod", "wait1", "FailedScheduling", "0 nodes available: 1 node(s): no GPU")
    events = {"default/bad": ClusterEvent("Pod", "bad", "UnexpectedAdmissionError", "boom", type="Warning"),
              "default/wait1": full, "default/wait2": full}
    summary = summarize_pods(pods, submitted=6, last_event=events)
    assert (summary.placed, summary.running, summary.succeeded, summary.failed, summary.pending) == (3, 1, 1, 1, 3)
    assert summary.pending_by_reason == {"0 nodes available: 1 node(s): no GPU": 2, "not attempted": 1}
    assert summary.failed_by_reason == {"UnexpectedAdmissionError": 1}
    gpu = GpuUsage(0, "GPU-0", "A100", 1000, 500, 16 * 2**30, 8 * 2**30, True)
    disagreement = Disagreement("gpu", "n0", "GPU-0", {"ledger": (500, 1), "runtime": (0, 0), "exporter": None})
    report = Report(settings={"nodes": 1, "speedup": 2.0}, timing=Timing(1.0, 4.0, 1.0, 6.0), pods=summary,
                    gpus={"n0": [gpu]}, endpoints={"scheduler": "http://s", "exporters": {"n0": "http://e"},
                                                       "device_plugins": {"n0": "http://d"}},
                    settled=True, in_flight=(), disagreements=[disagreement], gpus_compared=1, containers_compared=0,
                    components={})
    assert report.pods_per_s == pytest.approx(0.6)
    assert not report.agrees
    out = io.StringIO()
    path = write_json(report, tmp_path / "out")
    render(report, out, json_path=path)
    text = out.getvalue()
    assert "1 DISAGREEMENT(S)" in text
    assert "n0: gpu GPU-0: ledger=500m/1B runtime=0m/0B exporter=-" in text
    assert "exporter      http://e  (n0)" in text
    assert "device plugin http://d  (n0)" in text
    assert "50 %" in text
    assert "8.0/16.0" in text
    document = json.loads(path.read_text())
    assert document["timing"]["wall_s"] == 5.0
    assert document["pods"]["pending"] == 3
    assert document["agreement"]["disagreements"][0]["values"]["exporter"] is None
    assert document["gpus"][0]["core_allocated_milli"] == 500


def test_a_long_pending_reason_wraps_whole_in_the_text_report(tmp_path: Path) -> None:
    long = ("0 nodes available: 3 node(s): fewer than gpus=1 completely free GPUs; 1 node(s): insufficient cpu, "
            "memory or pod slots; 2 node(s): no GPU with enough free core and memory")
    assert len(long) > 110
    summary = summarize_pods([PodObject("4", "default", "wait")], submitted=1,
                             last_event={"default/wait": ClusterEvent("Pod", "wait", "FailedScheduling", long)})
    report = Report(settings={"nodes": 1}, timing=Timing(1.0, 4.0, 1.0, 6.0), pods=summary, gpus={}, endpoints={},
                    settled=True, in_flight=(), disagreements=[], gpus_compared=0, containers_compared=0,
                    components={})
    out = io.StringIO()
    render(report, out)
    lines = [line.strip() for line in out.getvalue().splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("1  0 nodes available"))
    assert " ".join([lines[start][3:], lines[start + 1]]) == long
    assert all(len(line) <= 110 + 9 for line in out.getvalue().splitlines()[start:start + 2])
