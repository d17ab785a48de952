"""``ljrk inspect`` end to end on 127.0.0.1: the CLI (``entrypoints.inspect.__main__.main``) over the in-memory
cluster (the container's cluster overridden), reading a running scheduler's ``GET /debug/ledger`` over HTTP.

Covers: with the scheduler's informers caught up, the JSON report shows the holders of each share and no
disagreement, exit 0; the default table and ``-o wide`` (holders, flag messages); ``NODE`` restricts the report
(and the scheduler's view) to that node; an unknown node exits 2 naming it; a flagged node exits 1; a pod written
behind the scheduler's back (a view taken from a scheduler that missed it) shows as a disagreement; the view's
route serves JSON that decodes, other routes are unchanged; an unreachable scheduler, a malformed ``--scheduler``
URL, an unreachable API server and a missing kubeconfig exit 2 with one line on stderr; ``ljrk inspect`` is a
registered command.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dependency_injector import providers

from adapters.httpjson import HttpSchedulerView
from adapters.memory.cluster import InMemoryCluster
from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.inspection.view import VIEW_PATH, SchedulerView, decode_view
from domain.kube.annotations import encode_plan
from domain.kube.objects import ContainerSpec, PodObject
from domain.units import GiB
from entrypoints.cli import COMMANDS
from entrypoints.cli import main as ljrk
from entrypoints.inspect.__main__ import main
from entrypoints.inspect.containers import InspectContainer
from services.scheduler.service import ServiceConfig
from support.kube_builders import KEYS, RES, make_gpus, make_node
from support.polling import eventually
from support.scheduler_replica import SchedulerReplica


class World(SchedulerReplica):
    """An in-memory cluster with a scheduler replica (extender mode, leader) watching it."""

    cluster: InMemoryCluster

    def __init__(self) -> None:
        super().__init__(InMemoryCluster(), config=ServiceConfig(admission_hold_seconds=None))

    def node(self, name: str, count: int = 2, *, heartbeat: float | None = None) -> None:
        self.cluster.create_node(make_node(name, count, heartbeat=time.time() if heartbeat is None else heartbeat))

    def bound(self, name: str, node: str, index: int, core: int, mem_gib: int) -> PodObject:
        """A pod bound by another scheduler with its plan: ``core`` % and ``mem_gib`` GiB on GPU ``index``."""
        limits = {RES.core: str(core), RES.memory: str(mem_gib)}
        pod = self.cluster.create_pod(PodObject("", "default", name, containers=(ContainerSpec("main", limits=limits),),
                                                scheduler_name="other"))
        plan = PodAllocation(pod.uid, node, (ContainerGrant("main", (GpuGrant(index, core * 10, mem_gib * GiB),)),))
        self.cluster.patch_pod_annotations("default", name, {KEYS.pod_plan: encode_plan(plan, make_gpus(node, 2))})
        self.cluster.bind_pod("default", name, uid=pod.uid, node=node)
        return self.cluster.get_pod("default", name)

    def caught_up(self) -> bool:
        """The scheduler books every bound pod of the cluster."""
        with self.service.books() as books:
            counted = set(books.ledger.records())
        return {p.uid for p in self.cluster.list_pods().items if p.node_name} <= counted

    def inspect(self, *argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
        container = InspectContainer()
        container.cluster.override(providers.Object(self.cluster))
        code = main(list(argv), container=container)
        out, err = capsys.readouterr()
        return code, out, err


class FixedView:
    """A scheduler-view source that always returns ``view`` (a scheduler frozen in the past)."""

    def __init__(self, view: SchedulerView) -> None:
        self.view = view

    def fetch(self) -> SchedulerView:
        return self.view


@pytest.fixture
def world() -> Iterator[World]:
    w = World()
    with w.serving():
        yield w


def _json(out: str) -> dict[str, Any]:
    data = json.loads(out)
    assert isinstance(data, dict)
    return data


def test_json_report_agrees_with_the_running_scheduler(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.node("n1")
    world.node("n2", 1)
    world.bound("a", "n1", 0, 60, 8)
    world.bound("b", "n1", 1, 25, 2)
    eventually(world.caught_up)
    code, out, err = world.inspect("-o", "json", "--scheduler", world.url, capsys=capsys)
    assert (code, err) == (0, "")
    data = _json(out)
    assert data["scheduler"] == {"serving": True}
    assert data["disagreements"] == []
    n1 = data["nodes"][0]
    assert n1["name"] == "n1"
    assert [(g["coreUsedMilli"], g["memoryUsedBytes"]) for g in n1["gpus"]] == [(600, 8 * GiB), (250, 2 * GiB)]
    assert [[(h["pod"], h["container"], h["source"]) for h in g["holders"]] for g in n1["gpus"]] == [
        [("a", "main", "plan")], [("b", "main", "plan")]]
    assert data["totals"]["gpus"] == 3
    assert data["problems"] is False


def test_table_wide_and_one_node(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.node("n1")
    world.node("n2", 1)
    world.bound("a", "n1", 0, 60, 8)
    code, out, _ = world.inspect(capsys=capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NODE", "GPU", "MODEL", "HEALTH", "CORE", "MEMORY", "PODS", "FLAGS"]
    assert lines[1].split() == ["n1", "0", "A100", "Healthy", "60%", "8.0/16.0", "GiB", "1", "-"]
    assert lines[-2].startswith("TOTAL  2 nodes (0 flagged), 3 GPUs (3 healthy, 0 MIG): core 60% of 300% (20.0%)")
    assert lines[-1] == "ENFORCEMENT  unknown (not stated by the node's Runtime): 2 nodes (n1, n2)"  # no label
    code, out, _ = world.inspect("-o", "wide", capsys=capsys)
    assert code == 0
    assert "GPU-n1-0" in out
    assert "default/a/main  60%  8.0 GiB  plan" in out
    code, out, _ = world.inspect("n2", "-o", "json", "--scheduler", world.url, capsys=capsys)
    assert code == 0
    data = _json(out)
    assert [n["name"] for n in data["nodes"]] == ["n2"]
    assert data["disagreements"] == []  # the view was restricted to n2 too


def test_unknown_node_exits_2_and_a_flagged_node_exits_1(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.node("n1")
    world.node("old", heartbeat=time.time() - 600)
    code, out, err = world.inspect("nope", capsys=capsys)
    assert (code, out) == (2, "")
    assert err == "ljrk inspect: error: node 'nope' not found\n"
    code, out, _ = world.inspect(capsys=capsys)
    assert code == 1
    assert "inventory-stale" in out
    assert "1 flag(s), 0 disagreement(s): -o wide for details" in out
    code, out, _ = world.inspect("-o", "wide", capsys=capsys)
    assert re.search(r"  old: inventory-stale: stale GPU inventory: heartbeat 6[0-9][0-9] s old \(limit 60 s\)", out)
    code, _, _ = world.inspect("n1", capsys=capsys)
    assert code == 0


def test_a_pod_the_scheduler_missed_is_a_disagreement(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.node("n1")
    eventually(lambda: world.service.knows_node("n1"))
    world.app.stop()  # the scheduler stops watching: the next pod is written behind its back
    stale_view = world.app.ledger_view()
    world.bound("late", "n1", 0, 40, 4)
    container = InspectContainer()
    container.cluster.override(providers.Object(world.cluster))
    container.view.override(providers.Object(FixedView(decode_view(stale_view))))
    code = main(["-o", "json", "--scheduler", "http://unused:1"], container=container)
    data = _json(capsys.readouterr().out)
    assert code == 1
    assert {(d["gpu"], d["field"], d["api"], d["scheduler"]) for d in data["disagreements"]} == {
        (0, "coreUsedMilli", "400", "0"), (0, "memoryUsedBytes", str(4 * GiB), "0"),
        (None, "pods", "default/late", "-")}


def test_the_view_route_serves_json_and_leaves_other_routes(world: World) -> None:
    world.node("n1")
    eventually(lambda: world.service.knows_node("n1"))
    with urllib.request.urlopen(world.url + VIEW_PATH, timeout=5) as response:
        assert response.headers["Content-Type"] == "application/json"
        view = decode_view(json.loads(response.read()))
    assert view.serving is True
    assert [g.uuid for g in view.nodes["n1"].gpus] == ["GPU-n1-0", "GPU-n1-1"]
    assert HttpSchedulerView(world.url + "/").fetch() == view
    with urllib.request.urlopen(world.url + "/healthz", timeout=5) as response:
        assert response.read() == b"ok\n"
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(world.url + "/debug/other", timeout=5)
    assert caught.value.code == 404
    caught.value.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_scheduler_and_bad_url_exit_2(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.node("n1")
    port = _closed_port()
    code, out, err = world.inspect("--scheduler", f"http://127.0.0.1:{port}", "--timeout", "2", capsys=capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"ljrk inspect: error: cannot read the scheduler's view: GET http://127.0.0.1:{port}"
                          f"{VIEW_PATH}: ")
    code, _, err = world.inspect("--scheduler", "127.0.0.1:8888", capsys=capsys)
    assert code == 2
    assert "--scheduler='127.0.0.1:8888': must be an http:// or https:// URL" in err
    assert err.count("\n") == 1


def test_unreachable_api_server_and_missing_kubeconfig_exit_2(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    port = _closed_port()
    kubeconfig = tmp_path / "kubeconfig.json"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    code = main(["--kubeconfig", str(kubeconfig), "--timeout", "2"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.startswith("ljrk inspect: error: cannot list the cluster: ")
    code = main(["--kubeconfig", str(tmp_path / "absent")])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.startswith("ljrk inspect: error: cannot reach the cluster: ")
    assert main(["-o", "yaml"]) == 2
    assert "invalid choice: 'yaml'" in capsys.readouterr().err


def test_inspect_is_a_registered_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert "inspect" in COMMANDS
    with pytest.raises(SystemExit) as done:
        ljrk(["--help"])
    assert done.value.code == 0
    assert "inspect" in capsys.readouterr().out
    assert ljrk(["inspect", "--help"]) == 0
    assert "--scheduler URL" in capsys.readouterr().out
