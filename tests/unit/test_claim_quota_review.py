"""The claim quota webhook's AdmissionReview handling (``entrypoints.claim_quota.review``) and its command line.

Behaviours covered:
- an allocation within quota is answered allowed with the request's uid; one over quota is refused with 403, reason
  Forbidden and the gate's over-quota message;
- a write that adds no allocation (none in the new object, or one already in the old) is allowed without asking;
- the namespace of the request stands in for an object without one;
- a malformed review (not JSON, another kind, no uid, no object, an object that is no claim) raises ReviewError
  naming the field;
- ``ljrk claim-quota`` is registered; its flags: --tls-cert/--tls-key required, a bad --pending-ttl or --listen
  is a usage error naming the flag.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from domain.dra.claims import ClaimAllocation
from entrypoints.claim_quota.__main__ import main
from entrypoints.claim_quota.review import ReviewError, review
from entrypoints.cli import COMMANDS
from services.claim_quota.gate import Verdict

DRIVER = "gpu.lj-runtimekit.io"


def _claim(allocated: bool, namespace: str | None = "team") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "c", "uid": "uid-c"}
    if namespace is not None:
        meta["namespace"] = namespace
    obj: dict[str, Any] = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta}
    if allocated:
        obj["status"] = {"allocation": {"devices": {"results": [
            {"request": "r", "driver": DRIVER, "pool": "n1", "device": "gpu-0",
             "consumedCapacity": {"cores": "30", "memory": "4Gi"}}]}}}
    return obj


def _body(new: dict[str, Any] | None, old: dict[str, Any] | None = None, **overrides: Any) -> bytes:
    request: dict[str, Any] = {"uid": "req-1", "namespace": "team", "operation": "UPDATE", "object": new,
                               "oldObject": old, "subResource": "status"}
    review_doc: dict[str, Any] = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                  "request": request}
    review_doc.update(overrides)
    return json.dumps(review_doc).encode()


class Gate:
    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict
        self.seen: list[ClaimAllocation] = []

    def __call__(self, claim: ClaimAllocation) -> Verdict:
        self.seen.append(claim)
        return self.verdict


def test_allowed_and_refused_answers_carry_the_uid_and_message() -> None:
    gate = Gate(Verdict(True))
    answer = json.loads(review(_body(_claim(True), _claim(False)), gate))
    assert answer == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "response": {"uid": "req-1", "allowed": True}}
    assert gate.seen[0].key == "team/c"
    assert gate.seen[0].results[0].consumed == {"cores": "30", "memory": "4Gi"}
    refusing = Gate(Verdict(False, "ResourceClaim team/c is over quota in namespace team: ..."))
    answer = json.loads(review(_body(_claim(True), _claim(False)), refusing))
    assert answer["response"] == {"uid": "req-1", "allowed": False, "status": {
        "code": 403, "reason": "Forbidden", "message": "ResourceClaim team/c is over quota in namespace team: ..."}}


def test_writes_adding_no_allocation_are_allowed_without_asking() -> None:
    gate = Gate(Verdict(False, "no"))
    for body in (_body(_claim(False), _claim(False)), _body(_claim(True), _claim(True)),
                 _body(_claim(False), _claim(True))):
        assert json.loads(review(body, gate))["response"]["allowed"] is True
    assert gate.seen == []


def test_request_namespace_stands_in_for_a_missing_one() -> None:
    gate = Gate(Verdict(True))
    review(_body(_claim(True, namespace=None)), gate)
    assert gate.seen[0].namespace == "team"


@pytest.mark.parametrize(("body", "field"), [
    (b"{", "body: not JSON"),
    (b"[]", "body: must be an AdmissionReview object"),
    (_body(_claim(True), kind="Pod"), "apiVersion/kind"),
    (_body(_claim(True), apiVersion="admission.k8s.io/v1beta1"), "apiVersion/kind"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
     "AdmissionReview.request: missing"),
    (_body(None), "request.object: missing"),
    (_body(_claim(True), request={"uid": "", "object": {}}), "request.uid"),
    (_body("text"), "request.object: must be an object"),  # type: ignore[arg-type]
    (_body({"metadata": "nope"}), "request.object: not a ResourceClaim"),
])
def test_malformed_reviews_name_the_field(body: bytes, field: str) -> None:
    with pytest.raises(ReviewError, match=field.replace(".", r"\.").replace("/", "/")):
        review(body, Gate(Verdict(True)))


def test_command_is_registered_and_bad_flags_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert "claim-quota" in COMMANDS
    assert main(["--tls-key", "k"]) == 2
    assert "--tls-cert" in capsys.readouterr().err
    assert main(["--tls-cert", "c", "--tls-key", "k", "--pending-ttl", "0"]) == 2
    assert "--pending-ttl 0.0: must be > 0" in capsys.readouterr().err
    assert main(["--tls-cert", "c", "--tls-key", "k", "--listen", "nowhere"]) == 2
    assert "--listen" in capsys.readouterr().err
