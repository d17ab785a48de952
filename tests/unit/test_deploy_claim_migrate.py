"""The optional claim-migrate component ``deploy/claim-migrate`` (in the style of ``test_deploy_claim_quota.py``; no
cluster).

Behaviours covered:
- RBAC grants exactly what ``ljrk claim-migrate`` calls (resourceclaimtemplates create and get) to its own
  ServiceAccount;
- the webhook configuration: a MutatingWebhookConfiguration of Pod CREATE (core v1) only, failurePolicy Fail,
  sideEffects NoneOnDryRun, reinvocation Never, the Service's /mutate; its namespaceSelector follows protocol.yaml's
  dra.claim-migrate label (value enabled); its matchCondition names each classic resource of protocol.yaml and the
  MIG resource stem, for containers and init containers, limits and requests;
- the ConfigMap carries deploy/protocol.yaml; the Deployment's arguments are accepted by the command's parser,
  serving on the port the Service targets, with the Secret's certificate;
- claim-migrate is optional: not in deploy/kustomization.yaml's default render, rendered by deploy-all.sh
  --components=claim-migrate, and --namespace moves the webhook's Service reference too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.protocolfile import load_protocol
from domain.kube.translate import mig_stem
from entrypoints.claim_migrate.__main__ import CLI
from support.manifests import deployment_settings, grants, kustomize, one, render

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROTOCOL = load_protocol(DEPLOY / "protocol.yaml")


def _objects() -> list[dict[str, Any]]:
    return kustomize(DEPLOY / "claim-migrate")


def test_rbac_grants_exactly_what_the_webhook_calls() -> None:
    rules = grants(_objects(), "lj-runtimekit-claim-migrate")
    assert rules == {("resource.k8s.io", "resourceclaimtemplates", "create"),
                     ("resource.k8s.io", "resourceclaimtemplates", "get")}


def test_webhook_configuration_mutates_classic_gpu_pods_of_opted_in_namespaces() -> None:
    objects = _objects()
    (hook,) = one(objects, "MutatingWebhookConfiguration")["webhooks"]
    service = one(objects, "Service")
    assert hook["failurePolicy"] == "Fail"
    assert hook["sideEffects"] == "NoneOnDryRun"
    assert hook["reinvocationPolicy"] == "Never"
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                              "resources": ["pods"], "scope": "Namespaced"}]
    assert hook["clientConfig"]["service"] == {"name": service["metadata"]["name"], "namespace": "kube-system",
                                               "path": "/mutate", "port": service["spec"]["ports"][0]["port"]}
    assert hook["namespaceSelector"] == {"matchExpressions": [
        {"key": PROTOCOL.dra.claim_migrate, "operator": "In", "values": ["enabled"]}]}
    (condition,) = hook["matchConditions"]
    expression = condition["expression"]
    names = "[" + ", ".join(f"'{n}'" for n in (PROTOCOL.resources.gpu, PROTOCOL.resources.core,
                                               PROTOCOL.resources.memory)) + "]"
    assert expression.count(f"k in {names}") == 4  # limits and requests, of containers and init containers
    assert expression.count(f"k.startsWith('{mig_stem(PROTOCOL)}')") == 4
    assert "object.spec.containers.exists(" in expression
    assert "object.spec.initContainers.exists(" in expression
    assert expression.count("(") == expression.count(")")


def test_configmap_and_deployment_arguments() -> None:
    objects = _objects()
    config = one(objects, "ConfigMap")
    assert config["data"]["protocol.yaml"] == (DEPLOY / "protocol.yaml").read_text()
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    settings, container = deployment_settings(objects, CLI)
    assert container["command"] == ["ljrk", "claim-migrate"]
    (port,) = container["ports"]
    assert (settings.host, settings.port) == ("0.0.0.0", port["containerPort"])
    assert one(objects, "Service")["spec"]["ports"][0]["targetPort"] == port["name"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts[str(settings.tls_cert.parent)] == "tls"
    assert {v["name"]: v.get("secret", {}).get("secretName") for v in pod["volumes"]}["tls"] == \
        "lj-runtimekit-claim-migrate-tls"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_claim_migrate_is_optional_in_deploy_all() -> None:
    default = kustomize(DEPLOY)
    assert not [o for o in default if "claim-migrate" in o["metadata"]["name"]]
    chosen = render("bash", str(DEPLOY / "deploy-all.sh"), "render", "--components=claim-quota,claim-migrate",
                     "--namespace", "gpu-system")
    (hook,) = one(chosen, "MutatingWebhookConfiguration")["webhooks"]
    assert hook["clientConfig"]["service"]["namespace"] == "gpu-system"
    quota = one(chosen, "ValidatingWebhookConfiguration")
    assert {h["clientConfig"]["service"]["namespace"] for h in quota["webhooks"]} == {"gpu-system"}
    assert {d["metadata"]["namespace"] for d in chosen if d["kind"] == "Deployment"} == {"gpu-system"}
