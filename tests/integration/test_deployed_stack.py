"""The stack deployed by ``deploy-all.sh deploy`` from the images of ``make images``, as pods on a real node.

The control plane and real node of stack_node.py, the six image tarballs and the kube-scheduler image of
``scripts/real-kubelet.sh`` (the live version's own binary, built from Go modules) in its containerd; a copy of
deploy/ with the test overlay of deployed_stack.py is applied with its own
``deploy-all.sh deploy --kube-scheduler-tag v<version>``: all five components, the scheduler Deployment being
kube-scheduler + our extender as deployed. The tests run in file order on that one deployment:

1. labelling the node ``lj_runtimekit_enable=true`` starts every pod, the controller's enable Job marks the node
   ``enabled`` and the node shows our three resources;
2. a GPU-share pod with ``schedulerName: lj-runtimekit-scheduler`` runs with its grant in its environment, the
   exporter's ``/metrics`` attribute it and the scheduler's ledger holds it; deleting it frees ledger, Runtime
   records and series (the time from ``deploy-all.sh deploy`` to that pod running is printed);
3. the documented ConfigMap change: ``resources.core`` renamed in the flat dotted form in every component's
   ``02-configmap.yaml``, ``kubectl apply -f`` of each, ``kubectl rollout restart`` of the workloads that load the
   protocol; ``ljrk protocol check --kubeconfig`` then exits 0 with every component on the new fingerprint, the
   new name is allocatable and a pod asking for it runs;
4. slowloris on each HTTP port of the deployed pods: one connection beyond MAX_CONNECTIONS is closed unanswered and
   the listener answers once they go; a request trickled a byte a second is cut off after REQUEST_DEADLINE;
5. ``lj_runtimekit_enable=false`` makes the controller's disable Job (in ``lj-runtimekit-jobs``) mark the node
   ``disabled``;
6. ``deploy-all.sh delete`` leaves none of the objects it rendered, no pod and no Job of ours.
"""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import stack_node
import yaml
from deployed_stack import Overlay, metric_values, prepare_deploy_copy, write_kubeconfig
from k8s_harness import ControlPlane, free_ports
from real_node_world import (
    allocatable,
    cdi_injected,
    container,
    eventually,
    expected_env,
    gpu_env,
    http_get,
    pod_manifest,
    pods_in_new_namespace,
    unique,
)

from entrypoints._shared.httpserver import MAX_CONNECTIONS, REQUEST_DEADLINE

pytestmark = [pytest.mark.kubelet, pytest.mark.k8s, pytest.mark.images]

NODE = "ljrk-deploy-node"
NAMESPACE = "kube-system"
JOBS_NAMESPACE = "lj-runtimekit-jobs"  # deploy/jobs: where the controller runs its toggle Jobs
COMPONENTS = ("runtime", "device-plugin", "exporter", "scheduler", "controller")
KUBECTL = str(Path(sys.executable).with_name("kubectl"))
NEW_CORE = "example.com/gpu-core.percentage"
STATE = "lj-runtimekit.io/runtime-state"


@pytest.fixture(scope="module")
def image_tarballs(real_node_files: Path) -> list[Path]:
    return stack_node.image_tarballs(real_node_files)


@pytest.fixture(scope="module")
def kube_scheduler_tag(real_node_files: Path) -> str:
    return stack_node.kube_scheduler_tag(real_node_files)


@pytest.fixture(scope="module")
def plane(k8s_bin_dir: Path, real_node_files: Path) -> Iterator[ControlPlane]:
    with stack_node.started_plane(k8s_bin_dir, NODE) as started:
        yield started


@pytest.fixture(scope="module")
def node(plane: ControlPlane, real_node_files: Path, image_tarballs: list[Path]) -> Iterator[Any]:
    with stack_node.started_node(plane, real_node_files, image_tarballs, NODE) as started:
        yield started


STACK_COMPONENTS = "runtime,deviceplugin,exporter,scheduler,controller"
"""What the module deploys (``deploy_all``)."""

class Deployed:
    """The deployment of the module: the overlay, kubectl's environment, ``deploy-all.sh``, what it applied."""

    def __init__(self, overlay: Overlay, env: dict[str, str], tag: str, work: Path) -> None:
        self.overlay, self.env, self.tag, self.work = overlay, env, tag, work
        self.runtime_socket = work / "host" / "run" / "runtime.sock"
        self.started = 0.0
        self.objects: list[dict[str, Any]] = []
        """The objects ``deploy-all.sh deploy`` applied (its ``render``)."""

    def deploy_all(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``deploy-all.sh`` with every component but ``admission``: here every component acts as the test API
        server's admin (it has no ServiceAccount tokens), whose plan writes the policies rightly refuse; they are
        tested live as our ServiceAccounts in test_admission_policy.py."""
        return subprocess.run(["bash", str(self.overlay.script), *args, f"--components={STACK_COMPONENTS}",
                               f"--kube-scheduler-tag={self.tag}"],
                              env=self.env, capture_output=True, text=True, timeout=180, check=False)

    def kubectl(self, *args: str) -> str:
        result = subprocess.run([KUBECTL, *args], env=self.env, capture_output=True, text=True, timeout=60,
                                check=False)
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout

    def metrics(self, key: str) -> str:
        return http_get(f"http://127.0.0.1:{self.overlay.ports[key]}/metrics")[1]


@pytest.fixture(scope="module")
def deployed(plane: ControlPlane, node: Any, kube_scheduler_tag: str) -> Iterator[Deployed]:
    work = Path(tempfile.mkdtemp(prefix="ljrk-deploy-", dir="/tmp"))
    work.chmod(0o755)
    kube_dir = work / "kube"
    kube_dir.mkdir(mode=0o755)
    write_kubeconfig(kube_dir / "kubeconfig", plane.host, plane.ca_file, plane.token)
    overlay = prepare_deploy_copy(work / "deploy", work / "host", kube_dir, free_ports(10), cdi_dir=node.cdi_spec_dir)
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig), "KUBECTL": KUBECTL}
    stack = Deployed(overlay, env, kube_scheduler_tag, work)
    stack.started = time.monotonic()
    result = stack.deploy_all("deploy")
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr, result.stderr  # the kube-scheduler tag is the API server's minor
    rendered = stack.deploy_all("render")  # what deploy applied (render refuses once ConfigMaps are hand-edited)
    assert rendered.returncode == 0, rendered.stderr
    stack.objects = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    try:
        yield stack
    finally:
        stack.deploy_all("delete")
        subprocess.run(["rm", "-rf", str(work)], check=False)


@pytest.fixture(scope="module")
def api(plane: ControlPlane) -> Iterator[Any]:
    with plane.api_client() as client_:
        yield client_


@pytest.fixture
def diagnose(deployed: Deployed, node: Any) -> Callable[[AssertionError], AssertionError]:
    """Adds the pods of the cluster, the exporter's log tail and the node's log tails to a failed wait."""
    def kubectl(*args: str) -> str:
        done = subprocess.run([KUBECTL, *args], env=deployed.env, capture_output=True, text=True, timeout=60,
                              check=False)
        return done.stdout + done.stderr

    def wrap(exc: AssertionError) -> AssertionError:
        pods = kubectl("get", "pods", "-A", "-o", "wide")
        exporter = kubectl("logs", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=exporter", "--tail=40")
        return AssertionError(f"{exc}\n{pods}\nexporter:\n{exporter}\n{node.log_tails()}")
    return wrap


def _running(api: Any, component: str) -> bool:
    from kubernetes import client

    pods = client.CoreV1Api(api).list_namespaced_pod(
        NAMESPACE, label_selector=f"app.kubernetes.io/component={component}").items
    return any(p.status.phase == "Running" and p.spec.node_name == NODE and p.metadata.deletion_timestamp is None
               and all(c.ready for c in p.status.container_statuses or [object()]) for p in pods)


def _state(api: Any) -> str | None:
    from kubernetes import client

    return (client.CoreV1Api(api).read_node(NODE).metadata.annotations or {}).get(STATE)


def _report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    """Print a figure on the terminal, past pytest's capture."""
    with capsys.disabled():
        print(f"\n[deployed stack] {line}", flush=True)


def test_labelling_the_node_enables_it_and_its_resources_appear(api: Any, deployed: Deployed,
                                                               diagnose: Any) -> None:
    from domain.kube.protocol import ProtocolConstants

    deployed.kubectl("label", "node", NODE, "lj_runtimekit_enable=true", "--overwrite")
    res = ProtocolConstants().resources
    try:
        for component in COMPONENTS:
            eventually(lambda c=component: _running(api, c), timeout=240, what=f"{component} pod Running", interval=1.0)
        eventually(lambda: _state(api) == "enabled", timeout=120, what="node runtime-state enabled", interval=1.0)
        eventually(lambda: all(int(allocatable(api, NODE).get(r, "0")) > 0 for r in (res.gpu, res.core, res.memory)),
                   timeout=60, what="our three resources allocatable", interval=1.0)
    except AssertionError as exc:
        raise diagnose(exc) from exc


def test_gpu_share_pod_through_the_deployed_scheduler(api: Any, node: Any, deployed: Deployed, diagnose: Any,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from adapters.grpc import GrpcNodeRuntime
    from domain.kube.protocol import ProtocolConstants

    res = ProtocolConstants().resources
    with pods_in_new_namespace(api, node) as pods:
        name = pods.create(pod_manifest(unique("share"), [container("main", {res.core: 30, res.memory: 4})]))
        try:
            pod = pods.wait_running(name, timeout=180)
        except AssertionError as exc:
            raise diagnose(exc) from exc
        took = time.monotonic() - deployed.started
        _report(capsys, f"deploy-all.sh deploy to the first GPU-share pod Running: {took:.1f} s")
        plan = pods.plan(name)
        env = gpu_env(pods.env(name, "main"))
        assert {k: env.get(k) for k in expected_env(plan, "main")} == expected_env(plan, "main")
        assert cdi_injected(env) == {g["uuid"] for g in plan["containers"]["main"]["gpus"]}, "CDI device injected"

        def series() -> list[float]:
            return metric_values(deployed.metrics("exporter"), "lj_runtimekit_container_gpu_memory_limit_bytes",
                                 namespace=pods.namespace, pod=name, container="main")

        def ledger() -> float:
            return sum(metric_values(deployed.metrics("scheduler-metrics"),
                                     "lj_runtimekit_scheduler_gpu_core_allocated_milli", node=NODE))

        try:
            values = eventually(series, 60, "exporter series of the pod")
        except AssertionError as exc:
            raise diagnose(exc) from exc
        assert values == [float(4 << 30)]
        assert ledger() == 300.0
        runtime = GrpcNodeRuntime.connect(deployed.runtime_socket)
        try:
            def records() -> bool:
                return any(c.pod_uid == pod.metadata.uid for c in runtime.exporter_data().containers)

            assert records()
            pods.delete(name)
            eventually(lambda: pods.gone(name), 90, "pod deleted by kubelet")
            eventually(lambda: not records(), 60, "Runtime records released")
        finally:
            runtime.close()
        eventually(lambda: not series(), 30, "exporter series gone")
        eventually(lambda: ledger() == 0.0, 30, "ledger freed")


def client_allocatable(api: Any) -> dict[str, str]:
    """Every allocatable quantity of the node (the renamed resource is none of ``allocatable``'s three)."""
    from kubernetes import client

    return dict(client.CoreV1Api(api).read_node(NODE).status.allocatable or {})


def _flat_protocol(text: str) -> str:
    """``text`` (a 02-configmap.yaml) with its nested ``resources:`` block replaced by the documented flat dotted
    form, ``resources.core`` renamed to :data:`NEW_CORE`."""
    nested = ("    resources:\n      gpu: alibabacloud.com/gpu\n      core: alibabacloud.com/gpu-core.percentage\n"
              "      memory: alibabacloud.com/gpu-memory\n")
    flat = (f'    resources.memory: "alibabacloud.com/gpu-memory"\n    resources.core: "{NEW_CORE}"\n'
            '    resources.gpu: "alibabacloud.com/gpu"\n')
    assert nested in text, "no nested resources block in the ConfigMap's protocol.yaml"
    return text.replace(nested, flat)


def test_documented_configmap_change_reaches_every_component(api: Any, node: Any, plane: ControlPlane,
                                                            deployed: Deployed, diagnose: Any) -> None:
    from adapters.protocolfile import PROTOCOL_DATA_KEY, parse_protocol

    old_core = client_allocatable(api).get("alibabacloud.com/gpu-core.percentage", "0")
    assert int(old_core) > 0, "the node shows no gpu-core before the change"
    folders = ("deviceplugin", "exporter", "scheduler", "controller", "runtime")
    for folder in folders:
        file = deployed.overlay.deploy / folder / "02-configmap.yaml"
        file.write_text(_flat_protocol(file.read_text()))
        deployed.kubectl("apply", "-f", str(file))
    data = yaml.safe_load((deployed.overlay.deploy / "scheduler" / "02-configmap.yaml").read_text())["data"]
    fingerprint = parse_protocol(data[PROTOCOL_DATA_KEY], source="scheduler ConfigMap").fingerprint()
    for workload in ("ds/lj-runtimekit-device-plugin-ds", "ds/lj-runtimekit-exporter-ds",
                     "deploy/lj-runtimekit-scheduler-framework", "deploy/lj-runtimekit-controller"):
        deployed.kubectl("rollout", "restart", workload, "-n", NAMESPACE)

    last: list[str] = []
    try:
        try:
            eventually(lambda: stack_node.protocol_check(plane.kubeconfig, NAMESPACE, fingerprint, last), 240,
                       "ljrk protocol check exit 0 after the rollout", interval=3.0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last check: {' / '.join(last)}") from exc
        eventually(lambda: client_allocatable(api).get(NEW_CORE) == old_core, 120,
                   f"{NEW_CORE} allocatable", interval=1.0)
        with pods_in_new_namespace(api, node) as pods:
            name = pods.create(pod_manifest(unique("renamed"), [container("main", {NEW_CORE: 20})]))
            pods.wait_running(name, timeout=180)
            assert pods.plan(name)["containers"]["main"]["gpus"][0]["coreMilli"] == 200
    except AssertionError as exc:
        raise diagnose(exc) from exc


HTTP_PORTS = ("controller", "deviceplugin", "exporter", "scheduler", "scheduler-metrics")
"""The deployed stack's plain-HTTP listeners (:attr:`Overlay.ports`; kube-scheduler's own HTTPS port is not ours)."""


def _answered(sock: socket.socket) -> bool | None:
    """True when a request on ``sock`` gets an HTTP reply, False when the server closed it unanswered, None when
    neither happened within the socket's timeout."""
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = sock.recv(16)
    except (BrokenPipeError, ConnectionResetError):
        return False
    except TimeoutError:
        return None
    return data.startswith(b"HTTP/1.") if data else False


def _slow_request(port: int, seconds: list[float]) -> None:
    """Send a request a byte a second (never idle for the 30 s idle limit) until the server closes the connection;
    append how long that took (s), or ``inf`` after REQUEST_DEADLINE + 60 s."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.settimeout(1.0)
        trickle = iter(b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 10_000)
        while time.monotonic() - started < REQUEST_DEADLINE + 60:
            try:
                sock.send(bytes([next(trickle)]))
                if sock.recv(1) == b"":
                    break
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
        else:
            seconds.append(math.inf)
            return
    seconds.append(time.monotonic() - started)


def test_every_deployed_listener_bounds_piled_up_and_slow_clients(deployed: Deployed) -> None:
    """Slowloris against each HTTP port of the deployed pods: with MAX_CONNECTIONS idle connections held, one more
    is closed unanswered and the listener answers again once they go; a request sent a byte a second is cut off
    after REQUEST_DEADLINE, on every port at once."""
    for key in HTTP_PORTS:
        port = deployed.overlay.ports[key]
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(MAX_CONNECTIONS)]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as extra:
                assert _answered(extra) is False, f"{key}: connection {MAX_CONNECTIONS + 1} was served"
        finally:
            for sock in held:
                sock.close()

        def answers(port: int = port) -> bool:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                return _answered(sock) is True

        eventually(answers, 60, f"{key} answers again")
    seconds: dict[str, list[float]] = {key: [] for key in HTTP_PORTS}
    threads = [threading.Thread(target=_slow_request, args=(deployed.overlay.ports[key], seconds[key]))
               for key in HTTP_PORTS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(REQUEST_DEADLINE - 2 <= s[0] < REQUEST_DEADLINE + 60 for s in seconds.values()), seconds


def test_label_false_disables_the_node_through_a_job(api: Any, deployed: Deployed, diagnose: Any) -> None:
    from kubernetes import client

    deployed.kubectl("label", "node", NODE, "lj_runtimekit_enable=false", "--overwrite")
    jobs: set[str] = set()

    def disabled() -> bool:
        listed = client.BatchV1Api(api).list_namespaced_job(
            JOBS_NAMESPACE, label_selector="app.kubernetes.io/managed-by=lj-runtimekit-controller").items
        jobs.update(j.metadata.name for j in listed if "disable" in j.metadata.name)
        return _state(api) == "disabled"

    try:
        eventually(disabled, 180, "node runtime-state disabled", interval=0.5)
    except AssertionError as exc:
        raise diagnose(exc) from exc
    assert jobs, "no disable Job was seen"


def test_delete_removes_everything_deploy_created(api: Any, deployed: Deployed) -> None:
    from kubernetes import client, dynamic

    objects = deployed.objects
    assert len(objects) >= 20, f"only {len(objects)} objects rendered"
    result = deployed.deploy_all("delete")
    assert result.returncode == 0, result.stderr
    resources = dynamic.DynamicClient(api).resources

    def remaining() -> list[str]:
        left = []
        for obj in objects:
            kind = resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            namespace = obj["metadata"].get("namespace") if kind.namespaced else None
            try:
                kind.get(name=obj["metadata"]["name"], namespace=namespace)
            except client.ApiException as error:
                if error.status == 404:
                    continue
                raise
            left.append(f"{obj['kind']} {namespace or ''}/{obj['metadata']['name']}")
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        left += [f"Pod {p.metadata.name}" for p in core.list_namespaced_pod(
            NAMESPACE, label_selector="app.kubernetes.io/name=lj-runtimekit").items]
        left += [f"Job {j.metadata.name}" for j in batch.list_namespaced_job(
            JOBS_NAMESPACE, label_selector="app.kubernetes.io/managed-by=lj-runtimekit-controller").items]
        return left

    try:
        eventually(lambda: not remaining(), 180, "every object of ours gone", interval=2.0)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; still there: {remaining()}") from exc
