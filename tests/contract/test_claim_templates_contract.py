"""Contract of the ResourceClaimTemplate port (``ports.claim_templates.ClaimTemplatesApi``), against
InMemoryClaimTemplates and KubernetesClaimTemplates (a real kube-apiserver, marker ``k8s``, the contract suite's
shared control plane).

Behaviours covered:
- ``create_template`` creates the template of a shape (True), answers False for one of that name that exists, and
  creates the same shape in another namespace again; ``read_template`` reads the shape back, None when absent;
- a namespace that does not exist is a ClusterError (in memory: never, namespaces are not modelled; skipped there).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import attrs
import pytest

from adapters.memory.claim_templates import InMemoryClaimTemplates
from domain.dra.migrate import ClaimShape
from ports.claim_templates import ClaimTemplatesApi, ClusterError

SHARE = ClaimShape("gpu-share.lj-runtimekit.io", cores=30, memory_bytes=4 * 2**30)


@attrs.define
class TemplatesUnderTest:
    """The port, ``namespace()`` making a fresh namespace, and ``stored(namespace, name)`` reading a template's
    device request back (None when absent)."""

    api: ClaimTemplatesApi
    namespace: Callable[[], str]
    stored: Callable[[str, str], dict[str, object] | None]
    real: bool


@pytest.fixture(params=["memory", pytest.param("kubernetes", marks=pytest.mark.k8s)])
def templates(request: pytest.FixtureRequest) -> Iterator[TemplatesUnderTest]:
    if request.param == "memory":
        store = InMemoryClaimTemplates()

        def stored_memory(namespace: str, name: str) -> dict[str, object] | None:
            shape = store.templates.get((namespace, name))
            return None if shape is None else shape.template_spec()["spec"]["devices"]["requests"][0]

        yield TemplatesUnderTest(store, lambda: f"ns-{uuid.uuid4().hex[:8]}", stored_memory, real=False)
        return
    from kubernetes import client

    from adapters.kubernetes.claimtemplates import KubernetesClaimTemplates

    plane = request.getfixturevalue("contract_k8s_plane")
    api_client = plane.api_client()
    core = client.CoreV1Api(api_client)
    made: list[str] = []

    def namespace() -> str:
        name = f"ns-{uuid.uuid4().hex[:8]}"
        core.create_namespace({"metadata": {"name": name}})
        made.append(name)
        return name

    def stored(namespace: str, name: str) -> dict[str, object] | None:
        found = client.ResourceV1Api(api_client).list_namespaced_resource_claim_template(namespace).items
        for item in found:
            if item.metadata.name == name:
                request_ = api_client.sanitize_for_serialization(item.spec.spec.devices.requests[0])
                return dict(request_)
        return None

    try:
        yield TemplatesUnderTest(KubernetesClaimTemplates(api_client), namespace, stored, real=True)
    finally:
        for name in made:
            core.delete_namespace(name)
        api_client.close()


def test_create_then_exists_then_another_namespace(templates: TemplatesUnderTest) -> None:
    first, second = templates.namespace(), templates.namespace()
    assert templates.api.create_template(first, SHARE) is True
    assert templates.api.create_template(first, SHARE) is False
    assert templates.api.create_template(second, SHARE) is True
    assert templates.stored(first, SHARE.template_name) == {"name": "gpu", "exactly": {
        "deviceClassName": "gpu-share.lj-runtimekit.io", "allocationMode": "ExactCount", "count": 1,
        "capacity": {"requests": {"cores": "30", "memory": "4Gi"}}}}
    assert templates.stored(first, "absent") is None
    assert templates.api.read_template(first, SHARE.template_name) == SHARE
    assert templates.api.read_template(first, "absent") is None


def test_a_missing_namespace_is_a_cluster_error(templates: TemplatesUnderTest) -> None:
    if not templates.real:
        pytest.skip("the in-memory port does not model namespaces")
    with pytest.raises(ClusterError):
        templates.api.create_template(f"absent-{uuid.uuid4().hex[:8]}", SHARE)
