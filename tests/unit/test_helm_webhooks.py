"""The Helm chart's optional admission webhooks, ``claimQuota`` (deploy/claim-quota) and ``claimMigrate``
(deploy/claim-migrate), rendered with the pinned Helm 4 (test_helm_chart.py's, skipped the same way without it).

Behaviours covered:

* both are off by default: no webhook configuration, Secret or claim-* object in the default render;
* enabled with ``dra.enabled``, a component renders exactly its kustomize folder's objects plus the chart's Secret
  ``<service>-tls`` (tls.crt, tls.key, ca.crt), and each object equals deploy/'s but for the webhooks' caBundle;
  that caBundle, in every webhook of the configuration, is the Secret's ca.crt, and ``openssl verify`` accepts
  tls.crt against it as a server certificate for ``<service>.<namespace>.svc`` and ``...svc.cluster.local``; with
  ``namespace`` set, the Service, the webhooks' clientConfig.service.namespace and the certificate's names follow;
* ``certificate.secretName`` + ``caBundle``: no Secret rendered, the Deployment mounts that Secret, the webhooks
  carry that caBundle; one without the other, or a caBundle beside a cert-manager issuer, fails the render naming
  the values;
* ``certificate.certManager.issuer.name``: a cert-manager Certificate for the Service's names into the Secret the
  Deployment mounts, the configuration annotated ``cert-manager.io/inject-ca-from: <namespace>/<service>`` and
  without caBundle, no Secret of the chart;
* enabled without ``dra.enabled``: the render fails with a message naming both values;
* claim-migrate's matchCondition follows ``protocol.resources`` (a renamed GPU resource and its MIG stem);
* the CA is hashed into the webhook Deployment's config checksum (a new CA rolls its pods);
* an older release's values (before the webhooks, as ``--reuse-values`` hands them over) render without them;
* ``helm lint --strict`` passes with both enabled.

Not covered here (no API server): the Secret kept across ``helm upgrade`` through ``lookup``, and a Secret of that
name that is not the release's refused (test_helm_webhooks_live.py; ``helm template``'s lookup finds nothing, so each
render here makes a new CA).
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_helm_chart import CHART, Key, kustomize, normalised, objects, render, run, template

from support.helm import helm_binary

WEBHOOKS = {"claim-quota": ("claimQuota", "ValidatingWebhookConfiguration"),
            "claim-migrate": ("claimMigrate", "MutatingWebhookConfiguration")}
ON = ["--set", "dra.enabled=true"]
BEFORE_WEBHOOKS = Path(__file__).resolve().parents[1] / "support" / "helm_values_before_webhooks.yaml"
"""The chart's values before either webhook existed (an older release's values)."""


@pytest.fixture(scope="module")
def helm() -> str:
    return helm_binary()


def only(component: str, *args: str) -> list[str]:
    key = WEBHOOKS[component][0]
    return ["--show-only", f"templates/{component}.yaml", *ON, "--set", f"{key}.enabled=true", *args]


def one(rendered: dict[Key, dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [obj for key, obj in rendered.items() if key[1] == kind]
    return found


def mounted_secret(rendered: dict[Key, dict[str, Any]]) -> str:
    volumes = one(rendered, "Deployment")["spec"]["template"]["spec"]["volumes"]
    (name,) = [v["secret"]["secretName"] for v in volumes if "secret" in v]
    return str(name)


def pem(value: str) -> bytes:
    return base64.b64decode(value, validate=True)


def test_webhooks_are_off_by_default(helm: str) -> None:
    rendered = template(helm)
    assert not {k for k in rendered if k[1].endswith("WebhookConfiguration") or k[1] == "Secret"}
    assert not {k for k in rendered if k[3].startswith(("lj-runtimekit-claim-quota", "lj-runtimekit-claim-migrate"))}


@pytest.mark.parametrize("component", WEBHOOKS)
def test_enabled_webhook_is_its_folder_with_a_certificate_signed_by_its_ca_bundle(
        helm: str, component: str, tmp_path: Path) -> None:
    service, kind = f"lj-runtimekit-{component}", WEBHOOKS[component][1]
    chart, tree = template(helm, *only(component)), kustomize(component)
    secret_key = ("v1", "Secret", "kube-system", f"{service}-tls")
    assert sorted(chart) == sorted([*tree, secret_key])
    hooks = one(chart, kind)["webhooks"]
    bundles = {hook["clientConfig"].pop("caBundle") for hook in hooks}
    for key, obj in tree.items():
        if key[1] == kind:
            assert {hook["clientConfig"].pop("caBundle") for hook in obj["webhooks"]} == {""}
        assert normalised(chart[key]) == normalised(obj), key
    secret = chart[secret_key]
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    assert bundles == {secret["data"]["ca.crt"]}  # every webhook, the Secret's CA
    assert mounted_secret(chart) == f"{service}-tls"
    assert verify(tmp_path, secret["data"]["ca.crt"], secret["data"]["tls.crt"], f"{service}.kube-system.svc")


def verify(folder: Path, ca: str, cert: str, host: str) -> bool:
    """Whether openssl accepts ``cert`` (base64 PEM) as a server certificate of ``host`` and of ``host`` +
    .cluster.local, issued by ``ca`` (base64 PEM)."""
    (folder / "ca.pem").write_bytes(pem(ca))
    (folder / "tls.pem").write_bytes(pem(cert))
    results = [subprocess.run(["openssl", "verify", "-CAfile", str(folder / "ca.pem"), "-purpose", "sslserver",
                               "-verify_hostname", name, str(folder / "tls.pem")], capture_output=True, text=True,
                              check=False, timeout=30) for name in (host, f"{host}.cluster.local")]
    return all(r.returncode == 0 and r.stdout.strip().endswith(": OK") for r in results)


def test_the_certificate_names_the_namespace_value_and_another_ca_does_not_verify_it(
        helm: str, tmp_path: Path) -> None:
    service = "lj-runtimekit-claim-quota"
    chart = template(helm, *only("claim-quota", "--set", "namespace=gpu-system"))
    (secret,) = [o for k, o in chart.items() if k == ("v1", "Secret", "gpu-system", f"{service}-tls")]
    hooks = one(chart, "ValidatingWebhookConfiguration")["webhooks"]
    assert [h["clientConfig"]["service"]["namespace"] for h in hooks] == ["gpu-system", "gpu-system"]
    assert one(chart, "Service")["metadata"]["namespace"] == "gpu-system"
    ca, cert = secret["data"]["ca.crt"], secret["data"]["tls.crt"]
    assert verify(tmp_path, ca, cert, f"{service}.gpu-system.svc")
    assert not verify(tmp_path, ca, cert, f"{service}.kube-system.svc")  # the names are the namespace's
    other = one(template(helm, *only("claim-quota")), "Secret")["data"]["ca.crt"]
    assert other != ca
    assert not verify(tmp_path, other, cert, f"{service}.gpu-system.svc")  # a render's own CA, no other


@pytest.mark.parametrize("component", WEBHOOKS)
def test_a_secret_of_the_users_with_its_ca_bundle(helm: str, component: str) -> None:
    key, kind = WEBHOOKS[component]
    bundle = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()
    chart = template(helm, *only(component, "--set", f"{key}.certificate.secretName=my-webhook-tls",
                                 "--set", f"{key}.certificate.caBundle={bundle}"))
    assert not [k for k in chart if k[1] == "Secret"]
    assert mounted_secret(chart) == "my-webhook-tls"
    assert {hook["clientConfig"]["caBundle"] for hook in one(chart, kind)["webhooks"]} == {bundle}
    missing = run([helm, "template", "lj-runtimekit", str(CHART),
                   *only(component, "--set", f"{key}.certificate.secretName=my-webhook-tls")], check=False)
    assert missing.returncode != 0
    assert (f'{key}.certificate.caBundle is empty but {key}.certificate.secretName is "my-webhook-tls"'
            in missing.stderr), missing.stderr


@pytest.mark.parametrize("component", WEBHOOKS)
def test_cert_manager_makes_the_certificate_and_injects_its_ca(helm: str, component: str) -> None:
    key, kind = WEBHOOKS[component]
    service = f"lj-runtimekit-{component}"
    chart = template(helm, *only(component, "--set", "namespace=gpu-system", "--set",
                                 f"{key}.certificate.certManager.issuer.name=webhook-ca", "--set",
                                 f"{key}.certificate.certManager.issuer.kind=ClusterIssuer"))
    assert not [k for k in chart if k[1] == "Secret"]
    certificate = chart[("cert-manager.io/v1", "Certificate", "gpu-system", service)]
    assert certificate["spec"] == {
        "secretName": f"{service}-tls",
        "dnsNames": [f"{service}.gpu-system.svc", f"{service}.gpu-system.svc.cluster.local"],
        "issuerRef": {"name": "webhook-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}}
    assert mounted_secret(chart) == f"{service}-tls"
    configuration = one(chart, kind)
    assert configuration["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"gpu-system/{service}"}
    assert all("caBundle" not in hook["clientConfig"] for hook in configuration["webhooks"])


@pytest.mark.parametrize("component", WEBHOOKS)
def test_a_ca_bundle_that_would_be_ignored_fails_the_render(helm: str, component: str) -> None:
    key = WEBHOOKS[component][0]
    bundle = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()
    alone = run([helm, "template", "lj-runtimekit", str(CHART),
                 *only(component, "--set", f"{key}.certificate.caBundle={bundle}")], check=False)
    assert alone.returncode != 0
    assert f"{key}.certificate.caBundle is set but {key}.certificate.secretName is empty" in alone.stderr, alone.stderr
    issued = run([helm, "template", "lj-runtimekit", str(CHART),
                  *only(component, "--set", f"{key}.certificate.caBundle={bundle}",
                        "--set", f"{key}.certificate.certManager.issuer.name=webhook-ca")], check=False)
    assert issued.returncode != 0
    assert f"{key}.certificate.caBundle is set with certManager.issuer.name" in issued.stderr, issued.stderr


def test_the_ca_is_in_the_webhooks_config_checksum(helm: str) -> None:
    """A new CA rolls the webhook's pods (they would serve a certificate kube-apiserver no longer trusts)."""
    def checksum() -> tuple[str, str]:
        rendered = template(helm, *only("claim-quota"))
        pod = one(rendered, "Deployment")["spec"]["template"]["metadata"]["annotations"]
        return one(rendered, "Secret")["data"]["ca.crt"], pod["lj-runtimekit.io/config-checksum"]

    (ca, first), (other, second) = checksum(), checksum()  # no cluster to look up: each render a new CA
    assert ca != other
    assert first != second


def test_an_older_release_s_values_reused_render_without_the_webhooks(helm: str, tmp_path: Path) -> None:
    """``helm upgrade --reuse-values`` from a release before the webhooks: its values replace the chart's (and are
    validated by the new schema), so ``claimQuota`` and ``claimMigrate`` are absent; the render must not fail."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    old = BEFORE_WEBHOOKS.read_text()
    assert not {"claimQuota", "claimMigrate"} & set(yaml.safe_load(old))
    (chart / "values.yaml").write_text(old)
    rendered = objects(run([helm, "template", "lj-runtimekit", str(chart)]).stdout)
    assert not [k for k in rendered if "Webhook" in k[1] or k[3].startswith("lj-runtimekit-claim-")]
    assert [k for k in rendered if k[1] == "DaemonSet"]


@pytest.mark.parametrize("component", WEBHOOKS)
def test_enabled_without_dra_fails_naming_both_values(helm: str, component: str) -> None:
    key = WEBHOOKS[component][0]
    result = run([helm, "template", "lj-runtimekit", str(CHART), "--set", f"{key}.enabled=true"], check=False)
    assert result.returncode != 0
    assert f"{key}.enabled=true needs dra.enabled=true" in result.stderr, result.stderr
    assert result.stdout == ""
    assert render(helm, "--set", f"{key}.enabled=true", *ON)  # with dra it renders


def test_claim_migrate_condition_follows_the_protocols_resource_names(helm: str) -> None:
    def expression(*args: str) -> str:
        (hook,) = one(template(helm, *only("claim-migrate", *args)), "MutatingWebhookConfiguration")["webhooks"]
        (condition,) = hook["matchConditions"]
        return str(condition["expression"])

    names = "k in ['example.com/gpu', 'alibabacloud.com/gpu-core.percentage', 'example.com/gpu-memory']"
    renamed = expression("--set", "protocol.resources.gpu=example.com/gpu", "--set",
                         "protocol.resources.memory=example.com/gpu-memory")
    assert renamed.count(names) == 4  # limits and requests, of containers and init containers
    assert renamed.count("k.startsWith('example.com/mig-')") == 4  # the MIG stem: the GPU resource's prefix
    assert "'alibabacloud.com/gpu'" not in renamed
    assert "alibabacloud.com/mig-" not in renamed


def test_lint_strict_with_the_webhooks(helm: str) -> None:
    result = run([helm, "lint", "--strict", str(CHART), *ON, "--set", "claimQuota.enabled=true", "--set",
                  "claimMigrate.enabled=true"], check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout
