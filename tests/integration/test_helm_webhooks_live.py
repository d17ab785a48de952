"""The Helm chart's webhook certificate against a real kube-apiserver: kept across ``helm upgrade`` through ``lookup``.

``helm template`` cannot show it (its lookup finds nothing; tests/unit/test_helm_webhooks.py covers the renders), so
this installs the chart with only ``dra`` and ``claimQuota`` (every other component off; no node, no ``--wait``:
the objects are what is checked, not the pods) on etcd + kube-apiserver of k8s_harness.py, then:

1. after ``helm install``: the Secret lj-runtimekit-claim-quota-tls holds ca.crt, tls.crt and tls.key, and both
   webhooks of the ValidatingWebhookConfiguration carry its ca.crt as caBundle, in the Service's namespace;
2. after ``helm upgrade`` with the same values (Helm renders every template again, genCA included): the Secret's
   data and the caBundle are byte for byte those of 1, and the Deployment's config checksum too (no roll);
3. after deleting the Secret and ``helm upgrade`` again: a new CA, in the Secret and the caBundle alike (what the
   docs say renews the certificate), and a new checksum (the pods roll onto it); so 2 held because of the lookup;
4. after ``helm uninstall``, a Secret of that name the release does not own (as deploy-all.sh makes: Opaque, no
   release annotation): ``helm install`` fails naming it instead of serving or overwriting it.

Helm comes from ``$LJRK_HELM`` or ``scripts/kube_platform.py helm-path`` (skipped without it, a failure with
``LJRK_REQUIRE_K8S=1``); the control plane's binaries from conftest.py's ``k8s_bin_dir``.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_harness import ControlPlane, start_control_plane

from support.helm import helm_binary

pytestmark = [pytest.mark.k8s]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "lj-runtimekit"
NAMESPACE = "kube-system"
SECRET = "lj-runtimekit-claim-quota-tls"
OFF = ("runtime", "deviceplugin", "exporter", "scheduler", "controller", "admission")
ONLY = [*(f"--set={c}.enabled=false" for c in OFF), "--set=dra.enabled=true", "--set=claimQuota.enabled=true"]
KUBECTL = str(Path(sys.executable).with_name("kubectl"))


@pytest.fixture(scope="module")
def helm_bin() -> str:
    return helm_binary()


@pytest.fixture(scope="module")
def plane(k8s_bin_dir: Path, helm_bin: str) -> Iterator[ControlPlane]:
    plane = start_control_plane(k8s_bin_dir)
    try:
        yield plane
    finally:
        plane.stop()


class Cluster:
    def __init__(self, plane: ControlPlane, helm_bin: str, work: Path) -> None:
        self.helm_bin = helm_bin
        self.env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig), "HELM_CONFIG_HOME": str(work / "config"),
                    "HELM_CACHE_HOME": str(work / "cache"), "HELM_DATA_HOME": str(work / "data")}

    def run(self, *argv: str) -> str:
        result = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, f"{' '.join(argv[:3])}: {result.stderr}\n{result.stdout}"
        return result.stdout

    def helm(self, verb: str, *values: str) -> None:
        self.run(self.helm_bin, verb, "lj-runtimekit", str(CHART), "--namespace", NAMESPACE, *ONLY, *values)

    def get(self, kind: str, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.run(KUBECTL, "get", kind, name, "-n", namespace, "-o", "json"))
        return found

    def certificate(self) -> tuple[dict[str, str], set[str], str]:
        """The Secret's data, the set of the webhooks' caBundles and the Deployment's config checksum."""
        hooks = self.get("validatingwebhookconfiguration", "lj-runtimekit-claim-quota")["webhooks"]
        assert {h["clientConfig"]["service"]["namespace"] for h in hooks} == {NAMESPACE}
        pod = self.get("deployment", "lj-runtimekit-claim-quota")["spec"]["template"]
        return (dict(self.get("secret", SECRET)["data"]), {h["clientConfig"]["caBundle"] for h in hooks},
                pod["metadata"]["annotations"]["lj-runtimekit.io/config-checksum"])


def test_the_webhook_certificate_is_kept_across_upgrades_and_renewed_without_its_secret(
        plane: ControlPlane, helm_bin: str, tmp_path: Path) -> None:
    cluster = Cluster(plane, helm_bin, tmp_path)
    cluster.helm("install")
    installed = cluster.certificate()
    data, bundles, _ = installed
    assert set(data) == {"ca.crt", "tls.crt", "tls.key"}
    assert bundles == {data["ca.crt"]}
    assert base64.b64decode(data["ca.crt"]).startswith(b"-----BEGIN CERTIFICATE-----")

    cluster.helm("upgrade")
    assert cluster.certificate() == installed  # the lookup kept it: same certificate, caBundle and checksum

    cluster.run(KUBECTL, "delete", "secret", SECRET, "-n", NAMESPACE)
    cluster.helm("upgrade")
    renewed, renewed_bundles, checksum = cluster.certificate()
    assert renewed["ca.crt"] != data["ca.crt"]
    assert renewed_bundles == {renewed["ca.crt"]}
    assert checksum != installed[2]  # the pods roll onto the new certificate
    cluster.run(helm_bin, "uninstall", "lj-runtimekit", "--namespace", NAMESPACE)

    # a Secret of that name the release does not own (deploy-all.sh's, Opaque): the install names it and stops
    cluster.run(KUBECTL, "create", "secret", "generic", SECRET, "-n", NAMESPACE, "--from-literal=tls.crt=x")
    refused = subprocess.run([helm_bin, "install", "lj-runtimekit", str(CHART), "--namespace", NAMESPACE, *ONLY],
                             env=cluster.env, capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode != 0
    assert f"Secret {NAMESPACE}/{SECRET} exists but is not this release's certificate" in refused.stderr, (
        refused.stderr)
    cluster.run(KUBECTL, "delete", "secret", SECRET, "-n", NAMESPACE)
