"""The fast rebuild path gives exactly the books of the event-by-event path.

Behaviours covered:

* a mixed cluster (time-sharing plans, whole-GPU plans, plans that must not be trusted — another pod's UID, an
  unknown GPU UUID, malformed JSON, a percent that disagrees, a GPU listed twice, a partial whole GPU, a MIG
  entry on a GPU not in MIG mode —, plan-less pods inferred on one node, pods on a node that does not exist, an
  over-committed node, a node without inventory, an unreadable request, CPU-only, terminal and pending pods,
  replicas of one spec, a bound Pending and an Unknown pod with plans) rebuilt from its objects equals the same
  objects fed as events, in two orders, with the lean booking, the lean plan decoder and the shared request
  parses turned off (the path as it was before): the same per-GPU books, records, tag counts, record sources,
  problems, gates and over-booked nodes;
* the rebuild's lean booking takes exactly the Running pods with a trusted plan, and the rebuild without it
  gives the same books;
* adopting that rebuild into an empty live ledger (a new leader: whole rows copied) and into a drifted one gives
  the rebuilt books, and the drift report names every pod;
* ``ClusterLedger.copy_node`` books what observing each record books, and refuses a node or pod already booked;
* the lean plan decoder answers exactly what the full decoder answers, record or error, for every plan above,
  and the lean inventory reader what the full reader answers for well-formed and malformed GPU entries;
* the cyclic garbage collector is paused within a rebuild and restored after it, also on error, and left paused
  when it was paused before;
* pod requests shared between replicas equal :func:`pod_request` of each pod, and an invalid pod's error names
  that pod, never a replica.
"""

from __future__ import annotations

import gc
import json

import attrs
import pytest

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import InvalidRequestError
from domain.gpu import Gpu
from domain.kube.annotations import decode_inventory, decode_plan, encode_plan
from domain.kube.annotations import inventory as inventory_module
from domain.kube.annotations import plan as plan_module
from domain.kube.objects import NodeObject, PodObject, PodPhase
from domain.kube.requests import PodRequests
from domain.kube.translate import pod_request
from domain.ledger import ClusterLedger
from domain.scheduling.sync import LedgerSync
from domain.units import GiB
from services._shared.gcpause import collection_paused
from support.kube_builders import GPU16, KEYS, PROTOCOL, Clock, make_gpus, make_node, make_pod, with_plan
from support.ledger_poke import corrupt_core_used

TAGS = ("share-gpu", "1-gpu", "2-gpu")


def share(uid: str, node: str, index: int, core: int, gib: int) -> PodAllocation:
    return PodAllocation(uid, node, (ContainerGrant("main", (GpuGrant(index, core, gib * GiB),)),))


def planned(uid: str, allocation: PodAllocation, gpus: tuple[Gpu, ...] | None = None, *, gpu: str | None = None,
            core: str | None = None, mem: str | None = None) -> PodObject:
    node_gpus = make_gpus(allocation.node, 4) if gpus is None else gpus
    return with_plan(make_pod(uid, gpu=gpu, core=core, mem=mem), allocation, node_gpus)


def edited(pod: PodObject, change: object) -> PodObject:
    """``pod`` with its plan's JSON changed by ``change(data)``."""
    data = json.loads(pod.annotations[KEYS.pod_plan])
    change(data)  # type: ignore[operator]
    return PodObject(pod.uid, pod.namespace, pod.name, containers=pod.containers, node_name=pod.node_name,
                     phase=pod.phase, scheduler_name=pod.scheduler_name,
                     annotations={**pod.annotations, KEYS.pod_plan: json.dumps(data)})


def bound(uid: str, node: str, *, gpu: str | None = None, core: str | None = None, mem: str | None = None,
          cpu: str | None = None) -> PodObject:
    pod = make_pod(uid, gpu=gpu, core=core, mem=mem, cpu=cpu)
    return PodObject(pod.uid, pod.namespace, pod.name, containers=pod.containers, node_name=node,
                     phase=PodPhase.RUNNING, scheduler_name=pod.scheduler_name, annotations=dict(pod.annotations))


def mixed_cluster() -> tuple[list[NodeObject], list[PodObject]]:
    nodes = [make_node("n-a", 4), make_node("n-b", 4), make_node("n-over", 4), make_node("n-bare", annotation=None)]
    ok = planned("ok-1", share("ok-1", "n-a", 0, 300, 2), core="30", mem="2")
    pods = [
        ok,
        planned("ok-2", share("ok-2", "n-a", 0, 300, 2), core="30", mem="2"),
        planned("whole-2", PodAllocation("whole-2", "n-a", (ContainerGrant(
            "main", (GpuGrant(2, 1000, GPU16), GpuGrant(3, 1000, GPU16)), whole=True),)), gpu="2"),
        planned("bad-uid", share("someone-else", "n-a", 1, 200, 1), core="20", mem="1"),
        planned("bad-uuid", share("bad-uuid", "n-a", 1, 200, 1), make_gpus("elsewhere", 4), core="20", mem="1"),
        edited(planned("bad-percent", share("bad-percent", "n-b", 0, 200, 1), core="20", mem="1"),
               lambda d: d["containers"]["main"]["gpus"][0].update(corePercent=99)),
        edited(planned("bad-twice", share("bad-twice", "n-b", 0, 200, 1), core="20", mem="1"),
               lambda d: d["containers"]["main"]["gpus"].append(dict(d["containers"]["main"]["gpus"][0]))),
        edited(planned("bad-whole", PodAllocation("bad-whole", "n-b", (ContainerGrant(
            "main", (GpuGrant(1, 1000, GPU16),), whole=True),)), gpu="1"),
            lambda d: d["containers"]["main"]["gpus"][0].update(coreMilli=500, corePercent=50)),
        edited(planned("bad-mig", share("bad-mig", "n-b", 0, 200, 1), core="20", mem="1"),
               lambda d: d["containers"]["main"].update(mig=[{"index": 0, "uuid": "GPU-n-b-0", "profile": "1g.10gb",
                                                             "start": 0, "create": True, "instanceId": None}])),
        bound("junk-plan", "n-b", core="20", mem="1"),
        bound("planless-1", "n-b", core="50", mem="4"),
        bound("planless-2", "n-b", core="50", mem="4"),
        bound("planless-whole", "n-b", gpu="1"),
        bound("lost-1", "n-gone", core="10", mem="1"),
        planned("lost-2", share("lost-2", "n-gone", 0, 100, 1), core="10", mem="1"),
        *(planned(f"over-{i}", share(f"over-{i}", "n-over", 0, 500, 8), core="50", mem="8") for i in range(3)),
        bound("bare-1", "n-bare", core="10", mem="1"),
        bound("unreadable", "n-a", core="150", mem="1"),
        bound("cpu-only", "n-a", cpu="2"),
        PodObject("done", "default", "done", containers=ok.containers, node_name="n-a", phase=PodPhase.SUCCEEDED,
                  scheduler_name=ok.scheduler_name, annotations=dict(ok.annotations)),
        planned("leftover", share("leftover", "n-a", 1, 900, 1), core="90", mem="1"),
        *(bound(f"replica-{i}", "n-over", core="10", mem="1") for i in range(4)),
        planned("ok-b", share("ok-b", "n-b", 2, 400, 4), core="40", mem="4"),  # trusted, beside plan-less pods
        attrs.evolve(planned("held", share("held", "n-a", 3, 100, 1), core="10", mem="1"), phase=PodPhase.PENDING),
        attrs.evolve(planned("unknown", share("unknown", "n-b", 3, 100, 1), core="10", mem="1"),
                     phase=PodPhase.UNKNOWN),
    ]
    junk = pods.index(next(p for p in pods if p.uid == "junk-plan"))
    pods[junk] = PodObject("junk-plan", "default", "junk-plan", containers=pods[junk].containers, node_name="n-b",
                           phase=PodPhase.RUNNING, scheduler_name=ok.scheduler_name,
                           annotations={KEYS.pod_plan: "{not json"})
    leftover = pods.index(next(p for p in pods if p.uid == "leftover"))
    left = pods[leftover]
    pods[leftover] = PodObject(left.uid, left.namespace, left.name, containers=left.containers, node_name="",
                               phase=PodPhase.PENDING, scheduler_name=left.scheduler_name,
                               annotations=dict(left.annotations))
    return nodes, pods


def state(sync: LedgerSync) -> dict[str, object]:
    ledger = sync.ledger
    tags = {name: {tag: int(ledger.tag_counts[ledger.slot(name), ledger.tag_id(tag)]) for tag in TAGS}
            for name in ledger.node_names()}
    return {"books": ledger.books(), "records": ledger.records(), "tags": tags, "sources": dict(sync.sources),
            "problems": dict(sync.problems), "gates": dict(sync.gates), "overbooked": sync.overbooked,
            "quarantine": dict(ledger.quarantine), "holds": sync.holds.holders(), "vanished": dict(sync.vanished.holds),
            "uid_by_key": dict(sync._uid_by_key), "on_node": {n: set(u) for n, u in sync._on_node.items() if u},
            "inferred": {n: set(u) for n, u in sync._inferred.items() if u}, "constraints": dict(sync.constraints)}


def fresh_sync() -> LedgerSync:
    return LedgerSync(ClusterLedger(), PROTOCOL, clock=Clock())


def slow_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turn the fast paths off: every pod through ``on_pod``, every plan through the full decoder, every request
    parsed on its own."""
    monkeypatch.setattr(LedgerSync, "_book_planned", lambda self, pod: False)
    monkeypatch.setattr(plan_module, "_plain_containers", lambda *args: None)
    monkeypatch.setattr(plan_module, "_plain_header", lambda *args, **kwargs: False)
    monkeypatch.setattr(inventory_module, "_plain_gpu", lambda entry: None)
    monkeypatch.setattr(PodRequests, "_parse", lambda self, pod, content: _own_parse(pod))


def _own_parse(pod: PodObject) -> object:
    try:
        return pod_request(pod, PROTOCOL)
    except InvalidRequestError as error:
        return error


@pytest.mark.parametrize("pods_first", [False, True])
def test_rebuild_equals_the_event_path_on_a_mixed_cluster(pods_first: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    nodes, pods = mixed_cluster()
    rebuilt = fresh_sync().rebuild(nodes, pods)
    slow_paths(monkeypatch)
    live = fresh_sync()
    if pods_first:
        for pod in reversed(pods):
            live.on_pod(pod)
    for node in nodes:
        live.on_node(node)
    if not pods_first:
        for pod in pods:
            live.on_pod(pod)
    assert state(rebuilt) == state(live)
    books = state(rebuilt)
    sources = books["sources"]
    problems = books["problems"]
    assert isinstance(sources, dict)
    assert isinstance(problems, dict)
    for uid in ("bad-uid", "bad-uuid", "bad-percent", "bad-twice", "bad-whole", "junk-plan"):
        assert problems[uid].startswith("plan not trusted"), uid  # reported, and counted by inference
        assert sources[uid].value == "inferred", uid
    assert "unreadable request" in problems["unreadable"]
    assert "n-gone" in problems["lost-1"]
    assert "lost-2" not in sources
    assert "done" not in sources
    assert "leftover" not in sources
    assert "n-over" in rebuilt.overbooked
    assert rebuilt.ledger.overcommitted("n-over") == [0]


def test_the_lean_booking_takes_the_usual_pods_only_and_books_what_on_pod_books(
        monkeypatch: pytest.MonkeyPatch) -> None:
    nodes, pods = mixed_cluster()
    taken: list[str] = []
    lean = LedgerSync._book_planned

    def spy(self: LedgerSync, pod: PodObject) -> bool:
        booked = lean(self, pod)
        if booked:
            taken.append(pod.uid)
        return booked

    monkeypatch.setattr(LedgerSync, "_book_planned", spy)
    rebuilt = fresh_sync().rebuild(nodes, pods)
    assert sorted(taken) == sorted(["ok-1", "ok-2", "whole-2", "over-0", "over-1", "over-2", "ok-b"])
    monkeypatch.setattr(LedgerSync, "_book_planned", lambda self, pod: False)
    assert state(fresh_sync().rebuild(nodes, pods)) == state(rebuilt)
    for uid in ("ok-b", "held", "unknown"):  # the last two counted from their plans by on_pod
        assert rebuilt.sources[uid].value == "plan", uid


def test_adopting_the_rebuild_gives_its_books_for_a_new_leader_and_a_drifted_one() -> None:
    nodes, pods = mixed_cluster()
    rebuilt = fresh_sync().rebuild(nodes, pods)
    leader = fresh_sync()
    report = leader.adopt(fresh_sync().rebuild(nodes, pods))
    assert set(report.missing) == set(rebuilt.ledger.records())
    assert state(leader) == state(rebuilt)
    drifted = fresh_sync()
    for node in nodes[:2]:
        drifted.on_node(node)
    for pod in pods[:5]:
        drifted.on_pod(pod)
    corrupt_core_used(drifted.ledger, "n-a", 1, delta=7)  # a corrupted running total
    drifted.adopt(fresh_sync().rebuild(nodes, pods))
    assert state(drifted) == state(rebuilt)
    for name in drifted.ledger.node_names():
        assert drifted.ledger.verify_node(name) == []


def test_copy_node_books_what_observing_each_record_books() -> None:
    nodes, pods = mixed_cluster()
    source = fresh_sync().rebuild(nodes, pods).ledger
    one_by_one, copied = ClusterLedger(), ClusterLedger(max_gpus=2)
    for ledger in (one_by_one, copied):
        for name in source.node_names():
            ledger.upsert_node(source.inventory(name))
    for record in source.records().values():
        one_by_one.observe(record)
    assert sum(copied.copy_node(source, name) for name in source.node_names()) == len(source)
    assert copied.books() == one_by_one.books() == source.books()
    assert copied.records() == source.records()
    for name in source.node_names():
        assert [int(copied.tag_counts[copied.slot(name), copied.tag_id(t)]) for t in TAGS] == \
               [int(one_by_one.tag_counts[one_by_one.slot(name), one_by_one.tag_id(t)]) for t in TAGS]
        assert copied.verify_node(name) == []
    with pytest.raises(InvalidRequestError, match="node\\[n-a\\]"):
        copied.copy_node(source, "n-a")
    elsewhere = ClusterLedger()
    for name in source.node_names():
        elsewhere.upsert_node(source.inventory(name))
    record = source.records()["ok-1"]
    elsewhere.observe(PodAllocation(record.pod_uid, "n-b", record.containers))
    with pytest.raises(InvalidRequestError, match="no record of these pods"):
        elsewhere.copy_node(source, "n-a")


def test_the_lean_plan_decoder_answers_what_the_full_decoder_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    _, pods = mixed_cluster()
    gpus = make_gpus("n-a", 4)
    texts = [p.annotations[KEYS.pod_plan] for p in pods if KEYS.pod_plan in p.annotations]
    header = json.loads(texts[0])
    for change in ({"version": 1}, {"version": 3}, {"version": True}, {"writer": ""}, {"writer": None},
                   {"node": "n-b"}, {"podUID": 5}):
        texts.append(json.dumps({**header, **change}))
    texts.append(encode_plan(PodAllocation("x", "n-a", (
        ContainerGrant("init", (GpuGrant(0, 100, GiB),), init=True),
        ContainerGrant("main", (GpuGrant(0, 200, GiB), GpuGrant(1, 300, 2 * GiB))))), gpus))

    def decode_all() -> list[object]:
        out: list[object] = []
        for text in texts:
            owner = json.loads(text)["podUID"] if text.startswith("{\"") else "x"
            for uid in (owner, "x"):
                try:
                    out.append(decode_plan(text, key="k", pod_uid=uid, node="n-a", node_gpus=gpus, cpu_milli=5,
                                           memory_bytes=7))
                except InvalidRequestError as error:
                    out.append(str(error))
        return out

    lean = decode_all()
    monkeypatch.setattr(plan_module, "_plain_containers", lambda *args: None)
    monkeypatch.setattr(plan_module, "_plain_header", lambda *args, **kwargs: False)
    assert lean == decode_all()
    assert any(isinstance(v, PodAllocation) and v.containers for v in lean)
    assert any(isinstance(v, str) for v in lean)


GPU_ENTRY_EDITS: tuple[dict[str, object], ...] = (
    {}, {"index": -1}, {"index": True}, {"index": "0"}, {"memoryBytes": 0}, {"memoryBytes": 2**51},
    {"memoryBytes": 1.5}, {"uuid": ""}, {"uuid": 7}, {"model": ""}, {"health": "bogus"}, {"health": ["x"]},
    {"migMode": "enabled"}, {"migMode": None}, {"migInstances": []},
    {"migInstances": [{"gi": 1, "ci": 0, "profile": "1g.10gb", "start": 0, "uuid": "MIG-1", "free": False}]},
)


@pytest.mark.parametrize("edit", GPU_ENTRY_EDITS)
def test_the_lean_inventory_reader_answers_what_the_full_reader_answers(
        edit: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    text = make_node("n-x", 2).annotations[KEYS.node_inventory]
    data = json.loads(text)
    data["gpus"][1].update(edit)
    for key in [k for k, v in edit.items() if v is None]:
        del data["gpus"][1][key]
    edited_text = json.dumps(data)

    def read() -> object:
        try:
            return decode_inventory(edited_text, key="k")
        except InvalidRequestError as error:
            return str(error)

    lean = read()
    monkeypatch.setattr(inventory_module, "_plain_gpu", lambda entry: None)
    assert lean == read()


def test_requests_shared_between_replicas_equal_each_pods_own_parse() -> None:
    requests = PodRequests(PROTOCOL)
    replicas = [bound(f"replica-{i}", "n-a", core="10", mem="1") for i in range(3)]
    bad = [bound(f"bad-{i}", "n-a", core="150", mem="1") for i in range(2)]
    for pod in replicas:
        assert requests.get(pod) == pod_request(pod, PROTOCOL)
        assert requests.get(pod).uid == pod.uid
        assert requests.get(pod).name == pod.name
    for pod in bad:
        with pytest.raises(InvalidRequestError) as error:
            requests.get(pod)
        with pytest.raises(InvalidRequestError) as direct:
            pod_request(pod, PROTOCOL)
        assert str(error.value) == str(direct.value)
        assert pod.name in str(error.value)
    selected = PodObject("sel", "default", "sel", containers=replicas[0].containers, node_name="n-a",
                         annotations={KEYS.pod_gpu_models: "H100"})
    assert requests.get(selected) == pod_request(selected, PROTOCOL)
    assert requests.get(selected).selector.models == ("H100",)


def test_the_collector_is_paused_within_and_restored_after() -> None:
    assert gc.isenabled()
    with collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collection_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
