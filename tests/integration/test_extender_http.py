"""The scheduler's HTTP listener with real requests on 127.0.0.1, over the in-memory cluster (informers running).

Covers: ``/filter`` with ``NodeNames`` (nodeCacheCapable) returns exactly the node our policy chose, with an
empty ``FailedNodes``; the ``Nodes`` NodeList form echoes the kept
node object; a pod without our resources passes untouched; an unschedulable pod gets a real reason per node;
a repeated filter keeps the reservation, and drops it when its node is no longer a candidate; ``/prioritize``
gives the chosen node 10; ``/bind`` binds with the plan in the same write (and reports an error for a pod that no longer
fits); a standby answers with ``Error``; ``/healthz``, ``/readyz``; ``/metrics`` parses with prometheus_client's
parser and shows the booked GPU; malformed bodies (preempt included) → 400, unknown verbs → 404; the standalone
app binds a pod end to end through its informers; verbs reuse one kept-alive connection, an error reply that leaves the
body unread closes it, and stopping ends an idle kept-alive connection at once.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapters.memory.cluster import InMemoryCluster
from domain.kube.objects import ContainerSpec, PodObject
from entrypoints.scheduler.httpserver import KEEP_ALIVE_IDLE
from support.kube_builders import KEYS, PROTOCOL, RES, make_node
from support.polling import eventually
from support.scheduler_replica import SchedulerReplica


class Running(SchedulerReplica):
    cluster: InMemoryCluster

    def __init__(self, mode: str = "extender") -> None:
        super().__init__(InMemoryCluster(), mode=mode)

    def node(self, name: str, count: int = 2) -> None:
        self.cluster.create_node(make_node(name, count, heartbeat=time.time()))
        eventually(lambda: self.service.knows_node(name))

    def pod(self, name: str, limits: dict[str, str], **extra: Any) -> PodObject:
        containers = (ContainerSpec("main", limits=limits),)
        return self.cluster.create_pod(PodObject("", "default", name, containers=containers, **extra))

    def post(self, verb: str, body: object, *, raw: bytes | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}/{verb}", data=data, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            with error:
                return error.code, json.loads(error.read())

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.read().decode()


@pytest.fixture
def running() -> Iterator[Running]:
    r = Running()
    with r.serving():
        yield r


def raw_pod(pod: PodObject) -> dict[str, Any]:
    """The pod as kube-scheduler sends it (core/v1 JSON)."""
    return {
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid,
                     "resourceVersion": pod.resource_version, "annotations": dict(pod.annotations)},
        "spec": {"schedulerName": pod.scheduler_name,
                 "containers": [{"name": c.name, "resources": {"limits": dict(c.limits), "requests": dict(c.limits)}}
                                for c in pod.containers]},
        "status": {"phase": "Pending"},
    }


SHARE = {RES.core: "60", RES.memory: "8"}


def test_filter_returns_exactly_the_chosen_node_and_bind_commits(running: Running) -> None:
    for name in ("n1", "n2", "n3"):
        running.node(name)
    pod = running.pod("a", SHARE)
    status, reply = running.post("filter", {"Pod": raw_pod(pod), "NodeNames": ["n1", "n2", "n3"]})
    assert status == 200
    assert reply["Error"] == ""
    (chosen,) = reply["NodeNames"]
    assert chosen in {"n1", "n2", "n3"}
    assert reply["FailedNodes"] == {}
    _, scores = running.post("prioritize", {"Pod": raw_pod(pod), "NodeNames": ["n1", "n2", "n3"]})
    assert {s["Host"]: s["Score"] for s in scores} == {n: 10 if n == chosen else 0 for n in ("n1", "n2", "n3")}
    status, bound = running.post("bind", {"PodName": "a", "PodNamespace": "default", "PodUID": pod.uid,
                                          "Node": chosen})
    assert (status, bound) == (200, {"Error": ""})
    after = running.cluster.get_pod("default", "a")
    assert after.node_name == chosen
    assert json.loads(after.annotations[KEYS.pod_plan])["node"] == chosen
    eventually(lambda: running.service.reservation(pod.uid) is None)  # the watch confirmed the binding
    assert sum(g.core_used for g in running.service.gpus(chosen)) == 600


def test_nodelist_form_echoes_the_kept_node(running: Running) -> None:
    running.node("n1")
    running.node("n2")
    pod = running.pod("a", SHARE)
    items = [{"metadata": {"name": n, "labels": {"x": n}}} for n in ("n1", "n2")]
    _, reply = running.post("filter", {"Pod": raw_pod(pod), "Nodes": {"items": items}})
    (kept,) = reply["Nodes"]["items"]
    assert kept["metadata"]["labels"] == {"x": kept["metadata"]["name"]}
    assert "NodeNames" not in reply


def test_pods_without_our_resources_pass_untouched(running: Running) -> None:
    pod = running.pod("cpu", {"cpu": "1"})
    _, reply = running.post("filter", {"Pod": raw_pod(pod), "NodeNames": ["x", "y"]})
    assert reply == {"NodeNames": ["x", "y"], "FailedNodes": {}, "Error": ""}


def test_unschedulable_pod_gets_a_reason_per_node(running: Running) -> None:
    running.node("n1", 1)
    pod = running.pod("big", {RES.memory: "40"})
    _, reply = running.post("filter", {"Pod": raw_pod(pod), "NodeNames": ["n1", "ghost"]})
    assert reply["NodeNames"] == []
    assert "exceeds the largest GPU" in reply["FailedNodes"]["n1"]
    assert "unknown to lj-runtimekit" in reply["FailedNodes"]["ghost"]


def test_repeated_filter_keeps_or_moves_the_reservation(running: Running) -> None:
    running.node("n1")
    running.node("n2")
    pod = running.pod("a", SHARE)
    _, first = running.post("filter", {"Pod": raw_pod(pod), "NodeNames": ["n1", "n2"]})
    _, again = running.post("filter", {"Pod": raw_pod(pod), "NodeNames": ["n1", "n2"]})
    assert first["NodeNames"] == again["NodeNames"]
    (chosen,) = first["NodeNames"]
    other = ({"n1", "n2"} - {chosen}).pop()
    _, moved = running.post("filter", {"Pod": raw_pod(pod), "NodeNames": [other]})
    assert moved["NodeNames"] == [other]
    assert sum(g.core_used for g in running.service.gpus(chosen)) == 0


def test_bind_of_a_pod_that_no_longer_fits_reports_an_error(running: Running) -> None:
    running.node("n1", 1)
    pod = running.pod("a", {RES.core: "100", RES.memory: "16"})
    taker = running.pod("b", {RES.core: "100", RES.memory: "16"})
    _, reply = running.post("filter", {"Pod": raw_pod(taker), "NodeNames": ["n1"]})
    assert reply["NodeNames"] == ["n1"]
    _, bound = running.post("bind", {"PodName": "a", "PodNamespace": "default", "PodUID": pod.uid, "Node": "n1"})
    assert "does not fit node n1" in bound["Error"]
    assert running.cluster.get_pod("default", "a").node_name == ""


def test_a_standby_answers_with_an_error(running: Running) -> None:
    running.node("n1")
    running.leader[0] = False
    pod = running.pod("a", SHARE)
    _, reply = running.post("filter", {"Pod": raw_pod(pod), "NodeNames": ["n1"]})
    assert "not the leader" in reply["Error"]
    _, bound = running.post("bind", {"PodName": "a", "PodNamespace": "default", "PodUID": pod.uid, "Node": "n1"})
    assert "not the leader" in bound["Error"]
    assert running.get("/readyz")[0] == 503


def test_health_readiness_and_metrics(running: Running) -> None:
    running.node("n1", 1)
    pod = running.pod("a", SHARE)
    running.post("filter", {"Pod": raw_pod(pod), "NodeNames": ["n1"]})
    running.post("bind", {"PodName": "a", "PodNamespace": "default", "PodUID": pod.uid, "Node": "n1"})
    assert running.get("/healthz") == (200, "ok\n")
    assert running.get("/readyz") == (200, "ok\n")
    status, text = running.get("/metrics")
    assert status == 200
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    gpu = (("gpu_index", "0"), ("gpu_uuid", "GPU-n1-0"), ("model", "A100"), ("node", "n1"))
    assert samples[("lj_runtimekit_scheduler_gpu_core_allocated_milli", gpu)] == 600
    assert samples[("lj_runtimekit_scheduler_decisions_total", (("result", "scheduled"),))] == 1
    assert samples[("lj_runtimekit_scheduler_leader", ())] == 1


def test_malformed_requests(running: Running) -> None:
    assert running.post("filter", None, raw=b"{not json")[0] == 400
    assert running.post("filter", {"Pod": "x", "NodeNames": []})[0] == 400
    assert running.post("bind", {"PodName": ""})[0] == 400
    assert running.post("preempt", {"Pod": "x", "NodeNameToMetaVictims": {}})[0] == 400
    status, reply = running.post("reserve", {})
    assert status == 404
    assert "unknown verb" in reply["Error"]
    assert running.get("/nothing")[0] == 404


def test_verbs_share_one_kept_alive_connection_and_error_replies_close_it(running: Running) -> None:
    assert KEEP_ALIVE_IDLE > 90.0  # outlasts the Go client's idle limit (entrypoints.scheduler.httpserver)
    running.node("n1")
    pod = running.pod("k", SHARE)
    host, port = running.app.http.address
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        body = json.dumps({"Pod": raw_pod(pod), "NodeNames": ["n1"]}).encode()
        replies, sockets = [], []
        for _ in range(3):  # the same filter three times: one connection, one socket
            connection.request("POST", "/filter", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            replies.append((response.status, json.loads(response.read())["NodeNames"], response.version))
            sockets.append(connection.sock)
        assert sockets[0] is not None
        assert sockets == [sockets[0]] * 3
        assert replies == [(200, ["n1"], 11)] * 3
        connection.request("POST", "/reserve", b"{}", {"Content-Type": "application/json"})
        response = connection.getresponse()
        assert (response.status, response.getheader("Connection")) == (404, "close")
        response.read()
        assert connection.sock is None  # the server said close, and http.client closed it
    finally:
        connection.close()


def test_stop_ends_an_idle_kept_alive_connection_at_once() -> None:
    r = Running()
    r.app.start()
    eventually(lambda: r.service.serving)
    host, port = r.app.http.address
    connection = http.client.HTTPConnection(host, port, timeout=10)
    connection.request("GET", "/healthz")
    response = connection.getresponse()
    assert (response.status, response.read()) == (200, b"ok\n")
    started = time.monotonic()
    r.app.stop()  # joins request threads: the idle connection's thread must not wait out KEEP_ALIVE_IDLE
    assert time.monotonic() - started < 5.0
    assert connection.sock is not None
    assert connection.sock.recv(1) == b""  # the server closed it
    connection.close()


def test_standalone_app_binds_through_its_informers() -> None:
    r = Running(mode="standalone")
    r.app.start()
    try:
        eventually(lambda: r.service.serving)
        r.node("n1", 1)
        r.pod("mine", SHARE, scheduler_name=PROTOCOL.scheduler_name)
        r.pod("theirs", SHARE)
        eventually(lambda: r.cluster.get_pod("default", "mine").node_name == "n1")
        assert KEYS.pod_plan in r.cluster.get_pod("default", "mine").annotations
        assert r.cluster.get_pod("default", "theirs").node_name == ""
        assert r.get("/readyz") == (200, "ok\n")
        assert r.post("filter", {})[0] == 404  # no extender verbs in standalone mode
    finally:
        r.app.stop()
    assert not any(t.is_alive() for t in threading.enumerate() if t.name == "scheduler-http")
