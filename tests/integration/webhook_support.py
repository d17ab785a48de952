"""What the admission webhooks' tests share (claim-quota, claim-migrate): a CA and a serving certificate for
127.0.0.1 (openssl, through ``k8s_harness.make_pki``: :func:`webhook_pki`), HTTPS GET/POST verified against that CA,
and for the live tests a webhook's ServiceAccount with only its deploy RBAC (:func:`account_kubeconfig`), the
webhook served in-process on a loopback port (:func:`serving`) and the GPUs our DRA driver publishes
(:func:`gpu_devices`)."""

from __future__ import annotations

import base64
import contextlib
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from k8s_harness import ControlPlane, free_ports, make_pki, write_kubeconfig

from domain.dra.slices import Capacity, Device, RequestPolicy, ResourceSlice, SliceContent
from support.k8s_nodes import make_schedulable
from support.polling import eventually

REPO = Path(__file__).resolve().parents[2]
GI = 2**30


def webhook_pki(folder: Path) -> tuple[Path, Path, Path]:
    """(CA, serving certificate, key) for 127.0.0.1, made in ``folder``."""
    ca, crt, key, _ = make_pki(folder)
    return ca, crt, key


def _context(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


def get(url: str, ca: Path) -> tuple[int, bytes]:
    """(status, body) of an HTTPS GET."""
    try:
        with urllib.request.urlopen(url, context=_context(ca), timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def post(url: str, body: bytes, ca: Path) -> tuple[int, bytes]:
    """(status, body) of an HTTPS POST of JSON ``body``."""
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, context=_context(ca), timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def account_kubeconfig(plane: ControlPlane, component: str) -> Path:
    """A kubeconfig of ServiceAccount ``lj-runtimekit-<component>`` (kube-system) with the RBAC of ``kubectl
    kustomize deploy/<component>`` applied (its rights only)."""
    from kubernetes import client, utils

    kubectl = Path(sys.executable).parent / "kubectl"
    rendered = subprocess.run([str(kubectl), "kustomize", str(REPO / "deploy" / component)], check=True,
                              capture_output=True, text=True, timeout=60).stdout
    api_client = plane.api_client()
    try:
        for document in yaml.safe_load_all(rendered):
            if document and document["kind"] in {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}:
                utils.create_from_dict(api_client, document)
        token = client.CoreV1Api(api_client).create_namespaced_service_account_token(
            f"lj-runtimekit-{component}", "kube-system", {"spec": {"expirationSeconds": 3600}}).status.token
    finally:
        api_client.close()
    path = plane.workdir / f"{component}.kubeconfig"
    write_kubeconfig(path, plane.host, plane.ca_file, token)
    return path


@contextlib.contextmanager
def serving(main: Callable[..., int], args: Sequence[str], pki: tuple[Path, Path, Path], name: str) -> Iterator[int]:
    """The webhook ``main`` (an entry point's, taking ``stop``) serving on a free loopback port with ``pki``'s
    certificate and ``args``; yields the port once ``/healthz`` answers; stopped at exit, asserting exit code 0."""
    ca, crt, key = pki
    port = free_ports(1)[0]
    stop = threading.Event()
    codes: list[int] = []
    argv = ["--listen", f"127.0.0.1:{port}", "--tls-cert", str(crt), "--tls-key", str(key), *args]
    thread = threading.Thread(target=lambda: codes.append(main(argv, stop=stop)), name=name, daemon=True)
    thread.start()
    eventually(lambda: codes or get(f"https://127.0.0.1:{port}/healthz", ca)[0] == 200,
               what=f"{name}'s /healthz", ignoring=(OSError,))
    assert not codes, f"{name} exited with {codes}"
    try:
        yield port
    finally:
        stop.set()
        thread.join(timeout=30)
    assert codes == [0]


def gpu_devices(count: int = 4) -> tuple[Device, ...]:
    """``count`` 40Gi GPUs as ``ljrk dra-driver`` publishes them (type gpu, consumable cores and memory)."""
    cores = RequestPolicy(default=100, minimum=1, maximum=100, step=1)
    memory = RequestPolicy(default=40 * GI, minimum=GI, maximum=40 * GI, step=GI)
    return tuple(Device(f"gpu-{i}", attributes={"type": "gpu"},
                        capacity={"cores": Capacity(100, cores), "memory": Capacity(40 * GI, memory)},
                        allow_multiple_allocations=True) for i in range(count))


def dra_node(api_client: Any, node: str, driver: str) -> None:
    """Node ``node`` without kubelet, schedulable, with ``driver``'s slice of :func:`gpu_devices`, and the shipped
    DeviceClasses (``deploy/dra/04-deviceclasses.yaml``)."""
    from kubernetes import client

    from adapters.kubernetes.resourceslices import KubernetesResourceSlices

    core = client.CoreV1Api(api_client)
    core.create_node({"metadata": {"name": node}})
    make_schedulable(core, node, {"cpu": "8", "memory": "32Gi", "pods": "110"})
    for document in yaml.safe_load_all((REPO / "deploy" / "dra" / "04-deviceclasses.yaml").read_text()):
        if document:
            client.ResourceV1Api(api_client).create_device_class(document)
    KubernetesResourceSlices(api_client).create_resource_slice(
        ResourceSlice(f"{node}-gpus", driver, node, 1, 1, SliceContent(gpu_devices())))


def register_webhook(api_client: Any, component: str, url: str, ca: Path) -> None:
    """Create ``deploy/<component>/05-webhook.yaml``'s webhook configuration (validating or mutating) with every
    webhook's ``clientConfig`` pointing at ``url``, trusting ``ca``."""
    from kubernetes import client

    configuration = yaml.safe_load((REPO / "deploy" / component / "05-webhook.yaml").read_text())
    bundle = base64.b64encode(ca.read_bytes()).decode()
    for hook in configuration["webhooks"]:
        hook["clientConfig"] = {"url": url, "caBundle": bundle}
    admission = client.AdmissionregistrationV1Api(api_client)
    if configuration["kind"] == "MutatingWebhookConfiguration":
        admission.create_mutating_webhook_configuration(configuration)
    else:
        admission.create_validating_webhook_configuration(configuration)
