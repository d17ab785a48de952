"""``entrypoints.inspect.__main__.main`` called more than once with one container (as tests do, one node at a time):
each call reports what its own arguments ask for, not what the first call built."""

from __future__ import annotations

import json

import pytest
from dependency_injector import providers

from adapters.memory.cluster import InMemoryCluster
from entrypoints.inspect.__main__ import main
from entrypoints.inspect.containers import InspectContainer
from support.kube_builders import make_node


def test_each_call_reports_the_node_its_arguments_name(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = InMemoryCluster()
    for name in ("n0", "n1"):
        cluster.create_node(make_node(name))
    container = InspectContainer()
    container.cluster.override(providers.Object(cluster))
    reported = []
    for name in ("n0", "n1", "n0"):
        main([name, "-o", "json"], container=container)
        reported.append([n["name"] for n in json.loads(capsys.readouterr().out)["nodes"]])
    assert reported == [["n0"], ["n1"], ["n0"]]

