"""A failed toggle Job reports the job agent's own cause, not only the Job condition.

Behaviours covered:
- the job agent writes its one-line cause to ``--termination-log`` (kubelet's terminationMessagePath, default
  ``/dev/termination-log`` when it exists) on failure, and a short success line otherwise; an unwritable file is
  logged and never changes the exit code;
- the Job's pod template keeps the termination message (path ``/dev/termination-log``, policy
  ``FallbackToLogsOnError``, so a crash before the write still leaves the last log lines);
- the controller reads ``state.terminated.message`` of the failed Job's pod (``job-name`` label) and puts it in
  the node's toggle annotation and in the retry and give-up Events, before the Job condition;
- no pod, or a pod list that fails, still records the Job condition (with why the cause is missing);
- ``ljrk up``'s Job runner (pod-phase mode, as on a real API server) ends the Job's pod with the agent's outcome as
  its container's termination message.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from dependency_injector import providers

from adapters.kubernetes.translate_jobs import job_to_v1
from domain.gpu import Gpu, GpuUuid
from domain.kube.objects import ContainerSpec, ContainerTermination, PodObject, PodPhase
from domain.runtime.types import RuntimeState
from domain.toggle.jobs import JobTemplate
from domain.toggle.states import Action
from entrypoints.job_agent.__main__ import main
from entrypoints.job_agent.app import JobAgent
from entrypoints.job_agent.containers import JobAgentContainer
from entrypoints.runtime.inprocess import InProcessRuntime
from ports.cluster import UnavailableError
from ports.runtime import NodeRuntimeError
from support.controller_world import DETAIL_KEY, NAMESPACE, World
from support.polling import eventually

SOCKET = "/run/ljrk/runtime.sock"
CAUSE = f"disable via {SOCKET}: NodeRuntimeError: node Runtime Disable: INTERNAL: OSError: disk full"

ONE_GPU = (Gpu(0, GpuUuid("GPU-0"), "A100", 16 * 2**30),)
"""The node's GPUs: the config service is what these tests use."""


class BrokenConfig:
    """A node config daemon whose every call fails for good."""

    def _fail(self) -> None:
        raise NodeRuntimeError("node Runtime Disable: INTERNAL: OSError: disk full")

    def enable(self, reason: str = "") -> None:
        self._fail()

    def disable(self, reason: str = "") -> None:
        self._fail()

    def status(self) -> None:
        self._fail()


def _run_agent(args: list[str], operation: object) -> int:
    import contextlib

    @contextlib.contextmanager
    def connect(timeout_s: float):  # type: ignore[no-untyped-def]
        yield operation

    container = JobAgentContainer()
    container.agent.override(providers.Factory(JobAgent, connect))
    return main(args, container=container, stop=threading.Event())


def test_agent_writes_its_cause_to_the_termination_log(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    args = ["--action", "disable", "--config-daemon-socket", SOCKET, "--termination-log", str(log)]
    assert _run_agent(args, BrokenConfig()) == 1
    assert log.read_text() == CAUSE
    node = InProcessRuntime(ONE_GPU, state=RuntimeState.ENABLED, clock=lambda: 1.0)
    assert _run_agent(args, node) == 0
    assert log.read_text().startswith(f"disable via {SOCKET}: verified disabled")


def test_unwritable_termination_log_never_changes_the_exit_code(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                                                 ) -> None:
    args = ["--action", "disable", "--config-daemon-socket", SOCKET,
            "--termination-log", str(tmp_path / "missing-dir" / "log")]
    assert _run_agent(args, BrokenConfig()) == 1
    assert "termination message not written" in caplog.text


def test_job_pod_template_keeps_the_termination_message() -> None:
    job = job_to_v1(JobTemplate().build("n1", "uid-1", Action.ENABLE, 1))
    assert job.spec is not None
    [container] = job.spec.template.spec.containers
    assert container.termination_message_path == "/dev/termination-log"
    assert container.termination_message_policy == "FallbackToLogsOnError"
    assert "--termination-log" not in container.command  # the default path: nothing host-specific in the argv


def _fail_with_pod(world: World, node: str, message: str | None) -> None:
    """Play the Job controller and kubelet: the node's active Job gets one failed pod (with ``message`` as its
    container's termination message; None = no pod at all), then the Job fails."""
    (job,) = world.active(node)
    if message is not None:
        pod = world.cluster.create_pod(PodObject("", NAMESPACE, f"{job.name}-x7k2p", (ContainerSpec("job-agent"),),
                                                 node_name=node, labels={"job-name": job.name}))
        world.cluster.set_pod_phase(NAMESPACE, pod.name, PodPhase.FAILED,
                                    terminations=(ContainerTermination("job-agent", 1, "Error", message),))
    world.finish(node, ok=False)


def _detail(world: World, node: str) -> dict[str, object]:
    return json.loads(world.cluster.get_node(node).annotations[DETAIL_KEY])  # type: ignore[no-any-return]


def test_controller_records_the_agents_cause_in_the_annotation_and_the_events() -> None:
    world = World(max_tries=2)
    world.add_node("n1", "false", state="enabled")
    world.start()
    _fail_with_pod(world, "n1", CAUSE)
    world.settle()
    error = str(_detail(world, "n1")["error"])
    assert CAUSE in error
    assert "BackoffLimitExceeded" in error
    assert error.index(CAUSE) < error.index("BackoffLimitExceeded")  # the cause first: the annotation is capped
    [retry] = [e for e in world.cluster.events if e.reason == "RuntimeToggleRetry"]
    assert CAUSE in retry.message
    world.advance(10)
    _fail_with_pod(world, "n1", "disable via /run/ljrk/runtime.sock: gave up after 60 s and 30 attempt(s)")
    world.settle()
    [failed] = [e for e in world.cluster.events if e.reason == "RuntimeToggleFailed"]
    assert "gave up after 60 s" in failed.message
    assert world.state("n1") == "failed"


def test_no_pod_or_a_failing_pod_list_still_records_the_job_condition() -> None:
    world = World(max_tries=3)
    world.add_node("n1", "false", state="enabled")
    world.start()
    _fail_with_pod(world, "n1", None)
    world.settle()
    error = str(_detail(world, "n1")["error"])
    assert "BackoffLimitExceeded" in error
    assert "no pod of the Job found" in error
    world.advance(10)

    def unavailable(**_: object) -> None:
        raise UnavailableError("API server unreachable")

    world.cluster.list_pods = unavailable  # type: ignore[method-assign,assignment]
    _fail_with_pod(world, "n1", None)
    world.settle()
    error = str(_detail(world, "n1")["error"])
    assert "BackoffLimitExceeded" in error
    assert "pod not read: API server unreachable" in error


def test_emulated_job_pod_carries_the_agents_cause_as_termination_message(tmp_path: Path) -> None:
    from adapters.memory.cluster import InMemoryCluster
    from domain.kube.objects import HostPathMount, JobObject
    from entrypoints.up.jobs import JobMode, JobRunner

    cluster = InMemoryCluster()
    runner = JobRunner(cluster, namespace="kube-system", nodes={"n0": tmp_path}, mode=JobMode.POD_PHASE,
                       watch_timeout_s=0.2)
    runner.start()
    try:
        cluster.create_job(JobObject(
            "kube-system", "toggle", node_name="n0", host_paths=(HostPathMount("d", "/run/ljrk", "/run/ljrk"),),
            command=("ljrk", "job-agent", "--action", "disable", "--config-daemon-socket", "/run/ljrk/r.sock",
                     "--timeout", "0.2")))
        pod = cluster.create_pod(PodObject("", "kube-system", "toggle-abcde", (ContainerSpec("main"),),
                                           node_name="n0", labels={"job-name": "toggle"}))
        cluster.set_pod_phase("kube-system", pod.name, PodPhase.RUNNING)
        eventually(lambda: cluster.get_pod("kube-system", pod.name).phase is not PodPhase.RUNNING, what="pod ended")
        [ended] = cluster.get_pod("kube-system", pod.name).terminations
        assert (ended.container, ended.exit_code, ended.reason) == ("main", 1, "Error")
        assert ended.message.startswith("disable via ")
        assert "gave up after 0.2 s" in ended.message
    finally:
        runner.stop()


def test_kubernetes_translation_reads_and_writes_terminated_states() -> None:
    from kubernetes import client

    from adapters.kubernetes.translate import pod_from_v1, pod_status_patch

    terminated = client.V1ContainerStateTerminated(exit_code=3, reason="Error", message="enable via /s: gave up")
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="p", namespace="ns", uid="u"),
        spec=client.V1PodSpec(containers=[client.V1Container(name="main"), client.V1Container(name="side")]),
        status=client.V1PodStatus(phase="Failed", container_statuses=[
            client.V1ContainerStatus(name="main", ready=False, restart_count=0, image="i", image_id="",
                                     state=client.V1ContainerState(terminated=terminated)),
            client.V1ContainerStatus(name="side", ready=True, restart_count=0, image="i", image_id="",
                                     state=client.V1ContainerState(running=client.V1ContainerStateRunning())),
        ]))
    assert pod_from_v1(pod).terminations == (ContainerTermination("main", 3, "Error", "enable via /s: gave up"),)
    assert pod_from_v1(client.V1Pod(metadata=client.V1ObjectMeta(name="q"))).terminations == ()
    assert pod_status_patch(PodPhase.RUNNING, ()) == {"status": {"phase": "Running"}}
    [status] = pod_status_patch(PodPhase.FAILED, (ContainerTermination("main", 1, "Error", "why"),))["status"][
        "containerStatuses"]  # type: ignore[index]
    assert status["name"] == "main"
    assert status["state"] == {"terminated": {"exitCode": 1, "reason": "Error", "message": "why"}}
