"""``ljrk protocol check --kubeconfig``: the comparison of running instances with their component's ConfigMap
(:mod:`domain.kube.protocolcheck`), the report over an in-memory cluster (:mod:`entrypoints.protocol.live`), and the
command line against an unreachable API server."""

from __future__ import annotations

import socket
from pathlib import Path

import attrs
import pytest

from adapters.memory.cluster import InMemoryCluster
from adapters.protocolfile import ProtocolFileError, dump_protocol
from domain.kube.objects import ConfigMapObject, ContainerSpec, NodeObject, PodObject, PodPhase
from domain.kube.protocol import AnnotationKeys, ProtocolConstants
from domain.kube.protocolcheck import (
    PUBLISHERS,
    ConfigMapProtocol,
    Verdict,
    configmap_component,
    read_instances,
    restart_hint,
)
from entrypoints.cli import main as ljrk
from entrypoints.protocol.live import check_cluster

NS = "kube-system"
DEFAULT = ProtocolConstants()
FP = DEFAULT.fingerprint()
NEW = ProtocolConstants(memory_unit="2Gi")
KEYS = DEFAULT.annotations
COMPONENTS = ("controller", "device-plugin", "exporter", "runtime", "scheduler")


def configmaps(**protocols: ProtocolConstants) -> list[ConfigMapProtocol]:
    """One ConfigMap per component (default protocol unless given, keyed by component with _ for -)."""
    given = {k.replace("_", "-"): v for k, v in protocols.items()}
    return [ConfigMapProtocol(f"lj-runtimekit-{c}-config", c, given.get(c, DEFAULT)) for c in COMPONENTS]


def pod(name: str, component: str, *, node: str = "", annotations: dict[str, str] | None = None,
        phase: PodPhase = PodPhase.RUNNING, namespace: str = NS, **changes: object) -> PodObject:
    labels = {"app.kubernetes.io/name": "lj-runtimekit", "app.kubernetes.io/component": component}
    base = PodObject(uid=name, namespace=namespace, name=name, node_name=node, phase=phase, labels=labels,
                     annotations=annotations or {}, containers=(ContainerSpec("c"),))
    return attrs.evolve(base, **changes)


def node(name: str, **annotations: str) -> NodeObject:
    return NodeObject(name, annotations=annotations)


def world(dp_fp: str = FP, exp_fp: str = FP, sched_fp: str = FP, ctl_fp: str = FP
          ) -> tuple[list[NodeObject], list[PodObject]]:
    nodes = [node("n1", **{KEYS.node_protocol: dp_fp, KEYS.node_exporter_protocol: exp_fp})]
    pods = [pod("dp-1", "device-plugin", node="n1"), pod("exp-1", "exporter", node="n1"),
            pod("sched-1", "scheduler", annotations={KEYS.node_protocol: sched_fp}),
            pod("ctl-1", "controller", annotations={KEYS.node_protocol: ctl_fp})]
    return nodes, pods


def verdicts(cms: list[ConfigMapProtocol], nodes: list[NodeObject], pods: list[PodObject]) -> dict[str, Verdict]:
    return {f"{i.publisher.component} {i.where}": i.verdict for i in read_instances(cms, nodes, pods, namespace=NS)}


def test_every_instance_agrees_with_its_configmap() -> None:
    instances = read_instances(configmaps(), *world(), namespace=NS)
    assert [(i.publisher.component, i.where, i.fingerprint, i.verdict) for i in instances] == [
        ("device-plugin", "node n1", FP, Verdict.AGREES), ("exporter", "node n1", FP, Verdict.AGREES),
        ("scheduler", "pod kube-system/sched-1", FP, Verdict.AGREES),
        ("controller", "pod kube-system/ctl-1", FP, Verdict.AGREES)]
    assert instances[0].pod == "kube-system/dp-1"
    assert [c.name for c in instances[0].expected] == ["lj-runtimekit-device-plugin-config"]


def test_an_instance_running_the_old_copy_is_stale_and_only_it() -> None:
    cms = configmaps(device_plugin=NEW)
    assert verdicts(cms, *world()) == {
        "device-plugin node n1": Verdict.STALE, "exporter node n1": Verdict.AGREES,
        "scheduler pod kube-system/sched-1": Verdict.AGREES, "controller pod kube-system/ctl-1": Verdict.AGREES}
    assert verdicts(cms, *world(dp_fp=NEW.fingerprint()))["device-plugin node n1"] is Verdict.AGREES
    assert verdicts(configmaps(scheduler=NEW), *world())["scheduler pod kube-system/sched-1"] is Verdict.STALE


def test_keys_come_from_the_protocols_and_fall_back_to_the_old_ones() -> None:
    renamed = ProtocolConstants(annotations=AnnotationKeys(node_protocol="example.com/fp"))
    cms = configmaps(device_plugin=renamed)
    # not restarted: it still writes the old key, with the old protocol
    assert verdicts(cms, *world())["device-plugin node n1"] is Verdict.STALE
    [stale] = [i for i in read_instances(cms, *world(), namespace=NS) if i.publisher.component == "device-plugin"]
    assert stale.key == KEYS.node_protocol
    # restarted: the new key holds the new fingerprint; the old annotation is left behind and ignored
    nodes, pods = world()
    nodes = [node("n1", **nodes[0].annotations, **{"example.com/fp": renamed.fingerprint()})]
    assert verdicts(cms, nodes, pods)["device-plugin node n1"] is Verdict.AGREES


def test_a_node_annotation_counts_only_while_the_component_runs_there() -> None:
    nodes, pods = world(dp_fp="0" * 16)
    away = [p for p in pods if p.name != "dp-1"]
    assert verdicts(configmaps(), nodes, away)["device-plugin node n1"] is Verdict.LEFT_OVER
    elsewhere = [*away, pod("dp-2", "device-plugin", node="n2")]
    assert verdicts(configmaps(), nodes, elsewhere)["device-plugin node n1"] is Verdict.LEFT_OVER
    assert not Verdict.LEFT_OVER.problem
    bare = [node("n2")]
    assert verdicts(configmaps(), bare, [pod("dp-2", "device-plugin", node="n2")]) == {
        "device-plugin node n2": Verdict.UNPUBLISHED}


def test_pods_not_ours_are_ignored_terminating_ones_pass_and_pending_ones_are_starting() -> None:
    pods = [pod("pending", "scheduler", phase=PodPhase.PENDING),
            pod("done", "scheduler", phase=PodPhase.SUCCEEDED),
            pod("other-ns", "scheduler", namespace="default"),
            pod("foreign", "scheduler", labels={"app.kubernetes.io/component": "scheduler"}),
            pod("old", "scheduler", annotations={KEYS.node_protocol: "0" * 16}, deletion_timestamp=1.0),
            pod("new", "scheduler")]
    found = verdicts(configmaps(), [], pods)
    assert found == {"scheduler pod kube-system/new": Verdict.UNPUBLISHED,
                     "scheduler pod kube-system/old": Verdict.TERMINATING,
                     "scheduler pod kube-system/pending": Verdict.STARTING}
    assert Verdict.UNPUBLISHED.problem
    assert Verdict.STARTING.problem
    assert not Verdict.TERMINATING.problem


def test_a_node_whose_component_pod_restarts_is_starting_not_left_over() -> None:
    """During a DaemonSet rollout the Node still carries the old pod's fingerprint while the new pod is Pending:
    that is not yet what the node runs, so the check must not pass on it."""
    nodes, pods = world(dp_fp="0" * 16)
    rolling = [p for p in pods if p.name != "dp-1"]
    rolling += [pod("dp-1", "device-plugin", node="n1", deletion_timestamp=1.0),
                pod("dp-2", "device-plugin", node="n1", phase=PodPhase.PENDING)]
    found = {i.where: i for i in read_instances(configmaps(), nodes, rolling, namespace=NS)
             if i.publisher.component == "device-plugin"}
    assert found["node n1"].verdict is Verdict.STARTING
    assert found["node n1"].pod == f"{NS}/dp-2"


def test_an_instance_without_its_components_configmap_is_a_problem() -> None:
    cms = [c for c in configmaps() if c.component != "controller"]
    assert verdicts(cms, *world())["controller pod kube-system/ctl-1"] is Verdict.NO_CONFIGMAP
    assert Verdict.NO_CONFIGMAP.problem
    assert Verdict.STALE.problem
    assert not Verdict.AGREES.problem


def test_configmap_component_from_label_then_name() -> None:
    assert configmap_component("x", {"app.kubernetes.io/component": "exporter"}) == "exporter"
    assert configmap_component("lj-runtimekit-device-plugin-config", {}) == "device-plugin"
    assert configmap_component("my-config", {}) is None


def test_restart_hints_select_the_components_workloads() -> None:
    # the pods are in kube-system, not gpu: no pod instance there, and the Nodes' annotations are left over
    elsewhere = read_instances(configmaps(device_plugin=NEW, controller=NEW), *world(), namespace="gpu")
    assert {(i.publisher.component, i.verdict) for i in elsewhere} == {
        ("device-plugin", Verdict.LEFT_OVER), ("exporter", Verdict.LEFT_OVER)}
    found = {i.publisher.component: i for i in read_instances(configmaps(), *world(), namespace=NS)}
    selector = "-l app.kubernetes.io/name=lj-runtimekit,app.kubernetes.io/component="
    assert restart_hint(found["controller"], NS) == f"kubectl rollout restart deployment -n {NS} {selector}controller"
    assert restart_hint(found["device-plugin"], NS) == (
        f"kubectl rollout restart daemonset -n {NS} {selector}device-plugin, or for this node only: "
        f"kubectl delete pod -n {NS} dp-1")
    assert {p.component for p in PUBLISHERS} == {"device-plugin", "exporter", "scheduler", "controller"}


# ---------------------------------------------------------------------------------------------- live report
def cluster_with(dp_protocol: ProtocolConstants = DEFAULT, **extra: str) -> InMemoryCluster:
    cluster = InMemoryCluster()
    for component in COMPONENTS:
        protocol = dp_protocol if component == "device-plugin" else DEFAULT
        cluster.create_config_map(ConfigMapObject(
            namespace=NS, name=f"lj-runtimekit-{component}-config", data={"protocol.yaml": dump_protocol(protocol)},
            labels={"app.kubernetes.io/component": component}))
    cluster.create_config_map(ConfigMapObject(namespace=NS, name="unrelated", data={"a": "1"}))
    nodes, pods = world()
    for n in nodes:
        cluster.create_node(n)
    for p in pods:
        cluster.create_pod(p)
        cluster.set_pod_phase(NS, p.name, PodPhase.RUNNING)
    for key, value in extra.items():
        cluster.create_config_map(ConfigMapObject(namespace=NS, name=key, data={"protocol.yaml": value}))
    return cluster


def run(cluster: InMemoryCluster) -> tuple[int, list[str]]:
    lines: list[str] = []
    code = check_cluster(cluster, NS, out=lines.append)
    return code, lines


def test_live_check_agreeing_cluster_exits_0() -> None:
    code, lines = run(cluster_with())
    assert code == 0
    assert f"{FP}  ConfigMap {NS}/lj-runtimekit-device-plugin-config (device-plugin)" in lines
    assert not any("unrelated" in line for line in lines)
    assert f"{FP}  device-plugin on node n1 runs {FP}" in lines
    assert lines[-1] == "protocol check: 5 ConfigMap(s) and 4 running instance(s) agree"


def test_live_check_names_the_stale_instance_and_the_differing_constant() -> None:
    code, lines = run(cluster_with(NEW))
    assert code == 1
    assert (f"problem: device-plugin on node n1 runs {FP}, ConfigMap lj-runtimekit-device-plugin-config has "
            f"{NEW.fingerprint()}: restart it (kubectl rollout restart daemonset -n {NS} -l "
            "app.kubernetes.io/name=lj-runtimekit,app.kubernetes.io/component=device-plugin, or for this node "
            f"only: kubectl delete pod -n {NS} dp-1)") in lines
    assert any(line.startswith("memory-unit: ") and f"ConfigMap {NS}/lj-runtimekit-device-plugin-config='2Gi'"
               in line for line in lines)
    assert lines[-1] == ("protocol check: 1 constant(s) differ across 5 ConfigMap(s); 1 of 4 running instance(s) "
                         "need attention")
    assert sum(line.startswith("problem:") for line in lines) == 1


def test_live_check_refuses_an_invalid_configmap_or_none() -> None:
    with pytest.raises(ProtocolFileError, match=r"ConfigMap kube-system/broken: memory-unit='lots'"):
        run(cluster_with(broken="memory-unit: lots\n"))
    with pytest.raises(ProtocolFileError, match=r"no ConfigMap with protocol\.yaml in namespace kube-system"):
        run(InMemoryCluster())


def test_cli_against_an_unreachable_api_server_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n")
    assert ljrk(["protocol", "check", "--kubeconfig", str(kubeconfig)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "ljrk protocol: error: list configmaps in kube-system: API server unavailable" in err[0]
    assert ljrk(["protocol", "check", "--kubeconfig", str(kubeconfig), "--context", "nope"]) == 2
    assert "cannot load it" in capsys.readouterr().err


def test_live_check_without_any_running_instance_exits_1() -> None:
    """ConfigMaps alone (nothing deployed, or every pod restarting after a rollout) prove nothing: exit 1."""
    cluster = InMemoryCluster()
    for component in COMPONENTS:
        cluster.create_config_map(ConfigMapObject(
            namespace=NS, name=f"lj-runtimekit-{component}-config", data={"protocol.yaml": dump_protocol(DEFAULT)},
            labels={"app.kubernetes.io/component": component}))
    code, lines = run(cluster)
    assert code == 1
    assert lines[-1].startswith(f"protocol check: {len(COMPONENTS)} ConfigMap(s) agree, but no running instance")
