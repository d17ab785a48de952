"""The stack on the real node (kubelet_harness.py) as its operators run it: ``ljrk runtime`` on simulated GPUs,
``ljrk device-plugin``, ``ljrk exporter`` and ``ljrk scheduler``, each its own process started from the installed
``ljrk`` command, plus helpers for the pods the tests submit (busybox containers that print their environment and
sleep) and for reading what the real kubelet did with them (container logs, pod status, node allocatable).

One :class:`NodeStack` per test module; the real node is shared by the whole session (conftest.py ``real_node``)
and the tests that use it run serially, each deleting its pods.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from k8s_harness import ControlPlane, free_ports
from kubelet_harness import WORKLOAD_IMAGE, RealNode
from kubernetes import client

from domain.kube.protocol import ProtocolConstants
from support.polling import eventually

LJRK = str(Path(sys.executable).with_name("ljrk"))
PROTOCOL = ProtocolConstants()
RES = PROTOCOL.resources
ENV_END = "LJRK-ENV-END"
SCHEDULER = PROTOCOL.scheduler_name


def http_get(url: str) -> tuple[int, str]:
    """(status, body) of a GET; (0, "") when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=3) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""


class Proc:
    """One ``ljrk`` subcommand as a process; its output goes to ``<logs>/<name>.log``."""

    def __init__(self, name: str, argv: Sequence[str], logs: Path) -> None:
        self.name = name
        self.argv = [LJRK, *argv]
        self.log = logs / f"{name}.log"
        logs.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        """Send ``sig`` and wait (SIGKILL after ``timeout`` seconds); returns the exit code."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        return self.popen.returncode

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class NodeStack:
    """The components on one real node (module docstring). ``workdir``: sockets, state and logs."""

    def __init__(self, node: RealNode, plane: ControlPlane, workdir: Path) -> None:
        self.node, self.plane, self.workdir = node, plane, workdir
        self.logs = workdir / "logs"
        self.runtime_socket = workdir / "run" / "runtime.sock"
        self.procs: dict[str, Proc] = {}
        self.ports: dict[str, int] = {}

    # ------------------------------------------------------------------ processes
    def _start(self, name: str, argv: Sequence[str]) -> Proc:
        old = self.procs.get(name)
        if old is not None and old.alive():
            raise RuntimeError(f"{name} already runs")
        self.procs[name] = Proc(name, argv, self.logs)
        return self.procs[name]

    def start_runtime(self, gpus: str = "2x16Gi:A100", *extra: str) -> Proc:
        """``ljrk runtime`` on simulated ``gpus`` (its ``--simulated-gpus`` grammar), state in ``workdir/state``."""
        self.runtime_socket.parent.mkdir(parents=True, exist_ok=True)
        return self._start("runtime", ["runtime", "--socket", str(self.runtime_socket), "--backend", "simulated",
                                       "--simulated-gpus", gpus, "--state-dir", str(self.workdir / "state"),
                                       "--log-level", "INFO", *extra])

    def start_device_plugin(self, *extra: str) -> Proc:
        """``ljrk device-plugin`` for the node, in the real kubelet's device-plugin folder, /metrics on a port."""
        port = self.ports["device-plugin"] = free_ports(1)[0]
        return self._start("device-plugin", [
            "device-plugin", "--node-name", self.node.node_name, "--runtime-socket", str(self.runtime_socket),
            "--device-plugin-dir", str(self.node.device_plugin_dir), "--kubeconfig", str(self.plane.kubeconfig),
            "--cdi-dir", str(self.node.cdi_spec_dir),  # where the node's containerd reads CDI specs
            "--listen", f"127.0.0.1:{port}", "--heartbeat", "2", "--release-interval", "1", *extra])

    def start_exporter(self) -> Proc:
        """``ljrk exporter`` on the real kubelet's pod-resources socket, pulling every second."""
        port = self.ports["exporter"] = free_ports(1)[0]
        return self._start("exporter", [
            "exporter", "--node-name", self.node.node_name, "--runtime-socket", str(self.runtime_socket),
            "--listen", f"127.0.0.1:{port}", "--pod-resources-socket", str(self.node.pod_resources_socket),
            "--kubeconfig", str(self.plane.kubeconfig), "--interval", "1", "--log-level", "INFO"])

    def start_scheduler(self, mode: str = "standalone", port: int | None = None, *extra: str) -> Proc:
        """``ljrk scheduler --mode mode`` on ``port`` (a free one by default); waits until ``/readyz`` says 200."""
        port = self.ports["scheduler"] = port or free_ports(1)[0]
        proc = self._start("scheduler", [
            "scheduler", "--mode", mode, "--listen", f"127.0.0.1:{port}", "--kubeconfig", str(self.plane.kubeconfig),
            "--lease-namespace", "kube-system", "--lease-name", f"ljrk-test-{mode}", *extra])
        eventually(lambda: not proc.alive() or http_get(f"http://127.0.0.1:{port}/readyz")[0] == 200, 60,
                   "scheduler /readyz")
        if not proc.alive():
            raise AssertionError(f"scheduler exited:\n{proc.tail()}")
        return proc

    def metrics(self, name: str) -> str:
        """The ``/metrics`` page of component ``name`` ('' when it does not answer)."""
        return http_get(f"http://127.0.0.1:{self.ports[name]}/metrics")[1]

    def registrations(self) -> float:
        """The device plugin's count of successful Register calls (``…_registrations_total`` on its /metrics)."""
        for line in self.metrics("device-plugin").splitlines():
            if line.startswith("lj_runtimekit_device_plugin_registrations_total "):
                return float(line.split()[1])
        return 0.0

    def stop(self, *names: str) -> None:
        """Stop the named components (all when none is named), scheduler first, Runtime last."""
        order = ["scheduler", "exporter", "device-plugin", "runtime"]
        for name in [n for n in order if n in self.procs and (not names or n in names)]:
            self.procs[name].stop()

    def tails(self) -> str:
        return "\n".join(f"----- {n}\n{p.tail()}" for n, p in self.procs.items())


# ---------------------------------------------------------------------- pods
def container(name: str, limits: Mapping[str, int | str] | None = None, *, sleep: str = "3600") -> dict[str, Any]:
    """A busybox container that prints its environment, then ``ENV_END``, then sleeps ``sleep`` seconds (SIGTERM
    ends it at once: the shell is PID 1, which the kernel shields from signals it does not handle)."""
    resources: dict[str, Any] = {"requests": {"cpu": "10m", "memory": "16Mi"}}
    if limits:
        resources["limits"] = {k: str(v) for k, v in limits.items()}
    return {"name": name, "image": WORKLOAD_IMAGE, "imagePullPolicy": "Never",
            "command": ["sh", "-c", f"trap 'exit 0' TERM; env; echo {ENV_END}; sleep {sleep} & wait"],
            "resources": resources}


def pod_manifest(name: str, containers: Sequence[dict[str, Any]], *, init: Sequence[dict[str, Any]] = (),
                 scheduler: str | None = SCHEDULER, node_name: str | None = None,
                 annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A pod of ``containers`` (and ``init`` containers) for ``scheduler``, or bound to ``node_name`` directly."""
    spec: dict[str, Any] = {"containers": list(containers), "restartPolicy": "Never",
                            "terminationGracePeriodSeconds": 1}
    if init:
        spec["initContainers"] = list(init)
    if scheduler:
        spec["schedulerName"] = scheduler
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": dict(annotations or {})}, "spec": spec}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


class Pods:
    """Pod operations in ``namespace`` through the admin client ``api``."""

    def __init__(self, api: Any, namespace: str, node: RealNode) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace, self.node = namespace, node

    def create(self, manifest: dict[str, Any]) -> str:
        self.core.create_namespaced_pod(self.namespace, manifest)
        return str(manifest["metadata"]["name"])

    def get(self, name: str) -> Any:
        return self.core.read_namespaced_pod(name, self.namespace)

    def delete(self, name: str, *, force: bool = False) -> None:
        with contextlib.suppress(client.ApiException):
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0 if force else None)

    def gone(self, name: str) -> bool:
        try:
            self.get(name)
        except client.ApiException as error:
            return bool(error.status == 404)
        return False

    def phase(self, name: str) -> str:
        return str(self.get(name).status.phase or "")

    def wait_running(self, name: str, timeout: float = 60.0) -> Any:
        """The pod once every container runs; AssertionError naming its phase and reason otherwise (on a time-out:
        its node, conditions, container states and the namespace's last events)."""
        def check() -> Any:
            pod = self.get(name)
            if pod.status.phase in ("Failed", "Succeeded"):
                raise AssertionError(f"pod {name} ended {pod.status.phase}: {pod.status.reason} "
                                     f"{pod.status.message}")
            statuses = pod.status.container_statuses or []
            ready = statuses and all(s.state.running is not None for s in statuses)
            return pod if ready else None
        try:
            return eventually(check, timeout, f"pod {name} running")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.describe(name)}") from None

    def describe(self, name: str) -> str:
        """Pod ``name``'s node, phase, conditions and container states, and the namespace's last 10 events."""
        pod = self.get(name)
        conditions = [(c.type, c.status, c.reason, c.message) for c in pod.status.conditions or ()]
        states = [(s.name, s.state.to_dict()) for s in pod.status.container_statuses or ()]
        events = sorted(self.core.list_namespaced_event(self.namespace).items,
                        key=lambda e: str(e.last_timestamp or e.event_time or ""))[-10:]
        lines = [f"node={pod.spec.node_name} phase={pod.status.phase} conditions={conditions} containers={states}"]
        lines += [f"event {e.involved_object.name} {e.reason}: {(e.message or '')[:300]}" for e in events]
        try:
            log = self.node.kubelet_log.read_text(errors="replace").splitlines()
        except OSError:
            log = []
        lines += [f"kubelet {line[:300]}" for line in [x for x in log if x.startswith(("E", "W"))][-8:]]
        return "\n".join(lines)

    def wait_phase(self, name: str, phase: str, timeout: float = 60.0) -> Any:
        return eventually(lambda: (p := self.get(name)).status.phase == phase and p, timeout, f"{name} {phase}")

    def plan(self, name: str) -> dict[str, Any]:
        """The scheduler's plan annotation of pod ``name``, parsed."""
        annotations = self.get(name).metadata.annotations or {}
        raw = annotations.get(PROTOCOL.annotations.pod_plan)
        assert raw, f"pod {name} has no plan annotation"
        parsed: dict[str, Any] = json.loads(raw)
        return parsed

    def env(self, name: str, container_name: str, timeout: float = 30.0) -> dict[str, str]:
        """The environment container ``container_name`` printed, read from kubelet's log file of it."""
        uid = self.get(name).metadata.uid
        log = self.node.pod_logs_dir / f"{self.namespace}_{name}_{uid}" / container_name / "0.log"

        def read() -> dict[str, str] | None:
            try:
                lines = log.read_text(errors="replace").splitlines()
            except OSError:
                return None
            # CRI log format: "<RFC 3339 time> <stream> <P|F> <text>"
            texts = [line.split(" ", 3)[3] for line in lines if line.count(" ") >= 3]
            if ENV_END not in texts:
                return None
            return dict(t.split("=", 1) for t in texts[: texts.index(ENV_END)] if "=" in t)

        found: dict[str, str] = eventually(read, timeout, f"environment of {name}/{container_name}")
        return found


def expected_env(plan: Mapping[str, Any], container_name: str) -> dict[str, str]:
    """The GPU variables a container must see for its entry in ``plan`` (domain/runtime/limits.py)."""
    gpus = plan["containers"][container_name]["gpus"]
    env = {"NVIDIA_VISIBLE_DEVICES": ",".join(g["uuid"] for g in gpus), "LJRK_CONTAINER_NAME": container_name,
           "LJRK_POD_UID": plan["podUID"]}
    for i, g in enumerate(gpus):
        env[f"LJRK_GPU_UUID_{i}"] = g["uuid"]
        env[f"LJRK_CORE_MILLI_{i}"] = str(g["coreMilli"])
        env[f"LJRK_MEMORY_LIMIT_BYTES_{i}"] = str(g["memoryBytes"])
    return env


def cdi_injected(env: Mapping[str, str]) -> set[str]:
    """The GPU UUIDs containerd injected through CDI: the values of the ``LJRK_CDI_DEVICE_<index>`` variables the
    device plugin's CDI spec edits in (domain/device_plugin/cdi.py); the Runtime's own env never sets them."""
    return {v for k, v in env.items() if k.startswith("LJRK_CDI_DEVICE_")}


def gpu_env(env: Mapping[str, str]) -> dict[str, str]:
    """The subset of ``env`` the Runtime sets (NVIDIA_*, LJRK_*, CUDA_DEVICE_*)."""
    return {k: v for k, v in env.items() if k.startswith(("NVIDIA_VISIBLE", "LJRK_", "CUDA_DEVICE_"))}


def node_ready(api: Any, node: str) -> bool:
    """The Node exists and its ``Ready`` condition is ``True`` (False while kubelet has not registered it yet)."""
    try:
        conditions = client.CoreV1Api(api).read_node(node).status.conditions or []
    except client.ApiException:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def allocatable(api: Any, node: str) -> dict[str, str]:
    """The node's allocatable of our three resources (absent ones as '0')."""
    status = client.CoreV1Api(api).read_node(node).status
    values = status.allocatable or {}
    return {name: str(values.get(name, "0")) for name in (RES.gpu, RES.core, RES.memory)}


@contextlib.contextmanager
def node_stack(node: RealNode, plane: ControlPlane, api: Any, *, gpus: str, expected: Mapping[str, str],
               exporter: bool = False, scheduler: str = "standalone", port: int | None = None) -> Iterator[NodeStack]:
    """A :class:`NodeStack` on ``node``: the Runtime on ``gpus``, the device plugin, the exporter when asked, and
    the scheduler in ``scheduler`` mode (on ``port``), returned once node allocatable equals ``expected``; every
    process stopped and the work folder removed afterwards."""
    world = NodeStack(node, plane, Path(tempfile.mkdtemp(prefix="ljrk-stack-", dir="/tmp")))
    try:
        world.start_runtime(gpus)
        world.start_device_plugin()
        if exporter:
            world.start_exporter()
        world.start_scheduler(scheduler, port)
        eventually(lambda: allocatable(api, node.node_name) == expected, 60, f"allocatable {expected}")
        yield world
    finally:
        world.stop()
        shutil.rmtree(world.workdir, ignore_errors=True)


@contextlib.contextmanager
def pods_in_new_namespace(api: Any, node: RealNode) -> Iterator[Pods]:
    """:class:`Pods` in a new namespace; its pods are force-deleted afterwards (kubelet frees their devices once
    they leave its pod list) and the namespace deleted."""
    core = client.CoreV1Api(api)
    name = f"rk-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    helper = Pods(api, name, node)
    try:
        yield helper
    finally:
        for pod in core.list_namespaced_pod(name).items:
            helper.delete(pod.metadata.name, force=True)
        core.delete_namespace(name)
