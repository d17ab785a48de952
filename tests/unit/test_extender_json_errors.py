"""The extender verbs' JSON (``entrypoints.scheduler.extender_json``): every body it refuses raises
:class:`ExtenderArgsError` (a 400) whose message names the field and shows the bad value."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from entrypoints.scheduler.extender_json import ExtenderArgsError, ExtenderJson
from services.scheduler.extender import Extender
from support.kube_builders import RES
from support.scheduler_world import world

POD = {"metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
       "spec": {"containers": [{"name": "main", "resources": {"limits": {RES.core: "10", RES.memory: "1"}}}]}}
BIND = {"PodName": "p", "PodNamespace": "default", "PodUID": "uid-p", "Node": "n1"}

CASES: list[tuple[str, object, tuple[str, ...]]] = [
    ("filter", ["not", "an", "object"], ("ExtenderArgs", '["not", "an", "object"]')),
    ("filter", {"Pod": POD, "NodeNames": "n1"}, ("NodeNames", '"n1"')),
    ("filter", {"Pod": POD, "NodeNames": ["n1", 7]}, ("NodeNames", "7")),
    ("filter", {"Pod": POD, "Nodes": "nodes"}, ("Nodes", '"nodes"')),
    ("filter", {"Pod": POD, "Nodes": {"items": {"a": 1}}}, ("Nodes.items", '{"a": 1}')),
    ("filter", {"Pod": POD, "Nodes": {"items": [3]}}, ("Nodes.items[0]", "3")),
    ("filter", {"Pod": POD, "Nodes": {"items": [{"metadata": []}]}}, ("Nodes.items[0].metadata", "[]")),
    ("prioritize", {"Pod": POD, "Nodes": {"items": [{"metadata": {"name": 42}}]}},
     ("Nodes.items[0].metadata.name", "42")),
    ("preempt", {"Pod": POD, "NodeNameToMetaVictims": ["n1"]}, ("NodeNameToMetaVictims", '["n1"]')),
    ("preempt", {"Pod": POD, "NodeNameToMetaVictims": {"n1": "v"}}, ("NodeNameToMetaVictims[n1]", '"v"')),
    ("preempt", {"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": "a"}}},
     ("NodeNameToMetaVictims[n1].Pods", '"a"')),
    ("preempt", {"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [5]}}},
     ("NodeNameToMetaVictims[n1].Pods[0]", "5")),
    ("preempt", {"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": 9}]}}},
     ("NodeNameToMetaVictims[n1].Pods[0].UID", "9")),
    ("preempt", {"Pod": POD, "NodeNameToVictims": {"n1": {"Pods": [{"metadata": {"uid": ""}}]}}},
     ("NodeNameToVictims[n1].Pods[0].metadata.uid", '""')),
    ("preempt", {"Pod": POD, "NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": "2"}}},
     ("NodeNameToMetaVictims[n1].NumPDBViolations", '"2"')),
    ("filter", {"Pod": {"metadata": {"name": "p"}, "spec": {"containers": "abc"}}, "NodeNames": []},
     ("Pod", "spec.containers", '"abc"')),
    ("bind", "body", ("ExtenderBindingArgs", '"body"')),
    ("bind", {**BIND, "PodName": ""}, ("PodName", '""')),
    ("bind", {**BIND, "PodNamespace": None}, ("PodNamespace", "null")),
    ("bind", {**BIND, "Node": 3}, ("Node", "3")),
    ("bind", {**BIND, "PodUID": 12}, ("PodUID", "12")),
]


@pytest.mark.parametrize(("verb", "body", "named"), CASES)
def test_a_refused_body_names_the_field_and_the_value(verb: str, body: object, named: tuple[str, ...]) -> None:
    wire = ExtenderJson(Extender(world().service))
    call: Callable[[object], object] = getattr(wire, verb)
    with pytest.raises(ExtenderArgsError) as raised:
        call(body)
    message = str(raised.value)
    for part in named:
        assert part in message, (part, message)


def test_a_long_bad_value_is_shortened() -> None:
    wire = ExtenderJson(Extender(world().service))
    with pytest.raises(ExtenderArgsError) as raised:
        wire.filter({"Pod": POD, "NodeNames": "x" * 5000})
    assert "NodeNames" in str(raised.value)
    assert len(str(raised.value)) < 200
