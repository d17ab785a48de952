"""The shipped admission policies (deploy/admission, applied as rendered by kustomize) against a real kube-apiserver.

Behaviours covered, each as the identity the policy is about (impersonated through the harness's system:masters
token: ``Impersonate-User`` for a tenant or one of our ServiceAccounts, ``Impersonate-Extra-…`` for the node-name
and pod-name claims of a pod-bound token):

* a tenant's pod setting a GPU device or limit variable (each family: NVIDIA_VISIBLE_DEVICES, HAMi-core's
  CUDA_DEVICE_MEMORY_LIMIT_<i> / CUDA_DEVICE_SM_LIMIT / CUDA_DISABLE_CONTROL, our LJRK_* grant variables) in a
  container or an init container is refused, the message naming the container and the variable; an ephemeral
  container added with one is refused; CUDA_VISIBLE_DEVICES passes, and so do the stack's own namespace and a
  namespace labelled exempt;
* the plan, allocated and fingerprint annotations: refused when a tenant sets them at create or patches them, or
  binds with a plan; the scheduler's binding with a plan passes, the device plugin marks a pod bound to its own
  node but not another node's; the tenant's own scheduling requests and later updates of a planned pod pass;
* our accounts (whose RBAC reaches every pod, or every pod of the stack's namespace) change in a pod update
  nothing but their own key: another annotation, a label or the spec beside it is refused; the status
  subresource guards the same keys and lets status writes through;
* node agents: the device plugin and the exporter change their own keys on their own Node only; another Node, a
  label, another annotation or a taint is refused; the controller writes its state keys on any Node;
* the toggle Jobs' namespace: the controller's own Job (domain JobTemplate, translated as the adapter sends it)
  passes; each widening of it (an escalating, root or capability-adding container, one turning runAsNonRoot off,
  another ServiceAccount, a token, host network, another host folder, a writable mount, another volume kind) is
  refused naming it, and so is a bare Pod there and an ephemeral container added to a pod of the Job's shape;
* ResourceSlices: the DRA driver's account creates, updates and deletes slices of our driver for its own Node only;
  another Node's, another driver's, or any without the node-name claim are refused; other users are not judged.

The module starts its own API server: the policies would refuse what other modules' tests write on purpose.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_harness import ControlPlane, start_control_plane

from support.polling import wait_for

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
ADMISSION = REPO / "deploy" / "admission"
STACK = "kube-system"  # the parameter ConfigMap's namespace as shipped
PLAN, ALLOCATED, FINGERPRINT = ("lj-runtimekit.io/gpu-plan", "lj-runtimekit.io/gpu-allocated",
                                "lj-runtimekit.io/protocol-fingerprint")
INVENTORY, EXPORTER_FP, STATE = ("lj-runtimekit.io/gpu-inventory", "lj-runtimekit.io/exporter-protocol-fingerprint",
                                 "lj-runtimekit.io/runtime-state")
ENFORCEMENT = "lj-runtimekit.io/share-enforcement"
SCHEDULER = f"system:serviceaccount:{STACK}:lj-runtimekit-scheduler"
DEVICE_PLUGIN = f"system:serviceaccount:{STACK}:lj-runtimekit-device-plugin"
EXPORTER = f"system:serviceaccount:{STACK}:lj-runtimekit-exporter"
CONTROLLER = f"system:serviceaccount:{STACK}:lj-runtimekit-controller"
DRA_DRIVER = f"system:serviceaccount:{STACK}:lj-runtimekit-dra-driver"
NODE_CLAIM = "authentication.kubernetes.io%2fnode-name"
POD_CLAIM = "authentication.kubernetes.io%2fpod-name"
JOBS = "lj-runtimekit-jobs"  # the toggle Jobs' namespace (deploy/jobs)


@pytest.fixture(scope="module")
def plane(k8s_bin_dir: Path) -> Iterator[ControlPlane]:
    plane = start_control_plane(k8s_bin_dir)
    try:
        kubectl = Path(sys.executable).parent / "kubectl"
        rendered = subprocess.run([str(kubectl), "kustomize", str(ADMISSION)], capture_output=True, text=True,
                                  timeout=60, check=True).stdout
        applied = subprocess.run([str(kubectl), "--kubeconfig", str(plane.kubeconfig), "apply", "--server-side",
                                  "--field-manager=lj-runtimekit", "-f", "-"], input=rendered, capture_output=True,
                                 text=True, timeout=60, check=False)
        assert applied.returncode == 0, applied.stderr
        yield plane
    finally:
        plane.stop()


def core(plane: ControlPlane, user: str | None = None, **claims: str) -> Any:
    """A CoreV1Api acting as ``user`` (None: the admin) with the token claims ``claims`` (header suffix: value)."""
    from kubernetes import client

    api = plane.api_client()
    if user is not None:
        api.set_default_header("Impersonate-User", user)
        for key, value in claims.items():
            api.set_default_header(f"Impersonate-Extra-{key}", value)
    return client.CoreV1Api(api)


def pod(name: str, *, env: dict[str, str] | None = None, init_env: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox",
                                            "env": [{"name": k, "value": v} for k, v in (env or {}).items()]}]}
    if init_env is not None:
        spec["initContainers"] = [{"name": "setup", "image": "busybox",
                                   "env": [{"name": k, "value": v} for k, v in init_env.items()]}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations or {}},
            "spec": spec}


def refused(call: Any) -> str:
    """The message of the 403 that ``call()`` must draw."""
    from kubernetes.client.rest import ApiException

    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status == 403, caught.value.body
    return str(caught.value.body)


@pytest.fixture(scope="module")
def enforced(plane: ControlPlane) -> ControlPlane:
    """The plane once all four policies refuse a known-bad request (they take effect asynchronously)."""
    from kubernetes.client.rest import ApiException

    admin = core(plane)
    admin.create_namespace({"metadata": {"name": "probe"}})
    admin.create_namespace({"metadata": {"name": JOBS}})
    for node in ("node-a", "node-b"):
        admin.create_node({"metadata": {"name": node, "labels": {"zone": "one"}}})
    tenant = core(plane, "alice")
    agent = core(plane, DEVICE_PLUGIN, **{NODE_CLAIM: "node-a"})

    def refuses(call: Any) -> bool:
        try:
            call()
        except ApiException as error:
            return error.status == 403
        return False

    probes = [lambda: tenant.create_namespaced_pod("probe", pod("p", env={"NVIDIA_VISIBLE_DEVICES": "all"}),
                                                   dry_run="All"),
              lambda: tenant.create_namespaced_pod("probe", pod("p", annotations={PLAN: "{}"}), dry_run="All"),
              lambda: agent.patch_node("node-b", {"metadata": {"annotations": {INVENTORY: "{}"}}}, dry_run="All"),
              lambda: admin.create_namespaced_pod(JOBS, pod("p"), dry_run="All")]
    for probe in probes:
        assert wait_for(lambda probe=probe: refuses(probe), timeout=60), "the policies never took effect"
    return plane


@pytest.fixture
def namespace(enforced: ControlPlane) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    core(enforced).create_namespace({"metadata": {"name": name}})
    return name


# ---------------------------------------------------------------- environment
@pytest.mark.parametrize("variable", [
    "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT",
    "CUDA_DISABLE_CONTROL", "LJRK_GPU_UUID_0", "LJRK_MEMORY_LIMIT_BYTES_1", "LJRK_POD_UID"])
def test_a_tenant_pod_may_not_set_gpu_variables(enforced: ControlPlane, namespace: str, variable: str) -> None:
    tenant = core(enforced, "alice")
    message = refused(lambda: tenant.create_namespaced_pod(namespace, pod("p", env={"FOO": "1", variable: "x"})))
    assert f"container 'main' sets {variable}" in message
    message = refused(lambda: tenant.create_namespaced_pod(namespace, pod("q", init_env={variable: "x"})))
    assert f"container 'setup' sets {variable}" in message
    assert "FOO" not in message


def test_legitimate_pods_exempt_namespaces_and_ephemeral_containers(enforced: ControlPlane, namespace: str) -> None:
    tenant, admin = core(enforced, "alice"), core(enforced)
    tenant.create_namespaced_pod(namespace, pod("ok", env={"CUDA_VISIBLE_DEVICES": "0",
                                                          "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}))
    ephemeral = {"spec": {"ephemeralContainers": [{"name": "debug", "image": "busybox",
                                                   "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]}}
    message = refused(lambda: tenant.patch_namespaced_pod_ephemeralcontainers("ok", namespace, ephemeral))
    assert "ephemeral container 'debug' sets NVIDIA_VISIBLE_DEVICES" in message
    ephemeral["spec"]["ephemeralContainers"][0]["env"] = [{"name": "FOO", "value": "1"}]
    tenant.patch_namespaced_pod_ephemeralcontainers("ok", namespace, ephemeral)
    admin.create_namespaced_pod(STACK, pod(f"runtime-{namespace}", env={"NVIDIA_VISIBLE_DEVICES": "all"}))
    admin.create_namespace({"metadata": {"name": f"{namespace}-op", "labels": {
        "lj-runtimekit.io/gpu-env-exempt": "true"}}})
    tenant.create_namespaced_pod(f"{namespace}-op", pod("dcgm", env={"NVIDIA_VISIBLE_DEVICES": "all"}))


# ---------------------------------------------------------------- pod annotations
def binding(name: str, node: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "annotations": annotations},
            "target": {"kind": "Node", "name": node}}


def test_only_our_components_write_their_pod_annotations(enforced: ControlPlane, namespace: str) -> None:
    tenant, admin = core(enforced, "alice"), core(enforced)
    for key in (PLAN, ALLOCATED, FINGERPRINT):
        message = refused(lambda key=key: tenant.create_namespaced_pod(namespace, pod("p", annotations={key: "1"})))
        assert f"alice may not set or change annotation {key}" in message
    requests = {"lj-runtimekit.io/gpu-models": "A100", "lj-runtimekit.io/scheduling-policy": "fgd"}
    tenant.create_namespaced_pod(namespace, pod("gpu", annotations=requests))
    tenant.create_namespaced_pod(namespace, pod("other"))
    message = refused(lambda: tenant.create_namespaced_pod_binding(
        "gpu", namespace, binding("gpu", "node-a", {PLAN: "{}"}), _preload_content=False))
    assert "binding of pod" in message
    assert "only the lj-runtimekit scheduler" in message

    scheduler = core(enforced, SCHEDULER)
    for name, node in (("gpu", "node-a"), ("other", "node-b")):
        scheduler.create_namespaced_pod_binding(name, namespace, binding(name, node, {PLAN: '{"v": 1}'}),
                                                _preload_content=False)
    assert admin.read_namespaced_pod("gpu", namespace).metadata.annotations[PLAN] == '{"v": 1}'
    refused(lambda: tenant.patch_namespaced_pod("gpu", namespace, {"metadata": {"annotations": {PLAN: "{}"}}}))
    refused(lambda: tenant.patch_namespaced_pod("gpu", namespace, {"metadata": {"annotations": {PLAN: None}}}))
    tenant.patch_namespaced_pod("gpu", namespace, {"metadata": {"labels": {"team": "a"}}})  # plan untouched

    plugin_a = core(enforced, DEVICE_PLUGIN, **{NODE_CLAIM: "node-a"})
    mark = {"metadata": {"annotations": {ALLOCATED: "1700000000"}}}
    plugin_a.patch_namespaced_pod("gpu", namespace, mark)
    message = refused(lambda: plugin_a.patch_namespaced_pod("other", namespace, mark))
    assert "on the pods bound to its own node" in message
    refused(lambda: tenant.patch_namespaced_pod("other", namespace, mark))
    refused(lambda: tenant.patch_namespaced_pod("gpu", namespace, {"metadata": {"annotations": {ALLOCATED: None}}}))

    admin.create_namespaced_pod(STACK, pod(f"sched-{namespace}"))
    fingerprint = {"metadata": {"annotations": {FINGERPRINT: "0123456789abcdef"}}}
    core(enforced, SCHEDULER, **{POD_CLAIM: f"sched-{namespace}"}).patch_namespaced_pod(
        f"sched-{namespace}", STACK, fingerprint)
    refused(lambda: core(enforced, SCHEDULER, **{POD_CLAIM: "gpu"}).patch_namespaced_pod("gpu", namespace,
                                                                                         fingerprint))


def test_our_accounts_change_nothing_but_their_own_key_on_a_pod(enforced: ControlPlane, namespace: str) -> None:
    admin = core(enforced)
    admin.create_namespaced_pod(namespace, pod("gpu"))
    core(enforced, SCHEDULER).create_namespaced_pod_binding("gpu", namespace, binding("gpu", "node-a", {}),
                                                            _preload_content=False)
    plugin = core(enforced, DEVICE_PLUGIN, **{NODE_CLAIM: "node-a"})
    message = refused(lambda: plugin.patch_namespaced_pod("gpu", namespace, {"metadata": {"annotations": {
        ALLOCATED: "1700000000", "team": "b"}}}))
    assert "may change on a pod only the annotation " + ALLOCATED in message
    assert "annotation team" in message
    message = refused(lambda: plugin.patch_namespaced_pod("gpu", namespace, {"metadata": {"labels": {"x": "y"}}}))
    assert "its labels, spec, finalizers or owner references" in message
    refused(lambda: plugin.patch_namespaced_pod("gpu", namespace, {"spec": {"activeDeadlineSeconds": 1}}))
    plugin.patch_namespaced_pod("gpu", namespace, {"metadata": {"annotations": {ALLOCATED: "1700000000"}}})

    admin.create_namespaced_pod(STACK, pod(f"ctl-{namespace}"))
    controller = core(enforced, CONTROLLER, **{POD_CLAIM: f"ctl-{namespace}"})
    message = refused(lambda: controller.patch_namespaced_pod(f"ctl-{namespace}", STACK, {"metadata": {
        "annotations": {FINGERPRINT: "0123456789abcdef"}, "labels": {"x": "y"}}}))
    assert "its labels" in message
    controller.patch_namespaced_pod(f"ctl-{namespace}", STACK, {"metadata": {"annotations": {
        FINGERPRINT: "0123456789abcdef"}}})
    admin.patch_namespaced_pod("gpu", namespace, {"metadata": {"labels": {"x": "y"}}})  # others are not judged

    # the status subresource carries metadata too: our keys stay guarded there, status writes themselves pass
    message = refused(lambda: core(enforced, "alice").patch_namespaced_pod_status(
        "gpu", namespace, {"metadata": {"annotations": {PLAN: "{}"}}}))
    assert f"may not set or change annotation {PLAN}" in message
    refused(lambda: plugin.patch_namespaced_pod_status("gpu", namespace, {"metadata": {"annotations": {
        ALLOCATED: "1"}}}))
    core(enforced, SCHEDULER).patch_namespaced_pod_status("gpu", namespace, {"status": {"conditions": [
        {"type": "PodScheduled", "status": "True"}]}})  # kube-scheduler's own kind of status write


# ---------------------------------------------------------------- nodes
def test_node_agents_change_only_their_own_keys_on_their_own_node(enforced: ControlPlane) -> None:
    admin = core(enforced)
    plugin = core(enforced, DEVICE_PLUGIN, **{NODE_CLAIM: "node-a"})
    plugin.patch_node("node-a", {"metadata": {"annotations": {INVENTORY: '{"gpus": []}'}}})
    assert admin.read_node("node-a").metadata.annotations[INVENTORY] == '{"gpus": []}'
    message = refused(lambda: plugin.patch_node("node-b", {"metadata": {"annotations": {INVENTORY: "{}"}}}))
    assert "may change only its own Node (its token's node-name claim: node-a), not Node node-b" in message
    plugin.patch_node("node-a", {"metadata": {"labels": {ENFORCEMENT: "hami-core"}}})  # its one label
    assert admin.read_node("node-a").metadata.labels[ENFORCEMENT] == "hami-core"
    message = refused(lambda: plugin.patch_node("node-a", {"metadata": {"labels": {"zone": "two"}}}))
    assert "label zone" in message
    refused(lambda: plugin.patch_node("node-b", {"metadata": {"labels": {ENFORCEMENT: "none"}}}))
    message = refused(lambda: plugin.patch_node("node-a", {"metadata": {"annotations": {STATE: "enabled"}}}))
    assert f"annotation {STATE}" in message
    message = refused(lambda: plugin.patch_node("node-a", {"spec": {"taints": [
        {"key": "k", "value": "v", "effect": "NoSchedule"}]}}))
    assert "the spec" in message
    unclaimed = core(enforced, DEVICE_PLUGIN)
    assert "claim: none" in refused(lambda: unclaimed.patch_node(
        "node-a", {"metadata": {"annotations": {INVENTORY: "{}"}}}))

    exporter = core(enforced, EXPORTER, **{NODE_CLAIM: "node-b"})
    exporter.patch_node("node-b", {"metadata": {"annotations": {EXPORTER_FP: "0123456789abcdef"}}})
    refused(lambda: exporter.patch_node("node-a", {"metadata": {"annotations": {EXPORTER_FP: "0"}}}))
    refused(lambda: exporter.patch_node("node-b", {"metadata": {"annotations": {INVENTORY: "{}"}}}))
    refused(lambda: exporter.patch_node("node-b", {"metadata": {"labels": {ENFORCEMENT: "none"}}}))

    controller = core(enforced, CONTROLLER)
    for node in ("node-a", "node-b"):
        controller.patch_node(node, {"metadata": {"annotations": {STATE: "enabled"}}})
    refused(lambda: controller.patch_node("node-a", {"metadata": {"labels": {"zone": "two"}}}))
    admin.patch_node("node-a", {"metadata": {"labels": {"zone": "two"}}})  # others are not judged


# ---------------------------------------------------------------- toggle Jobs' namespace
def test_toggle_jobs_namespace_holds_only_the_controllers_job_shape(enforced: ControlPlane) -> None:
    import copy

    from kubernetes import client

    from adapters.kubernetes.translate_jobs import job_to_v1
    from domain.toggle.jobs import JobTemplate
    from domain.toggle.states import Action

    api = enforced.api_client()
    api.set_default_header("Impersonate-User", CONTROLLER)
    jobs = client.BatchV1Api(api)
    node = core(enforced).read_node("node-a")
    template = JobTemplate(namespace=JOBS, service_account="lj-runtimekit-job-agent")
    ours = api.sanitize_for_serialization(job_to_v1(template.build("node-a", node.metadata.uid, Action.ENABLE, 1)))
    jobs.create_namespaced_job(JOBS, ours, dry_run="All")

    def widened(change: Any) -> str:
        job = copy.deepcopy(ours)
        change(job["spec"]["template"]["spec"])
        return refused(lambda: jobs.create_namespaced_job(JOBS, job, dry_run="All"))

    def container(**security: Any) -> Any:
        return lambda spec: spec["containers"][0]["securityContext"].update(security)

    for change, expected in [
        # (privileged: true is refused before admission by this API server, which runs without --allow-privileged)
        (container(allowPrivilegeEscalation=True), "container main needs privileged false"),
        (container(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}), "container main needs"),
        (container(runAsUser=0), "container main needs"),
        (container(runAsNonRoot=False), "container main needs"),
        (container(readOnlyRootFilesystem=False), "container main needs"),
        (lambda spec: spec.update(serviceAccountName="default"), "run as ServiceAccount lj-runtimekit-job-agent"),
        (lambda spec: spec.pop("serviceAccountName"), "not (the namespace default)"),
        (lambda spec: spec.update(automountServiceAccountToken=True), "mount no ServiceAccount token"),
        (lambda spec: spec.update(hostNetwork=True), "host's network, PID or IPC"),
        (lambda spec: spec["securityContext"].update(runAsNonRoot=False), "runAsNonRoot: true"),
        (lambda spec: spec["volumes"][0]["hostPath"].update(path="/"), "only the Runtime socket folder"),
        (lambda spec: spec["volumes"].append({"name": "scratch", "emptyDir": {}}), "volume scratch is not it"),
        (lambda spec: spec["containers"][0]["volumeMounts"][0].pop("readOnly"), "container main has a writable"),
    ]:
        assert expected in widened(change), expected
    bare = pod("bare")
    bare["spec"]["hostPID"] = True
    admin = core(enforced)
    assert "ServiceAccount" in refused(lambda: admin.create_namespaced_pod(JOBS, bare, dry_run="All"))

    # a pod of the Job's shape passes; an ephemeral container added to it later (no securityContext) does not
    shaped = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent"},
              "spec": {**ours["spec"]["template"]["spec"], "schedulerName": "nobody"}}
    shaped["spec"].pop("nodeName", None)
    admin.create_namespaced_pod(JOBS, shaped)
    added = api.sanitize_for_serialization(admin.read_namespaced_pod("agent", JOBS))
    added["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox"}]
    message = refused(lambda: admin.replace_namespaced_pod_ephemeralcontainers("agent", JOBS, added))
    assert "container debug needs" in message


# ---------------------------------------------------------------- ResourceSlices
def test_dra_driver_writes_only_its_own_nodes_slices_of_our_driver(enforced: ControlPlane) -> None:
    from kubernetes import client

    def slices(user: str | None = None, **claims: str) -> Any:
        api = enforced.api_client()
        if user is not None:
            api.set_default_header("Impersonate-User", user)
            for key, value in claims.items():
                api.set_default_header(f"Impersonate-Extra-{key}", value)
        return client.ResourceV1Api(api)

    def slice_of(node: str, driver: str = "gpu.lj-runtimekit.io") -> dict[str, Any]:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{driver}"},
                "spec": {"driver": driver, "nodeName": node, "devices": [{"name": "gpu-0"}],
                         "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}}

    driver = slices(DRA_DRIVER, **{NODE_CLAIM: "node-a"})
    driver.create_resource_slice(slice_of("node-a"))
    message = refused(lambda: driver.create_resource_slice(slice_of("node-b")))
    assert "only the ResourceSlices of its own Node (its token's node-name claim: node-a), not of node-b" in message
    message = refused(lambda: driver.create_resource_slice(slice_of("node-a", "gpu.nvidia.com")))
    assert "only ResourceSlices of driver gpu.lj-runtimekit.io, not gpu.nvidia.com" in message
    assert "claim: none" in refused(lambda: slices(DRA_DRIVER).create_resource_slice(slice_of("node-a")))

    slices().create_resource_slice(slice_of("node-b"))  # others, e.g. the admin, are not judged
    other = "node-b-gpu.lj-runtimekit.io"
    refused(lambda: driver.patch_resource_slice(other, {"spec": {"pool": {"generation": 2}}}))
    refused(lambda: driver.delete_resource_slice(other))
    driver.patch_resource_slice("node-a-gpu.lj-runtimekit.io", {"spec": {"pool": {"generation": 2}}})
    driver.delete_resource_slice("node-a-gpu.lj-runtimekit.io")
    assert [s.metadata.name for s in slices().list_resource_slice().items] == [other]
