"""The optional DRA component ``deploy/dra`` (in the style of ``test_deploy_manifests.py``; no cluster needed).

Behaviours covered:
- RBAC grants exactly what ``ljrk dra-driver`` calls (resourceslices create/update/delete/list/watch,
  resourceclaims get/list/watch, nodes get) to its own ServiceAccount, no wildcard;
- the DeviceClasses: whole GPU (extendedResourceName = the protocol's whole-GPU resource), GPU share, and one per
  MIG profile of the profile tables, named by protocol.yaml's dra: keys and selecting the protocol's driver;
- the ConfigMap carries deploy/protocol.yaml; the DaemonSet's arguments, expanded from its env and ConfigMap, are
  accepted by the command's parser and settings; it runs only on DRA-labelled enabled nodes;
- dra is optional: not in deploy/kustomization.yaml's default render, rendered by deploy-all.sh --components=dra.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from adapters.protocolfile import load_protocol
from domain.kube.protocol import mig_device_class
from domain.mig.profiles import MIG_MODELS
from entrypoints.dra_driver.__main__ import CLI
from support.manifests import kubectl, kustomize, render

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROTOCOL = load_protocol(DEPLOY / "protocol.yaml")






def _dra() -> list[dict[str, Any]]:
    return kustomize(DEPLOY / "dra")


def _rules(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_rbac_grants_exactly_what_the_driver_calls() -> None:
    objects = _dra()
    (role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    assert _rules(role) == {
        *(("resource.k8s.io", "resourceslices", v) for v in ("create", "update", "delete", "list")),
        ("resource.k8s.io", "resourceclaims", "get"),
        ("", "nodes", "get"),
    }
    (binding,) = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "lj-runtimekit-dra-driver",
                                    "namespace": "kube-system"}]


def test_device_classes_follow_the_protocol_and_the_mig_tables() -> None:
    classes = {o["metadata"]["name"]: o["spec"] for o in _dra() if o["kind"] == "DeviceClass"}
    dra = PROTOCOL.dra
    profiles = {p.name for model in MIG_MODELS.values() for p in model.profiles}
    assert set(classes) == {dra.device_class_gpu, dra.device_class_share,
                            *(mig_device_class(dra, p) for p in profiles)}
    assert classes[dra.device_class_gpu]["extendedResourceName"] == PROTOCOL.resources.gpu
    assert "extendedResourceName" not in classes[dra.device_class_share]
    for spec in classes.values():
        (selector,) = spec["selectors"]
        assert selector["cel"]["expression"].startswith(f'device.driver == "{dra.driver}" && ')
    for profile in profiles:
        expression = classes[mig_device_class(dra, profile)]["selectors"][0]["cel"]["expression"]
        # type first: reading the profile of a whole-GPU device (none) is a CEL error failing the scheduler's filter
        assert expression.endswith(f'.type == "mig" && device.attributes["{dra.driver}"].profile == "{profile}"')


def test_configmap_carries_the_protocol_and_the_daemonset_arguments_parse() -> None:
    objects = _dra()
    (config,) = [o for o in objects if o["kind"] == "ConfigMap"]
    assert config["data"]["protocol.yaml"] == (DEPLOY / "protocol.yaml").read_text()
    (daemonset,) = [o for o in objects if o["kind"] == "DaemonSet"]
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["ljrk", "dra-driver"]
    values = {e["name"]: config["data"][e["valueFrom"]["configMapKeyRef"]["key"]]
              for e in container["env"] if "configMapKeyRef" in e.get("valueFrom", {})}
    values["NODE_NAME"] = "node-1"
    argv = [re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], a) for a in container["args"]]
    settings = CLI.settings_from(CLI.parser().parse_args(argv))
    assert (settings.node_name, settings.unhealthy) == ("node-1", "taint")
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    writable = {host[m["name"]] for m in container["volumeMounts"]
                if m["name"] in host and m["mountPath"] == host[m["name"]] and not m.get("readOnly", False)}
    assert {str(settings.plugins_registry), str(settings.plugins_dir), str(settings.cdi_dir)} <= writable
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [
        {"key": PROTOCOL.node_label, "operator": "Exists"},
        {"key": "lj-runtimekit.io/dra-driver", "operator": "In", "values": ["true"]}]}]


def test_dra_is_optional_in_deploy_all() -> None:
    default = kustomize(DEPLOY)
    assert not [o for o in default if o["kind"] == "DeviceClass" or "dra-driver" in o["metadata"]["name"]]
    chosen = render("bash", str(DEPLOY / "deploy-all.sh"), "render", "--components=dra")
    assert {o["kind"] for o in chosen} >= {"DeviceClass", "DaemonSet", "ClusterRole"}


def test_a_node_runs_the_dra_driver_or_the_device_plugin_never_both() -> None:
    def terms(component: str) -> list[dict[str, Any]]:
        [daemonset] = [o for o in render(kubectl(), "kustomize", str(DEPLOY / component)) if o["kind"] == "DaemonSet"]
        affinity = daemonset["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
        selector = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert len(selector) == 1, component  # one term: its expressions are ANDed
        expressions: list[dict[str, Any]] = selector[0]["matchExpressions"]
        return expressions

    label = "lj-runtimekit.io/dra-driver"
    assert {"key": label, "operator": "In", "values": ["true"]} in terms("dra")
    assert {"key": label, "operator": "NotIn", "values": ["true"]} in terms("deviceplugin")
