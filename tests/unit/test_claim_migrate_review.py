"""The claim-migrate webhook's review flow: AdmissionReview of a Pod CREATE in, the migrator's answer out
(``entrypoints.claim_migrate.review`` over ``services.claim_migrate.migrator`` and the in-memory template port).

Behaviours covered:
- a classic share pod is admitted with a base64 JSONPatch; applying it leaves no classic resource and adds the
  claim; its template is created in the request's namespace (the pod's own may be missing), once per shape;
- a dry run answers the same patch and creates nothing;
- a pod asking nothing classic is admitted without a patch;
- a refusal carries 403 and the domain's message; a template the API cannot create refuses the pod (fail closed),
  so does an existing template asking another shape;
- the names in ``spec.resourceClaims`` and containers with ``resources.claims`` reach the mapping; a generateName
  pod is named by its generateName;
- malformed reviews name the field; the command is registered and bad flags are usage errors.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from adapters.memory.claim_templates import InMemoryClaimTemplates
from domain.dra.migrate import ClaimShape
from domain.kube.protocol import ProtocolConstants
from entrypoints.claim_migrate.__main__ import main
from entrypoints.claim_migrate.review import ReviewError, decode, review
from entrypoints.cli import COMMANDS
from ports.cluster import UnavailableError
from services.claim_migrate.migrator import ClaimMigrator

P = ProtocolConstants()
CORE, MEM, GPU = P.resources.core, P.resources.memory, P.resources.gpu


def _pod(limits: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "main", "image": "busybox",
                                     "resources": {"limits": limits, "requests": dict(limits)}}], **spec}}


def _body(pod: dict[str, Any], *, dry_run: bool = False) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "r1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "team",
        "operation": "CREATE", "dryRun": dry_run, "object": pod}}).encode()


def _answer(body: bytes, migrator: ClaimMigrator) -> dict[str, Any]:
    response: dict[str, Any] = json.loads(review(body, migrator))["response"]
    assert response["uid"] == "r1"
    return response


def _apply(pod: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """A small RFC 6902 applier for add/remove on objects and lists (what the webhook emits)."""
    pod = json.loads(json.dumps(pod))
    for op in patch:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target: Any = pod
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if op["op"] == "remove":
            del target[last]
        elif last == "-":
            target.append(op["value"])
        else:
            target[last] = op["value"]
    return pod


@pytest.fixture
def templates() -> InMemoryClaimTemplates:
    return InMemoryClaimTemplates()


@pytest.fixture
def migrator(templates: InMemoryClaimTemplates) -> ClaimMigrator:
    return ClaimMigrator(protocol=P, templates=templates)


def test_a_share_pod_is_patched_and_its_template_created(migrator: ClaimMigrator,
                                                         templates: InMemoryClaimTemplates) -> None:
    pod = _pod({CORE: "30", MEM: "4", "cpu": "1"})
    response = _answer(_body(pod), migrator)
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    patched = _apply(pod, json.loads(base64.b64decode(response["patch"])))
    resources = patched["spec"]["containers"][0]["resources"]
    assert resources == {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}, "claims": [{"name": "gpu-main"}]}
    assert patched["spec"]["resourceClaims"] == [{"name": "gpu-main",
                                                  "resourceClaimTemplateName": "ljrk-migrate-share-30-4gi"}]
    shape = ClaimShape(P.dra.device_class_share, cores=30, memory_bytes=4 * 2**30)
    assert templates.templates == {("team", "ljrk-migrate-share-30-4gi"): shape}
    assert _answer(_body(pod), migrator)["allowed"] is True  # the template exists: fine
    assert len(templates.templates) == 1


def test_a_dry_run_creates_nothing(migrator: ClaimMigrator, templates: InMemoryClaimTemplates) -> None:
    response = _answer(_body(_pod({GPU: "2"}), dry_run=True), migrator)
    assert response["allowed"] is True
    assert "patch" in response
    assert templates.templates == {}


def test_a_pod_without_classic_resources_is_left_alone(migrator: ClaimMigrator) -> None:
    assert _answer(_body(_pod({"cpu": "1"})), migrator) == {"uid": "r1", "allowed": True}


def test_refusals_carry_the_message(migrator: ClaimMigrator, templates: InMemoryClaimTemplates) -> None:
    response = _answer(_body(_pod({CORE: "30"})), migrator)
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["message"].startswith(f"pod team/p: container main: {CORE}=30 without {MEM}")
    templates.fail = UnavailableError("create resourceclaimtemplate: API server unavailable")
    response = _answer(_body(_pod({GPU: "1"})), migrator)
    assert response["allowed"] is False
    assert response["status"]["message"] == (
        "pod team/p: ResourceClaimTemplate team/ljrk-migrate-gpu-1 cannot be created or read, so the pod is refused "
        "for now; create it again: create resourceclaimtemplate: API server unavailable")


def test_an_existing_template_must_ask_its_shape(migrator: ClaimMigrator, templates: InMemoryClaimTemplates) -> None:
    templates.templates[("team", "ljrk-migrate-gpu-1")] = ClaimShape("old-class.example.com", count=1)
    message = _answer(_body(_pod({GPU: "1"})), migrator)["status"]["message"]
    assert message == ("pod team/p: ResourceClaimTemplate team/ljrk-migrate-gpu-1 exists but does not ask class "
                       "gpu.lj-runtimekit.io, 1 device (it asks class old-class.example.com, 1 device); delete it, the "
                       "webhook makes it again")
    del templates.templates[("team", "ljrk-migrate-gpu-1")]
    assert _answer(_body(_pod({GPU: "1"})), migrator)["allowed"] is True


def test_existing_claims_and_generate_names_reach_the_mapping(migrator: ClaimMigrator) -> None:
    pod = _pod({GPU: "1"}, resourceClaims=[{"name": "gpu-main", "resourceClaimName": "mine"}])
    pod["metadata"] = {"generateName": "job-"}
    message = _answer(_body(pod), migrator)["status"]["message"]
    assert message.startswith("pod team/job-*: spec.resourceClaims[gpu-main]")
    pod = _pod({GPU: "1"})
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "x"}]
    uid, facts, dry_run = decode(_body(pod))
    assert (uid, facts.claimed, facts.pod_claims, dry_run) == ("r1", frozenset({"main"}), None, False)
    assert facts.pod.uid == "r1"
    assert facts.pod.namespace == "team"


@pytest.mark.parametrize(("body", "field"), [
    (b"nope", "body: not JSON"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u"}}',
     "request.object: missing"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", '
     b'"kind": {"kind": "Node"}, "object": {}}}', "request.kind: must be Pod"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", '
     b'"object": {"spec": {"containers": 3}}}}', "request.object: not a Pod: spec.containers"),
])
def test_malformed_reviews_name_the_field(body: bytes, field: str, migrator: ClaimMigrator) -> None:
    with pytest.raises(ReviewError, match=field.replace(".", r"\.")):
        review(body, migrator)


def test_command_is_registered_and_bad_flags_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert "claim-migrate" in COMMANDS
    assert main(["--tls-key", "k"]) == 2
    assert "--tls-cert" in capsys.readouterr().err
    assert main(["--tls-cert", "c", "--tls-key", "k", "--listen", "nowhere"]) == 2
