"""deploy/admission's parameter ConfigMap against the code and the protocol it guards (no cluster needed).

Behaviours covered:

* every environment variable the Runtime answers in Allocate (``limit_envs``, ``mig_envs``, with several GPUs and
  instances) is denied by name or prefix, and CUDA_VISIBLE_DEVICES / NVIDIA_DRIVER_CAPABILITIES are not;
* the protected pod annotations are exactly the ones our components write, as deploy/protocol.yaml names them, and
  none of the pod owner's scheduling requests; each annotation key of protocol.yaml is classified, so a new key
  needs a decision here;
* the node keys each writer may change are its own protocol keys; the ServiceAccount names are the workloads';
* the toggle-Jobs policy's account, socket folder and namespace are the ones deploy/jobs and the controller use (the
  CEL itself runs in tests/integration/test_admission_policy.py);
* the five bindings reference the ConfigMap in its namespace and deny while it is missing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import yaml

from adapters.protocolfile import load_protocol
from domain.gpu import GpuUuid
from domain.runtime.limits import limit_envs, mig_envs
from domain.runtime.types.allocation import GrantedGpu
from domain.runtime.types.devices import MigInstanceInfo

REPO = Path(__file__).resolve().parents[2]
ADMISSION = REPO / "deploy" / "admission"
PROTOCOL = load_protocol(REPO / "deploy" / "protocol.yaml")
KEYS = PROTOCOL.annotations
WRITTEN_ON_PODS = {KEYS.pod_plan, KEYS.pod_allocated, KEYS.node_protocol}
"""Pod annotations our components write: plan (scheduler), allocated (device plugin), fingerprint (own Pod)."""
OWNER_SET = {KEYS.pod_policy, KEYS.pod_gpu_models, KEYS.pod_gpu_uuids, KEYS.pod_gpu_uuids_exclude,
             KEYS.pod_gpu_topology}
"""Pod annotations the pod's owner sets: scheduling requests."""
NODE_ONLY = {KEYS.node_inventory, KEYS.node_exporter_protocol, KEYS.node_state, KEYS.node_toggle}


def _objects() -> list[dict[str, Any]]:
    kubectl = Path(sys.executable).parent / "kubectl"
    text = subprocess.run([str(kubectl), "kustomize", str(ADMISSION)], capture_output=True, text=True, check=True,
                          timeout=60).stdout
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _params() -> dict[str, str]:
    data: dict[str, str] = yaml.safe_load((ADMISSION / "01-params.yaml").read_text())["data"]
    return data


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _denied(name: str, params: dict[str, str]) -> bool:
    return name in _csv(params["denied-env-names"]) or any(
        name.startswith(p) for p in _csv(params["denied-env-prefixes"]))


def test_every_variable_the_runtime_answers_is_denied() -> None:
    params = _params()
    grants = [GrantedGpu(i, GpuUuid(f"GPU-{i}"), 250 + i, (i + 1) * 2**30) for i in range(3)]
    instances = [MigInstanceInfo(gpu_index=i, gpu_uuid=GpuUuid(f"GPU-{i}"), gpu_instance_id=1, compute_instance_id=0,
                                 profile="3g.40gb", start=0, size=4, compute_slices=3, memory_bytes=40 * 2**30,
                                 uuid=f"MIG-{i}") for i in range(2)]
    names = {*limit_envs(pod_uid="u", container="c", grants=grants),
             *mig_envs(pod_uid="u", container="c", instances=instances)}
    assert {"NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_MEMORY_LIMIT_2", "CUDA_DEVICE_SM_LIMIT"} <= names
    assert [n for n in sorted(names) if not _denied(n, params)] == []
    for hami in ("CUDA_DISABLE_CONTROL", "CUDA_DEVICE_MEMORY_LIMIT", "GPU_CORE_UTILIZATION_POLICY"):
        assert _denied(hami, params)
    for allowed in ("CUDA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "LJRK_LOG_LEVEL", "PATH"):
        assert not _denied(allowed, params)


def test_protected_pod_keys_are_the_ones_our_components_write() -> None:
    params = _params()
    protected = {params["pod-plan"], params["pod-allocated"], params["pod-protocol"]}
    assert protected == WRITTEN_ON_PODS
    assert not protected & OWNER_SET
    declared = {getattr(KEYS, field.name) for field in attrs.fields(type(KEYS))}
    assert declared == WRITTEN_ON_PODS | OWNER_SET | NODE_ONLY, "classify each new annotation key here"


def test_node_writers_may_change_only_their_own_keys_and_accounts_are_the_workloads() -> None:
    params = _params()
    assert (params["node-inventory"], params["node-protocol"]) == (KEYS.node_inventory, KEYS.node_protocol)
    assert params["node-exporter-protocol"] == KEYS.node_exporter_protocol
    assert (params["node-state"], params["node-toggle"]) == (KEYS.node_state, KEYS.node_toggle)
    for component, key in (("scheduler", "scheduler-account"), ("deviceplugin", "device-plugin-account"),
                           ("exporter", "exporter-account"), ("controller", "controller-account")):
        accounts = {doc["metadata"]["name"] for doc in yaml.safe_load_all(
            (REPO / "deploy" / component / "01-rbac.yaml").read_text()) if doc and doc["kind"] == "ServiceAccount"}
        assert params[key] in accounts, component


def test_bindings_use_the_parameter_configmap_and_deny_without_it() -> None:
    objects = _objects()
    [configmap] = [o for o in objects if o["kind"] == "ConfigMap"]
    policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"}
    bindings = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert set(policies) == {b["spec"]["policyName"] for b in bindings} == {
        "lj-runtimekit-gpu-env", "lj-runtimekit-pod-annotations", "lj-runtimekit-node-writes",
        "lj-runtimekit-toggle-jobs", "lj-runtimekit-resource-slices"}
    for binding in bindings:
        assert binding["spec"]["paramRef"] == {"name": configmap["metadata"]["name"],
                                               "namespace": configmap["metadata"]["namespace"],
                                               "parameterNotFoundAction": "Deny"}
        assert binding["spec"]["validationActions"] == ["Deny"]
        policy = policies[binding["spec"]["policyName"]]
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert policy["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
        assert "namespace" not in policy["metadata"]
        assert "namespace" not in binding["metadata"]


def test_toggle_jobs_policy_names_deploy_jobs_account_namespace_and_the_controllers_socket_folder() -> None:
    params = _params()
    jobs = [doc for doc in yaml.safe_load_all((REPO / "deploy" / "jobs" / "01-namespace.yaml").read_text()) if doc]
    [namespace] = [d["metadata"]["name"] for d in jobs if d["kind"] == "Namespace"]
    accounts = [doc["metadata"]["name"] for doc in yaml.safe_load_all(
        (REPO / "deploy" / "jobs" / "02-rbac.yaml").read_text()) if doc and doc["kind"] == "ServiceAccount"]
    assert accounts == [params["job-agent-account"]]
    [policy] = [o for o in _objects() if o["kind"] == "ValidatingAdmissionPolicy"
                and o["metadata"]["name"] == "lj-runtimekit-toggle-jobs"]
    selector = policy["spec"]["matchConstraints"]["namespaceSelector"]["matchLabels"]
    assert selector == {"kubernetes.io/metadata.name": namespace}
    controller = (REPO / "deploy" / "controller" / "03-deployment.yaml").read_text()
    [socket] = [line.split("=", 1)[1] for line in controller.split() if line.startswith("--config-daemon-socket=")]
    assert params["runtime-socket-dir"] == socket.rsplit("/", 1)[0]
    assert f"--namespace={namespace}" in controller


def test_resource_slices_policy_names_the_dra_driver_account_and_the_protocols_driver() -> None:
    params = _params()
    accounts = [doc["metadata"]["name"] for doc in yaml.safe_load_all(
        (REPO / "deploy" / "dra" / "01-rbac.yaml").read_text()) if doc and doc["kind"] == "ServiceAccount"]
    assert accounts == [params["dra-driver-account"]]
    assert params["dra-driver"] == PROTOCOL.dra.driver
