"""``KubernetesCluster.create_event`` de-duplicates like client-go's event recorder, checked on the wire.

An in-process HTTP server stands in for the API server's Event endpoints (no control plane needed) and records
every request. Behaviours covered:

- the first occurrence is one POST (count 1, firstTimestamp = lastTimestamp); each repeat of the same object, type,
  reason and message is one merge PATCH (``application/merge-patch+json``) of that Event's ``count`` (2, 3, …) and
  ``lastTimestamp`` (RFC 3339, UTC), never a new object;
- another message, reason or object UID is another Event (a POST);
- a repeat whose Event is gone (404: expired after the server's event TTL) creates a new Event, whose repeats
  patch the new one;
- a ``with_request_timeout`` view shares the de-duplication with the adapter it came from.
"""

from __future__ import annotations

import contextlib
import http.server
from collections.abc import Iterator
from typing import Any

import attrs

from adapters.kubernetes import KubernetesCluster
from domain.kube.objects import ClusterEvent
from support.fake_apiserver import JsonHandler, serving


@attrs.define
class FakeEvents:
    """What the fake server saw: ``(method, path, content type, body)`` per request; PATCHes of names in
    ``gone`` answer 404."""

    requests: list[tuple[str, str, str, Any]] = attrs.field(factory=list)
    gone: set[str] = attrs.field(factory=set)
    no_patch: bool = False  # answer every PATCH 403, as RBAC without the patch verb does
    stored: dict[str, dict[str, Any]] = attrs.field(factory=dict)


def _handler(state: FakeEvents) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server names it
            body = self.body()
            state.requests.append(("POST", self.path, self.headers.get("Content-Type", ""), body))
            name = f"{body['involvedObject']['name']}.{len(state.stored) + 1}"
            body["metadata"] = {**body.get("metadata", {}), "name": name}
            state.stored[name] = body
            self.answer(201, body)

        def do_PATCH(self) -> None:  # noqa: N802 - http.server names it
            body = self.body()
            state.requests.append(("PATCH", self.path, self.headers.get("Content-Type", ""), body))
            name = self.path.rsplit("/", 1)[-1]
            if state.no_patch:
                self.answer(403, {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "no patch"})
                return
            if name in state.gone or name not in state.stored:
                self.answer(404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": "gone"})
                return
            state.stored[name] = {**state.stored[name], **body}
            self.answer(200, state.stored[name])

    return Handler


@contextlib.contextmanager
def fake_api() -> Iterator[tuple[KubernetesCluster, FakeEvents]]:
    state = FakeEvents()
    with serving(_handler(state)) as api_client:
        yield KubernetesCluster(api_client, request_timeout=5.0), state


FAILED = ClusterEvent("Pod", "web-0", "FailedScheduling", "0 nodes available", namespace="team", type="Warning",
                      uid="uid-1")


def test_repeats_patch_one_event_with_a_rising_count() -> None:
    with fake_api() as (api, state):
        for _ in range(5):  # was: 5 POSTs, 5 Event objects for one pod
            api.create_event(FAILED)
        methods = [(method, path) for method, path, _, _ in state.requests]
        assert methods == [("POST", "/api/v1/namespaces/team/events")] + [
            ("PATCH", "/api/v1/namespaces/team/events/web-0.1")] * 4
        created = state.requests[0][3]
        assert (created["count"], created["firstTimestamp"] == created["lastTimestamp"]) == (1, True)
        patches = [(ctype, body) for method, _, ctype, body in state.requests if method == "PATCH"]
        assert [body["count"] for _, body in patches] == [2, 3, 4, 5]
        assert {ctype for ctype, _ in patches} == {"application/merge-patch+json"}
        assert all(set(body) == {"count", "lastTimestamp"} and body["lastTimestamp"].endswith("Z")
                   for _, body in patches)


def test_another_message_reason_or_uid_is_another_event() -> None:
    with fake_api() as (api, state):
        api.create_event(FAILED)
        api.create_event(attrs.evolve(FAILED, message="1 node(s) had a taint"))
        api.create_event(attrs.evolve(FAILED, reason="Scheduled", type="Normal"))
        api.create_event(attrs.evolve(FAILED, uid="uid-2"))  # the pod was re-created under the same name
        assert [method for method, _, _, _ in state.requests] == ["POST"] * 4


def test_a_repeat_of_an_expired_event_creates_a_new_one() -> None:
    with fake_api() as (api, state):
        api.create_event(FAILED)
        state.gone.add("web-0.1")
        api.create_event(FAILED)  # PATCH 404, then POST
        api.create_event(FAILED)  # patches the new Event
        assert [(method, path.rsplit("/", 1)[-1]) for method, path, _, _ in state.requests] == [
            ("POST", "events"), ("PATCH", "web-0.1"), ("POST", "events"), ("PATCH", "web-0.2")]
        assert state.requests[-1][3]["count"] == 2


def test_without_the_patch_right_every_repeat_is_created_as_before() -> None:
    with fake_api() as (api, state):
        state.no_patch = True
        for _ in range(3):
            api.create_event(FAILED)
        assert [method for method, _, _, _ in state.requests] == ["POST", "PATCH", "POST", "PATCH", "POST"]
        assert len(state.stored) == 3


def test_a_request_timeout_view_shares_the_deduplication() -> None:
    with fake_api() as (api, state):
        api.create_event(FAILED)
        api.with_request_timeout(1.0).create_event(FAILED)
        assert [method for method, _, _, _ in state.requests] == ["POST", "PATCH"]
