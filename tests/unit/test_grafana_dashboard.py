"""The Grafana dashboard of the exporter (``deploy/grafana/lj-runtimekit-exporter-dashboard.json``).

Behaviours covered:

* the file is an importable dashboard: ``uid``, ``title``, ``schemaVersion`` (≥ 36), rows and panels with unique
  ids and a grid position, no fixed ``id``;
* templating: a ``datasource`` variable of type ``datasource`` for Prometheus, and ``node`` and ``namespace`` query
  variables on that data source; every panel and every target uses ``${datasource}``, never a fixed data source;
* every target has a ``refId`` (unique in its panel) and a PromQL ``expr``; the variables the expressions use are
  defined (or Grafana's ``$__…`` built-ins);
* every ``lj_runtimekit_…`` name in an expression or variable query is a series the exporter serves, as
  ``domain.exporter.metrics`` defines them (its spec tables and :func:`build_families`, counters with ``_total``),
  and every label the expressions and legends use is one of the exporter's labels;
* the panel groups are there, each with its metrics side by side in one panel: per-GPU allocation vs use (compute
  allocated vs utilization; memory allocated vs used vs total), per-pod limits vs use (compute and memory), health
  (GPU health, Runtime up, XID errors by code as a rate, stale data), per-node allocatable vs allocated, and MIG
  (instances per profile total vs allocated, memory used vs total per instance, allocation per instance, containers
  on MIG: memory limit vs used);
* with ``promtool`` on PATH (Debian ``prometheus``, ``scripts/prometheus.sh``), every expression parses: they are
  checked as recording rules after the Grafana variables are replaced by values.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from domain.exporter import metrics
from domain.exporter.snapshot import Snapshot

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "lj-runtimekit-exporter-dashboard.json"
DATASOURCE = "${datasource}"
METRIC = re.compile(r"\blj_runtimekit_[a-z0-9_]+")
MATCHERS = re.compile(r"\{([^{}]*)\}")
MATCHER_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
VARIABLE = re.compile(r"\$\{?(\w+)")
GRAFANA_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
PROMTOOL_VALUES = {"__rate_interval": "5m", "__interval": "1m", "__range": "6h", "node": ".*", "namespace": ".*"}
"""What the Grafana variables stand for when promtool parses the expressions."""

GROUPS = {
    "Per-GPU allocation vs use": [
        {"gpu_core_allocated_ratio", "gpu_utilization_ratio"},
        {"gpu_memory_allocated_bytes", "gpu_memory_used_bytes", "gpu_memory_total_bytes"},
    ],
    "Per-pod limits vs use": [
        {"container_gpu_core_limit_ratio", "container_gpu_utilization_ratio"},
        {"container_gpu_memory_limit_bytes", "container_gpu_memory_used_bytes"},
    ],
    "Health": [{"gpu_healthy"}, {"exporter_runtime_up"}, {"gpu_xid_errors_total"}, {"exporter_data_stale"}],
    "Per-node allocatable vs allocated": [
        {"node_gpu_core_allocatable_gpus", "node_gpu_core_allocated_gpus"},
        {"node_gpu_memory_allocatable_bytes", "node_gpu_memory_allocated_bytes"},
    ],
    "MIG instances": [
        {"node_mig_instances", "node_mig_allocated_instances"},
        {"mig_memory_used_bytes", "mig_memory_total_bytes"},
        {"mig_allocated"},
        {"container_mig_memory_limit_bytes", "container_mig_memory_used_bytes"},
    ],
}
"""Row title → metric sets (without the prefix) that one panel of the row must show together."""


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text())
    assert isinstance(data, dict)
    return data


def all_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row keeps its panels inside


def rows(dashboard: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Row title → the panels under it (top-level panels follow their row; a collapsed row nests them)."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    current: list[dict[str, Any]] | None = None
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            current = grouped.setdefault(panel["title"], [])
            current.extend(panel.get("panels", []))
        else:
            assert current is not None, f"panel {panel['title']!r} sits above the first row"
            current.append(panel)
    return grouped


def targets(dashboard: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for panel in all_panels(dashboard):
        for target in panel.get("targets", []):
            yield panel, target


def variable_queries(dashboard: dict[str, Any]) -> list[str]:
    out = []
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            out.append(query["query"] if isinstance(query, dict) else query)
    return out


def expressions(dashboard: dict[str, Any]) -> list[str]:
    return [target["expr"] for _, target in targets(dashboard)] + variable_queries(dashboard)


def exported() -> tuple[set[str], set[str]]:
    """(series names, label names) the exporter serves."""
    tables = (metrics.GPU_METRICS, metrics.CONTAINER_METRICS, metrics.NODE_METRICS, metrics.MIG_METRICS,
              metrics.CONTAINER_MIG_METRICS, metrics.NODE_MIG_METRICS)
    names = {metrics.PREFIX + spec.name for table in tables for spec in table}
    labels = {*metrics.CONTAINER_LABELS, *metrics.NODE_LABELS, *metrics.MIG_LABELS, *metrics.CONTAINER_MIG_LABELS,
              *metrics.NODE_MIG_LABELS}
    for family in metrics.build_families(Snapshot(pulled_at=1.0, runtime_up=True), node="n", now=2.0):
        names.add(family.name + ("_total" if family.kind == "counter" else ""))
        labels.update(family.labels)
    return names, labels


def test_importable_structure(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "lj-runtimekit-exporter"
    assert dashboard["title"]
    assert dashboard["schemaVersion"] >= 36
    assert dashboard.get("id") is None  # Grafana assigns it on import
    ids = [panel["id"] for panel in all_panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in all_panels(dashboard):
        assert panel["title"]
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"])
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": DATASOURCE}, panel["title"]
            assert panel["targets"], panel["title"]


def test_templating_variables(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("node", "namespace"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"]["uid"] == DATASOURCE
        query = variables[name]["query"]
        assert f", {name})" in (query["query"] if isinstance(query, dict) else query)


def test_every_target_has_an_expression_on_the_variable_data_source(dashboard: dict[str, Any]) -> None:
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    per_panel: dict[int, list[str]] = {}
    for panel, target in targets(dashboard):
        assert isinstance(target.get("expr"), str), panel["title"]
        assert target["expr"].strip(), panel["title"]
        assert target.get("datasource", {"uid": DATASOURCE})["uid"] == DATASOURCE, panel["title"]
        per_panel.setdefault(panel["id"], []).append(target["refId"])
        for name in VARIABLE.findall(target["expr"]):
            assert name in defined or name.startswith("__"), f"{panel['title']}: undefined variable ${name}"
    assert all(len(refs) == len(set(refs)) for refs in per_panel.values())


def test_metric_names_are_the_exporters(dashboard: dict[str, Any]) -> None:
    names, _ = exported()
    used = {name for expr in expressions(dashboard) for name in METRIC.findall(expr)}
    assert used, "no lj_runtimekit_ metric referenced"
    assert used <= names, f"not served by the exporter: {sorted(used - names)}"


def test_labels_are_the_exporters(dashboard: dict[str, Any]) -> None:
    _, labels = exported()
    used: set[str] = set()
    for expr in expressions(dashboard):
        for matchers in MATCHERS.findall(expr):
            used.update(MATCHER_LABEL.findall(matchers))
        for grouping in GROUPING.findall(expr):
            used.update(label.strip() for label in grouping.split(",") if label.strip())
    for _, target in targets(dashboard):
        used.update(LEGEND_LABEL.findall(target.get("legendFormat", "")))
    assert {"node", "namespace", "gpu_index", "xid", "profile", "gpu_instance_id"} <= used
    assert used <= labels, f"labels the exporter does not set: {sorted(used - labels)}"


@pytest.mark.parametrize("group", list(GROUPS))
def test_panel_groups(dashboard: dict[str, Any], group: str) -> None:
    panels = rows(dashboard).get(group)
    assert panels, f"no row {group!r}"
    shown = [{name.removeprefix(metrics.PREFIX) for t in p.get("targets", []) for name in METRIC.findall(t["expr"])}
             for p in panels]
    for together in GROUPS[group]:
        assert any(together <= names for names in shown), f"{group}: no panel shows {sorted(together)} together"


def test_xid_errors_are_a_rate_by_code(dashboard: dict[str, Any]) -> None:
    xid = [t["expr"] for p in rows(dashboard)["Health"] for t in p.get("targets", [])
           if "rate(lj_runtimekit_gpu_xid_errors_total" in t["expr"]]
    assert any("xid" in grouping for expr in xid for grouping in GROUPING.findall(expr))


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (scripts/prometheus.sh install)")
def test_expressions_parse_with_promtool(dashboard: dict[str, Any], tmp_path: Path) -> None:
    def substitute(expr: str) -> str:
        return GRAFANA_VARIABLE.sub(lambda m: PROMTOOL_VALUES[m.group(1) or m.group(2)], expr)

    selectors = [query.removeprefix("label_values(").rsplit(",", 1)[0] for query in variable_queries(dashboard)]
    panel_exprs = [expr for expr in expressions(dashboard) if not expr.startswith("label_values(")]
    rules = [{"record": f"dashboard:expr_{n}", "expr": substitute(expr)}
             for n, expr in enumerate([*panel_exprs, *selectors])]
    path = tmp_path / "rules.json"  # YAML is a superset of JSON
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    check = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
