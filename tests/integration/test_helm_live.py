"""The Helm chart deploy/helm/lj-runtimekit installed, upgraded, rolled back and uninstalled on a real node.

The control plane and real node of stack_node.py (images imported), and Helm 4 (``$LJRK_HELM`` or
``scripts/kube_platform.py helm-path``; missing: skipped, a failure with ``LJRK_REQUIRE_K8S=1``). Every ``helm
install``/``upgrade`` goes through the post-renderer plugin of helm_postrender.py, which applies deployed_stack.py's
test-node overlay (the one the deployed-stack test applies to its kustomize copy) to the chart's render, with
``admission.enabled=false`` (every component acts as the test API server's admin, whose plan writes the policies
rightly refuse; test_admission_policy.py tests them) until the last upgrade. The tests run in file order on one
release, ``lj-runtimekit`` in kube-system:

1. ``helm install --wait``: every component Ready, the node enabled by the controller's Job, our resources
   allocatable; a GPU-share pod runs with its grant and the exporter's ``/metrics`` attribute it (that pod stays
   until the uninstall);
2. ``helm upgrade --set protocol.resources.core=…``: every workload rolls (new pods), ``ljrk protocol check
   --kubeconfig`` agrees with every component on the new fingerprint, the new name is allocatable, a pod asking for
   it runs, and the pod of 1 is still Running with no restart;
3. ``helm rollback`` to revision 1: the components roll back to the original protocol (protocol check on the
   original fingerprint, the original name allocatable again), the pod of 1 still Running;
4. ``helm upgrade --set scheduler.mode=standalone``: the scheduler Deployment runs ``ljrk scheduler --mode
   standalone`` alone (no kube-scheduler container) and binds a new share pod itself (its plan annotation);
5. ``helm upgrade --set admission.enabled=true`` then ``helm uninstall --wait``: no object of any revision's
   manifest is left (RBAC, ConfigMaps, NetworkPolicies, admission policies and bindings, the Jobs' namespace and
   what is in it), no pod and no Job of ours. Kept, as docs/helm.md says: the Leases, the node label and
   annotations, the host folders.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import stack_node
import yaml
from deployed_stack import REPO_ROOT, metric_values, node_settings, write_kubeconfig
from helm_postrender import write_plugin
from k8s_harness import ControlPlane, free_ports
from real_node_world import allocatable, container, eventually, http_get, pod_manifest, pods_in_new_namespace, unique

from support.helm import helm_binary

pytestmark = [pytest.mark.kubelet, pytest.mark.k8s, pytest.mark.images]

NODE = "ljrk-helm-node"
NAMESPACE = "kube-system"
RELEASE = "lj-runtimekit"
CHART = REPO_ROOT / "deploy" / "helm" / "lj-runtimekit"
JOBS_NAMESPACE = "lj-runtimekit-jobs"
COMPONENTS = ("runtime", "device-plugin", "exporter", "scheduler", "controller")
KUBECTL = str(Path(sys.executable).with_name("kubectl"))
CORE = "alibabacloud.com/gpu-core.percentage"
NEW_CORE = "example.com/gpu-core.percentage"
STATE = "lj-runtimekit.io/runtime-state"


@pytest.fixture(scope="module")
def helm_bin() -> str:
    return helm_binary()


@pytest.fixture(scope="module")
def plane(k8s_bin_dir: Path, real_node_files: Path, helm_bin: str) -> Iterator[ControlPlane]:
    with stack_node.started_plane(k8s_bin_dir, NODE) as started:
        yield started


@pytest.fixture(scope="module")
def node(plane: ControlPlane, real_node_files: Path) -> Iterator[Any]:
    tarballs = stack_node.image_tarballs(real_node_files)
    with stack_node.started_node(plane, real_node_files, tarballs, NODE) as started:
        yield started


@pytest.fixture(scope="module")
def api(plane: ControlPlane) -> Iterator[Any]:
    with plane.api_client() as client_:
        yield client_


class Release:
    """The release of the module: ``helm`` with the test's plugins folder and the cluster's kubeconfig."""

    def __init__(self, helm: str, env: dict[str, str], plugin: str, tag: str, ports: dict[str, int]) -> None:
        self.helm_bin, self.env, self.plugin, self.ports = helm, env, plugin, ports
        self.base = ["--set", "admission.enabled=false",
                     "--set", f"scheduler.kubeSchedulerImage=registry.k8s.io/kube-scheduler:{tag}"]
        self.manifests: list[dict[str, Any]] = []
        """Every object of every revision's manifest (``helm get manifest``), for the uninstall check."""

    def helm(self, *args: str, timeout: float = 420) -> str:
        result = subprocess.run([self.helm_bin, *args], env=self.env, capture_output=True, text=True,
                                timeout=timeout, check=False)
        assert result.returncode == 0, f"helm {' '.join(args[:2])}: {result.stderr}\n{result.stdout}"
        return result.stdout

    def apply(self, verb: str, *values: str) -> None:
        """``helm install|upgrade`` with the overlay's post-renderer and ``--wait``; records the new manifest."""
        self.helm(verb, RELEASE, str(CHART), "--namespace", NAMESPACE, "--post-renderer", self.plugin, "--wait",
                  "--timeout", "6m", *self.base, *values)
        self.record()

    def record(self) -> None:
        text = self.helm("get", "manifest", RELEASE, "--namespace", NAMESPACE)
        self.manifests += [d for d in yaml.safe_load_all(text) if d]

    def kubectl(self, *args: str) -> str:
        result = subprocess.run([KUBECTL, *args], env=self.env, capture_output=True, text=True, timeout=60,
                                check=False)
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout


@pytest.fixture(scope="module")
def release(plane: ControlPlane, node: Any, helm_bin: str, real_node_files: Path) -> Iterator[Release]:
    work = Path(tempfile.mkdtemp(prefix="ljrk-helm-", dir="/tmp"))
    work.chmod(0o755)
    kube_dir = work / "kube"
    kube_dir.mkdir(mode=0o755)
    write_kubeconfig(kube_dir / "kubeconfig", plane.host, plane.ca_file, plane.token)
    settings = node_settings(work / "host", kube_dir, free_ports(10), cdi_dir=node.cdi_spec_dir)
    (work / "settings.json").write_text(settings.to_json())
    plugin = write_plugin(work / "plugins", work / "settings.json")
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig), "HELM_PLUGINS": str(work / "plugins"),
           "HELM_CONFIG_HOME": str(work / "helm-config"), "HELM_CACHE_HOME": str(work / "helm-cache"),
           "HELM_DATA_HOME": str(work / "helm-data")}
    stack = Release(helm_bin, env, plugin, stack_node.kube_scheduler_tag(real_node_files), settings.ports)
    try:
        yield stack
    finally:
        subprocess.run([helm_bin, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "3m"],
                       env=env, capture_output=True, check=False, timeout=240)
        subprocess.run(["rm", "-rf", str(work)], check=False)


@pytest.fixture(scope="module")
def share_pod(api: Any, node: Any) -> Iterator[tuple[Any, str]]:
    """A namespace for the share pod of test 1, which stays until the module ends."""
    with pods_in_new_namespace(api, node) as pods:
        yield pods, unique("share")


def _workload_pods(api: Any) -> dict[str, set[str]]:
    """Per component, the uids of its Running, ready, not terminating pods on the node."""
    from kubernetes import client

    found: dict[str, set[str]] = {c: set() for c in COMPONENTS}
    for pod in client.CoreV1Api(api).list_namespaced_pod(NAMESPACE,
                                                         label_selector="app.kubernetes.io/name=lj-runtimekit").items:
        component = (pod.metadata.labels or {}).get("app.kubernetes.io/component", "")
        if (component in found and pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None
                and all(c.ready for c in pod.status.container_statuses or [object()])):
            found[component].add(pod.metadata.uid)
    return found


def _fingerprint(release: Release) -> str:
    from adapters.protocolfile import PROTOCOL_DATA_KEY, parse_protocol

    text = release.kubectl("get", "configmap", "lj-runtimekit-scheduler-config", "-n", NAMESPACE, "-o",
                           f"jsonpath={{.data.{PROTOCOL_DATA_KEY.replace('.', chr(92) + '.')}}}")
    return parse_protocol(text, source="scheduler ConfigMap").fingerprint()


def _agrees(plane: ControlPlane, fingerprint: str, what: str) -> None:
    last: list[str] = []
    try:
        eventually(lambda: stack_node.protocol_check(plane.kubeconfig, NAMESPACE, fingerprint, last), 240, what,
                   interval=3.0)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last check: {' / '.join(last)}") from exc


def _still_running(pods: Any, name: str, uid: str) -> None:
    pod = pods.get(name)
    assert pod.metadata.uid == uid, pods.describe(name)
    assert pod.status.phase == "Running", pods.describe(name)
    assert all(s.restart_count == 0 and s.state.running for s in pod.status.container_statuses), pods.describe(name)


def test_install_runs_every_component_and_a_share_pod(api: Any, release: Release, share_pod: Any) -> None:
    from domain.kube.protocol import ProtocolConstants

    release.kubectl("label", "node", NODE, "lj_runtimekit_enable=true", "--overwrite")
    release.apply("install")
    eventually(lambda: all(_workload_pods(api).values()), 240, "every component Running and ready", interval=1.0)
    eventually(lambda: (client_annotations(api).get(STATE) == "enabled"), 120, "node enabled", interval=1.0)
    res = ProtocolConstants().resources
    eventually(lambda: all(int(allocatable(api, NODE).get(r, "0")) > 0 for r in (res.gpu, res.core, res.memory)),
               60, "our three resources allocatable", interval=1.0)
    pods, name = share_pod
    pods.create(pod_manifest(name, [container("main", {res.core: 30, res.memory: 4})]))
    pods.wait_running(name, timeout=180)

    def series() -> list[float]:
        page = http_get(f"http://127.0.0.1:{release.ports['exporter']}/metrics")[1]
        return metric_values(page, "lj_runtimekit_container_gpu_memory_limit_bytes", namespace=pods.namespace,
                             pod=name, container="main")

    assert eventually(series, 60, "exporter series of the share pod") == [float(4 << 30)]


def client_annotations(api: Any) -> dict[str, str]:
    from kubernetes import client

    return dict(client.CoreV1Api(api).read_node(NODE).metadata.annotations or {})


def test_upgrade_renaming_a_resource_rolls_the_components(api: Any, plane: ControlPlane, node: Any,
                                                          release: Release, share_pod: Any) -> None:
    pods, name = share_pod
    uid = pods.get(name).metadata.uid
    before = _workload_pods(api)
    old_core = allocatable(api, NODE).get(CORE, "0")
    release.apply("upgrade", "--set", f"protocol.resources.core={NEW_CORE}")
    eventually(lambda: all(now and not now & before[c] for c, now in _workload_pods(api).items()), 240,
               "every component on new pods", interval=1.0)
    fingerprint = _fingerprint(release)
    _agrees(plane, fingerprint, "ljrk protocol check agrees on the new resource name")
    eventually(lambda: client_allocatable(api).get(NEW_CORE) == old_core, 120, f"{NEW_CORE} allocatable")
    with pods_in_new_namespace(api, node) as renamed:
        other = renamed.create(pod_manifest(unique("renamed"), [container("main", {NEW_CORE: 20})]))
        renamed.wait_running(other, timeout=180)
    _still_running(pods, name, uid)


def client_allocatable(api: Any) -> dict[str, str]:
    from kubernetes import client

    return dict(client.CoreV1Api(api).read_node(NODE).status.allocatable or {})


def test_rollback_restores_the_original_names(api: Any, plane: ControlPlane, release: Release,
                                              share_pod: Any) -> None:
    pods, name = share_pod
    uid = pods.get(name).metadata.uid
    release.helm("rollback", RELEASE, "1", "--namespace", NAMESPACE, "--wait", "--timeout", "6m", timeout=420)
    release.record()
    assert CORE in yaml.safe_dump(release.manifests[-40:]), "revision 1's names are not back"
    _agrees(plane, _fingerprint(release), "ljrk protocol check agrees on the original names")
    eventually(lambda: int(client_allocatable(api).get(CORE, "0")) > 0, 120, f"{CORE} allocatable again")
    _still_running(pods, name, uid)


def test_standalone_scheduler_binds_a_share_pod(api: Any, node: Any, release: Release) -> None:
    from kubernetes import client

    from domain.kube.protocol import ProtocolConstants

    release.apply("upgrade", "--set", "scheduler.mode=standalone")
    deployment = client.AppsV1Api(api).read_namespaced_deployment("lj-runtimekit-scheduler-framework", NAMESPACE)
    assert [c.name for c in deployment.spec.template.spec.containers] == ["extender"]
    assert "--mode=standalone" in deployment.spec.template.spec.containers[0].args
    eventually(lambda: _workload_pods(api)["scheduler"], 180, "the standalone scheduler Running", interval=1.0)
    res = ProtocolConstants().resources
    with pods_in_new_namespace(api, node) as pods:
        name = pods.create(pod_manifest(unique("standalone"), [container("main", {res.core: 20})]))
        pods.wait_running(name, timeout=180)
        assert pods.plan(name)["containers"]["main"]["gpus"][0]["coreMilli"] == 200


def test_uninstall_leaves_no_object_of_ours(api: Any, release: Release) -> None:
    from kubernetes import client, dynamic

    release.apply("upgrade", "--set", "admission.enabled=true")
    kinds = {d["kind"] for d in release.manifests}
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "NetworkPolicy", "Namespace",
            "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap"} <= kinds, kinds
    release.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "4m", timeout=300)
    resources = dynamic.DynamicClient(api).resources
    objects = {(d["apiVersion"], d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
               for d in release.manifests}

    def remaining() -> list[str]:
        left = []
        for api_version, kind_name, namespace, name in sorted(objects, key=str):
            kind = resources.get(api_version=api_version, kind=kind_name)
            try:
                kind.get(name=name, namespace=namespace if kind.namespaced else None)
            except client.ApiException as error:
                if error.status == 404:
                    continue
                raise
            left.append(f"{kind_name} {namespace or ''}/{name}")
        left += [f"Pod {p.metadata.name}" for p in client.CoreV1Api(api).list_namespaced_pod(
            NAMESPACE, label_selector="app.kubernetes.io/name=lj-runtimekit").items]
        left += [f"Job {j.metadata.name}" for j in client.BatchV1Api(api).list_job_for_all_namespaces(
            label_selector="app.kubernetes.io/managed-by=lj-runtimekit-controller").items]
        return left

    try:
        eventually(lambda: not remaining(), 180, "every object of ours gone", interval=2.0)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; still there: {remaining()}") from exc
    assert not release.helm("list", "--namespace", NAMESPACE, "-q").split()  # Helm 4 lists every status
