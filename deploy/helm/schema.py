"""The chart's ``values.schema.json`` (written by deploy/helm/generate.py): Helm checks the values against it at
install, upgrade, template and lint time and refuses a bad one naming its path. The scheduling policies are the
scheduler's own registry's (``domain.scheduling.registry.POLICIES``), so the enum cannot fall behind it."""

from __future__ import annotations

from typing import Any

from domain.scheduling.registry import POLICIES

DNS_LABEL = "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
QUALIFIED_NAME = f"^({DNS_SUBDOMAIN}/)?{NAME}$"
EXTENDED_RESOURCE = {
    "type": "string",
    "description": "an extended resource name, `<domain>/<name>`, the domain not kubernetes.io's.",
    "allOf": [{"pattern": f"^{DNS_SUBDOMAIN}/{NAME}$"}, {"not": {"pattern": r"(^|\.)kubernetes\.io/"}}],
}
ER_TEXT = EXTENDED_RESOURCE["description"]
QUANTITY = r"^([1-9][0-9]*|[0-9]+\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"


def _string(description: str, pattern: str | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "description": description}
    if pattern:
        schema["pattern"] = pattern
    return schema


def _workload(name: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "enabled": {"type": "boolean", "description": f"Install the {name}."},
        "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"},
                         "description": "The pods' spec.nodeSelector."},
        "tolerations": {"type": "array", "items": {"type": "object"}, "description": "The pods' spec.tolerations."},
        "priorityClassName": _string("The pods' priority class (empty: none)."),
        "resources": {"type": "object", "description": "The main container's requests and limits.",
                      "properties": {"requests": {"type": "object"}, "limits": {"type": "object"}},
                      "additionalProperties": False},
        "extraArgs": {"type": "array", "items": {"type": "string"},
                      "description": "Flags appended to the main container's args (`ljrk runtime`, `device-plugin`, "
                                     "`exporter`, `scheduler`, `controller`, `dra-driver`, `claim-quota` or "
                                     "`claim-migrate --help`; empty: none)."},
        **(extra or {}),
    }
    return {"type": "object", "description": f"The {name}.", "properties": properties, "additionalProperties": False}


SCHEDULER = {
    "mode": {"type": "string", "enum": ["extender", "standalone"],
             "description": "extender: kube-scheduler with our extender beside it in one pod; standalone: `ljrk "
                            "scheduler --mode standalone` alone, binding itself (deploy/scheduler/standalone)."},
    "policy": {"type": "string", "enum": list(POLICIES),
               "description": "Default scheduling policy (LJRK_POLICY; a pod's policy annotation overrides it)."},
    "logLevel": {"type": "string", "enum": ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                 "description": "The extender's log level (LJRK_LOG_LEVEL)."},
    "leaderElection": {"type": "object", "additionalProperties": False,
                       "description": "kube-scheduler's leader election (its Lease in `namespace`).",
                       "properties": {"enabled": {"type": "boolean", "description": "leaderElect."}}},
    "kubeSchedulerImage": _string("The kube-scheduler image the extender runs beside."),
    "kubeSchedulerResources": {"type": "object", "description": "The kube-scheduler container's resources."},
}


def _webhook(name: str, service: str, doc: str) -> dict[str, Any]:
    """A webhook component (deploy/helm/webhooks.py): a workload with its serving certificate's settings."""
    secret = f"{service}-tls"
    certificate = {
        "type": "object", "additionalProperties": False,
        "description": f"The serving certificate of Service {service}. Default: the chart makes a CA and a certificate "
                       f"into the Secret {secret} and keeps them on upgrade (docs/helm.md#admission-webhooks).",
        "properties": {
            "secretName": _string(f"A Secret of yours in `namespace` holding tls.crt and tls.key (give caBundle "
                                  f"too); with certManager, the Secret cert-manager writes (empty: {secret}).",
                                  f"^({DNS_SUBDOMAIN})?$"),
            "caBundle": _string("Base64 PEM of the CA that signed secretName's tls.crt (needed with secretName).",
                                r"^[A-Za-z0-9+/=]*$"),
            "certManager": {"type": "object", "additionalProperties": False,
                            "description": "cert-manager makes the certificate and injects its CA.",
                            "properties": {"issuer": {
                                "type": "object", "additionalProperties": False,
                                "description": "The cert-manager issuer signing it (its Secret must carry ca.crt).",
                                "properties": {
                                    "name": _string("The issuer's name (empty: no cert-manager).",
                                                    f"^({DNS_SUBDOMAIN})?$"),
                                    "kind": {"type": "string", "enum": ["Issuer", "ClusterIssuer"],
                                             "description": "Issuer (in `namespace`) or ClusterIssuer."}}}}}}}
    return _workload(f"{name}; needs dra.enabled; off by default ({doc})", {"certificate": certificate})


PROTOCOL = {
    "type": "object",
    "description": "The protocol constants: every component's ConfigMap carries them as protocol.yaml.",
    "required": ["version", "resources", "memory-unit", "node-label", "scheduler-name", "annotations"],
    "additionalProperties": False,
    "properties": {
        "version": {"type": "integer", "const": 1, "description": "Protocol format version."},
        "resources": {"type": "object", "description": "The extended resource names.", "additionalProperties": False,
                      "required": ["gpu", "core", "memory"],
                      "properties": {key: {**EXTENDED_RESOURCE, "description": f"The {what} resource name: {ER_TEXT}"}
                                     for key, what in (("gpu", "whole-GPU"), ("core", "GPU core percentage"),
                                                       ("memory", "GPU memory"))}},
        "memory-unit": _string("What one unit of the memory resource is: a positive quantity (1Gi).", QUANTITY),
        "node-label": _string("The node label that enables a node for GPU sharing.", QUALIFIED_NAME),
        "scheduler-name": _string("The schedulerName pods choose the scheduler by.", DNS_SUBDOMAIN.join("^$")),
        "annotations": {"type": "object", "description": "Node and pod annotation keys.",
                        "additionalProperties": _string("An annotation key.", QUALIFIED_NAME)},
        "inventory-stale-seconds": {"type": "integer", "minimum": 1,
                                    "description": "Age after which a node's inventory counts as stale."},
        "enforcement-label": _string("The node label saying what enforces a GPU share.", QUALIFIED_NAME),
        "dra": {"type": "object", "description": "The DRA driver's name and DeviceClass names (deploy/dra).",
                "additionalProperties": False,
                "properties": {
                    "driver": _string("The DRA driver name.", DNS_SUBDOMAIN.join("^$")),
                    "device-class-gpu": _string("The whole-GPU DeviceClass.", DNS_SUBDOMAIN.join("^$")),
                    "device-class-share": _string("The GPU-share DeviceClass.", DNS_SUBDOMAIN.join("^$")),
                    "device-class-mig": _string("The MIG DeviceClass pattern, {profile} where the profile goes.",
                                                r"^[-a-z0-9.]*\{profile\}[-a-z0-9.]*$"),
                    "claim-quota-cores": _string("The Namespace label limiting its DRA claims' cores (percent of "
                                                 "one GPU; docs/quota.md).", QUALIFIED_NAME),
                    "claim-quota-memory": _string("The Namespace label limiting its DRA claims' memory (a "
                                                  "quantity; docs/quota.md).", QUALIFIED_NAME),
                    "claim-migrate": _string("The Namespace label (value enabled) opting it into the claim-migrate "
                                             "webhook (docs/migrate.md).", QUALIFIED_NAME),
                }},
    },
}

SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "lj-runtimekit chart values",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "namespace": _string("Namespace of every namespaced object (the toggle Jobs' lj-runtimekit-jobs aside).",
                             DNS_LABEL),
        "image": {"type": "object", "description": "Our images: `<registry>/<component>:<tag>`.",
                  "additionalProperties": False,
                  "properties": {"registry": _string("Registry and path prefix of our images."),
                                 "tag": _string("Tag of our images.", r"^[\w][\w.-]{0,127}$")}},
        "protocol": PROTOCOL,
        "runtime": _workload("node Runtime (DaemonSet)"),
        "deviceplugin": _workload("device plugin (DaemonSet)"),
        "exporter": _workload("exporter (DaemonSet)"),
        "scheduler": _workload("scheduler (Deployment; see mode)", SCHEDULER),
        "controller": _workload("controller (Deployment) and its toggle Jobs' namespace and RBAC"),
        "dra": _workload("DRA driver (DaemonSet on nodes labelled lj-runtimekit.io/dra-driver=true, where the device "
                         "plugin does not run) and its DeviceClasses; off by default (docs/dra.md)"),
        "claimQuota": _webhook("DRA claim quota ValidatingWebhook (Deployment)", "lj-runtimekit-claim-quota",
                               "docs/quota.md"),
        "claimMigrate": _webhook("claim-migrate MutatingWebhook (Deployment)", "lj-runtimekit-claim-migrate",
                                 "docs/migrate.md"),
        "admission": {"type": "object", "description": "The ValidatingAdmissionPolicies (Kubernetes >= 1.30).",
                      "additionalProperties": False,
                      "properties": {"enabled": {"type": "boolean", "description": "Install the admission policies."}}},
    },
}
