"""The optional claim quota component ``deploy/claim-quota`` (in the style of ``test_deploy_dra.py``; no cluster).

Behaviours covered:
- RBAC grants exactly what ``ljrk claim-quota`` calls (namespaces get, resourceclaims list, resourceslices list) to
  its own ServiceAccount, no wildcard;
- the webhook configuration: resourceclaims/status UPDATE of resource.k8s.io/v1 only, failurePolicy Fail, the
  allocation-added matchCondition, the Service's /validate; its two namespaceSelectors follow protocol.yaml's quota
  label keys and never both match one namespace;
- the ConfigMap carries deploy/protocol.yaml; the Deployment runs one replica (Recreate) and its arguments are
  accepted by the command's parser, serving on the port the Service targets, with the Secret's certificate;
- claim-quota is optional: not in deploy/kustomization.yaml's default render, rendered by deploy-all.sh
  --components=claim-quota, and --namespace moves the webhook's Service reference too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.protocolfile import load_protocol
from entrypoints.claim_quota.__main__ import CLI
from support.manifests import deployment_settings, grants, kustomize, one, render

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROTOCOL = load_protocol(DEPLOY / "protocol.yaml")


def _objects() -> list[dict[str, Any]]:
    return kustomize(DEPLOY / "claim-quota")


def test_rbac_grants_exactly_what_the_webhook_calls() -> None:
    rules = grants(_objects(), "lj-runtimekit-claim-quota")
    assert rules == {("", "namespaces", "get"), ("resource.k8s.io", "resourceclaims", "list"),
                     ("resource.k8s.io", "resourceslices", "list")}


def test_webhook_configuration_reviews_added_allocations_in_quota_namespaces() -> None:
    objects = _objects()
    configuration = one(objects, "ValidatingWebhookConfiguration")
    service = one(objects, "Service")
    hooks = configuration["webhooks"]
    assert [h["name"] for h in hooks] == ["cores.claim-quota.lj-runtimekit.io", "memory.claim-quota.lj-runtimekit.io"]
    for hook in hooks:
        assert hook["failurePolicy"] == "Fail"
        assert hook["sideEffects"] == "None"
        assert hook["rules"] == [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"], "operations": ["UPDATE"],
                                  "resources": ["resourceclaims/status"], "scope": "Namespaced"}]
        (condition,) = hook["matchConditions"]
        assert "!has(oldObject.status.allocation)" in condition["expression"]
        assert "has(object.status.allocation)" in condition["expression"]
        assert hook["clientConfig"]["service"] == {"name": service["metadata"]["name"], "namespace": "kube-system",
                                                   "path": "/validate", "port": service["spec"]["ports"][0]["port"]}
    cores, memory = (h["namespaceSelector"]["matchExpressions"] for h in hooks)
    assert cores == [{"key": PROTOCOL.dra.claim_quota_cores, "operator": "Exists"}]
    assert memory == [{"key": PROTOCOL.dra.claim_quota_memory, "operator": "Exists"},
                      {"key": PROTOCOL.dra.claim_quota_cores, "operator": "DoesNotExist"}]


def test_configmap_and_deployment_arguments() -> None:
    objects = _objects()
    config = one(objects, "ConfigMap")
    assert config["data"]["protocol.yaml"] == (DEPLOY / "protocol.yaml").read_text()
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    settings, container = deployment_settings(objects, CLI)
    assert container["command"] == ["ljrk", "claim-quota"]
    (port,) = container["ports"]
    assert (settings.host, settings.port) == ("0.0.0.0", port["containerPort"])
    assert one(objects, "Service")["spec"]["ports"][0]["targetPort"] == port["name"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts[str(settings.tls_cert.parent)] == "tls"
    assert {v["name"]: v.get("secret", {}).get("secretName") for v in pod["volumes"]}["tls"] == \
        "lj-runtimekit-claim-quota-tls"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_claim_quota_is_optional_in_deploy_all() -> None:
    default = kustomize(DEPLOY)
    assert not [o for o in default if "claim-quota" in o["metadata"]["name"]]
    chosen = render("bash", str(DEPLOY / "deploy-all.sh"), "render", "--components=claim-quota",
                     "--namespace", "gpu-system")
    configuration = one(chosen, "ValidatingWebhookConfiguration")
    assert {h["clientConfig"]["service"]["namespace"] for h in configuration["webhooks"]} == {"gpu-system"}
    assert one(chosen, "Deployment")["metadata"]["namespace"] == "gpu-system"
