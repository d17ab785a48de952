"""The exporter's detector as Kubernetes Events: the pure transition function (``domain.exporter.detector``), the
recorder over the in-memory cluster (``services.exporter.events``) and the collector driving both (no I/O).

Covers: the first state yields Warnings for what is wrong now and nothing else; Runtime unreachable / reachable,
GPU unhealthy / recovered (message names index and UUID), data stale / fresh and XID count increases are one
Event per transition, none per refresh; an XID count that drops is a new baseline; a GPU that appears is
baselined, one that disappears is silent; Events are on the Node (kind, name, uid, namespace ``default``), with
the node name as uid while the Node cannot be read; ``create_event`` errors (API and adapter bugs) are logged and
counted, never raised; a full queue drops and counts; the collector emits only on transitions through several
refreshes, and ``/metrics`` carries ``exporter_events_total{reason}`` and ``exporter_event_errors_total``; the
container wires a cluster override into the collector, and a kubeconfig that cannot be loaded disables Events
with one log line; ``--kubeconfig`` reaches the settings.
"""

from __future__ import annotations

import itertools
import logging
import threading
from pathlib import Path

import attrs
import pytest
from dependency_injector import providers
from prometheus_client.parser import text_string_to_metric_families

from adapters.memory.cluster import InMemoryCluster
from adapters.prometheus.exporter import PrometheusExporterMetrics
from domain.exporter.detector import (
    DATA_FRESH,
    DATA_STALE,
    GPU_RECOVERED,
    GPU_UNHEALTHY,
    MAX_MESSAGE,
    RUNTIME_REACHABLE,
    RUNTIME_UNREACHABLE,
    XID_ERROR,
    DetectorState,
    GpuState,
    Transition,
    detector_state,
    node_event,
    transitions,
)
from domain.exporter.metrics import PREFIX
from domain.exporter.snapshot import Snapshot
from domain.gpu import Gpu, GpuUuid, Health
from domain.kube.objects import ClusterEvent, NodeObject
from domain.runtime.types import ExporterData
from entrypoints.exporter.__main__ import build_parser, settings_from_args
from entrypoints.exporter.app import ExporterSettings
from entrypoints.exporter.containers import ExporterContainer
from entrypoints.runtime.inprocess import InProcessRuntime
from ports.cluster import UnavailableError
from ports.runtime import RuntimeUnavailableError
from services.exporter.collector import SnapshotCollector
from services.exporter.events import NodeEventRecorder

GIB = 1 << 30
NODE = "node-a"
G0 = GpuState(0, GpuUuid("GPU-0"))
G1 = GpuState(1, GpuUuid("GPU-1"))


def _reasons(found: tuple[Transition, ...]) -> list[str]:
    return [t.reason for t in found]


# ---------------------------------------------------------------- the transition function


def test_first_state_reports_only_what_is_wrong_now() -> None:
    assert transitions(None, DetectorState(gpus=(G0, attrs.evolve(G1, xid_counts={79: 3})))) == ()
    first = DetectorState(runtime_up=False, runtime_error="socket gone", data_age_s=99.0, stale=True,
                          gpus=(attrs.evolve(G0, healthy=False, reason="XID 79", xid_counts={79: 2}), G1))
    found = transitions(None, first)
    assert _reasons(found) == [RUNTIME_UNREACHABLE, DATA_STALE, GPU_UNHEALTHY]
    assert all(t.type == "Warning" for t in found)
    assert "socket gone" in found[0].message
    assert found[2].message == "GPU 0 (GPU-0) became unhealthy: XID 79"


def test_runtime_unreachable_and_back_once_each() -> None:
    up, down = DetectorState(gpus=(G0,)), DetectorState(runtime_up=False, runtime_error="deadline", gpus=(G0,))
    sequence = [up, down, down, down, up, up]
    found = [transitions(a, b) for a, b in itertools.pairwise(sequence)]
    assert [_reasons(f) for f in found] == [[RUNTIME_UNREACHABLE], [], [], [RUNTIME_REACHABLE], []]
    assert found[3][0].type == "Normal"


def test_gpu_unhealthy_and_recovered_name_index_and_uuid() -> None:
    sick = attrs.evolve(G1, healthy=False, reason="XID 48")
    healthy, unhealthy = DetectorState(gpus=(G0, G1)), DetectorState(gpus=(G0, sick))
    [went] = transitions(healthy, unhealthy)
    assert (went.reason, went.type) == (GPU_UNHEALTHY, "Warning")
    assert "GPU 1 (GPU-1)" in went.message
    assert transitions(unhealthy, unhealthy) == ()
    [back] = transitions(unhealthy, healthy)
    assert (back.reason, back.type, back.message) == (GPU_RECOVERED, "Normal", "GPU 1 (GPU-1) is healthy again")


def test_xid_count_increase_is_one_event_per_code() -> None:
    def state(**counts: int) -> DetectorState:
        return DetectorState(gpus=(attrs.evolve(G0, xid_counts={int(k[1:]): v for k, v in counts.items()}),))

    found = transitions(state(x13=1), state(x13=3, x79=1))
    assert _reasons(found) == [XID_ERROR, XID_ERROR]
    assert "XID 13 error, 2 new (3 since" in found[0].message
    assert "GPU 0 (GPU-0): XID 79 error, 1 new" in found[1].message
    assert transitions(state(x13=3), state(x13=3)) == ()
    assert transitions(state(x13=3), state()) == ()  # the Runtime restarted: a new baseline
    assert _reasons(transitions(state(), state(x13=1))) == [XID_ERROR]


def test_stale_and_fresh_follow_the_threshold() -> None:
    fresh = Snapshot(pulled_at=100.0, runtime_up=True)
    failing = attrs.evolve(fresh, runtime_up=False, last_error="no answer within 5 s")
    pulled_again = attrs.evolve(fresh, pulled_at=142.0)
    states = [detector_state(s, now=now, stale_after_s=30) for s, now in
              ((fresh, 101.0), (failing, 111.0), (failing, 131.0), (failing, 141.0), (pulled_again, 142.0))]
    assert [s.stale for s in states] == [False, False, True, True, False]
    found = [transitions(a, b) for a, b in itertools.pairwise(states)]
    assert [_reasons(f) for f in found] == [[RUNTIME_UNREACHABLE], [DATA_STALE], [], [RUNTIME_REACHABLE, DATA_FRESH]]
    assert "31 s old" in found[1][0].message
    assert not detector_state(Snapshot(), now=1e9, stale_after_s=30).stale  # nothing pulled yet: nothing stale


def test_gpu_appearing_is_baselined_and_disappearing_is_silent() -> None:
    one, two = DetectorState(gpus=(G0,)), DetectorState(gpus=(G0, attrs.evolve(G1, xid_counts={79: 4})))
    assert transitions(one, two) == ()
    assert transitions(two, one) == ()
    sick = DetectorState(gpus=(G0, attrs.evolve(G1, healthy=False)))
    assert _reasons(transitions(one, sick)) == [GPU_UNHEALTHY]


def test_node_event_shape() -> None:
    event = node_event(Transition(XID_ERROR, "Warning", "x" * 5000), node=NODE, uid="u-1")
    assert event == ClusterEvent("Node", NODE, XID_ERROR, "x" * MAX_MESSAGE, namespace="default", type="Warning",
                                 uid="u-1")


# ---------------------------------------------------------------- the recorder


class BrokenCluster(InMemoryCluster):
    """create_event raises ``error``; ``gate`` (when set) blocks it until released."""

    def __init__(self, error: Exception | None = None) -> None:
        super().__init__()
        self.error = error
        self.gate: threading.Event | None = None

    def create_event(self, event: ClusterEvent) -> None:
        if self.gate is not None:
            self.gate.wait(10)
        if self.error is not None:
            raise self.error
        super().create_event(event)


@pytest.fixture
def cluster() -> BrokenCluster:
    return BrokenCluster()


def _recorder(cluster: InMemoryCluster, **kwargs: int) -> NodeEventRecorder:
    return NodeEventRecorder(cluster, node=NODE, **kwargs)


WARN = Transition(GPU_UNHEALTHY, "Warning", "GPU 0 (GPU-0) became unhealthy")


def test_recorder_writes_events_on_the_node_with_its_uid(cluster: BrokenCluster) -> None:
    node = cluster.create_node(NodeObject(NODE))
    recorder = _recorder(cluster)
    recorder.submit([WARN, Transition(RUNTIME_REACHABLE, "Normal", "back")])
    assert recorder.flush()
    assert [(e.kind, e.name, e.namespace, e.uid, e.reason, e.type) for e in cluster.events] == [
        ("Node", NODE, "default", node.uid, GPU_UNHEALTHY, "Warning"),
        ("Node", NODE, "default", node.uid, RUNTIME_REACHABLE, "Normal"),
    ]
    assert recorder.counts().sent == ((GPU_UNHEALTHY, 1), (RUNTIME_REACHABLE, 1))
    recorder.close()


def test_recorder_uses_the_node_name_as_uid_until_the_node_is_readable(cluster: BrokenCluster) -> None:
    recorder = _recorder(cluster)
    recorder.submit([WARN])
    assert recorder.flush()
    node = cluster.create_node(NodeObject(NODE))
    recorder.submit([WARN])
    assert recorder.flush()
    assert [e.uid for e in cluster.events] == [NODE, node.uid]
    recorder.close()


@pytest.mark.parametrize("error", [UnavailableError("API server down"), RuntimeError("adapter bug")])
def test_create_event_errors_are_logged_and_counted(error: Exception, caplog: pytest.LogCaptureFixture) -> None:
    cluster = BrokenCluster(error)
    recorder = _recorder(cluster)
    recorder.submit([WARN, WARN])
    assert recorder.flush()
    assert recorder.counts().errors == 2
    assert recorder.counts().sent == ()
    assert sum("not recorded" in r.getMessage() for r in caplog.records) == 2
    recorder.close()


def test_full_queue_drops_and_counts(cluster: BrokenCluster) -> None:
    cluster.create_node(NodeObject(NODE))
    cluster.gate = threading.Event()
    recorder = _recorder(cluster, max_pending=2)
    recorder.submit([WARN] * 5)
    assert recorder.counts().errors == 3
    cluster.gate.set()
    assert recorder.flush()
    assert [e.count for e in cluster.events] == [2]  # two writes of one Event: one object, count 2
    recorder.close()
    recorder.submit([WARN])  # closed: counted, not raised
    assert recorder.counts().errors == 4


# ---------------------------------------------------------------- the collector


class FlakyRuntime(InProcessRuntime):
    """exporter_data raises while ``fail``; ``xids`` are added to GPU 0's sample."""

    def __init__(self) -> None:
        super().__init__([Gpu(i, GpuUuid(f"GPU-{i}"), "A100", 16 * GIB) for i in range(2)])
        self.fail = False
        self.xids: dict[int, int] = {}

    def exporter_data(self) -> ExporterData:
        if self.fail:
            raise RuntimeUnavailableError("socket gone")
        data = super().exporter_data()
        first = data.gpus[0]
        gpus = (attrs.evolve(first, sample=attrs.evolve(first.sample, xid_counts=self.xids)), *data.gpus[1:])
        return attrs.evolve(data, gpus=gpus)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _samples(metrics: PrometheusExporterMetrics, name: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            if sample.name == name:
                out[sample.labels.get("reason", "")] = sample.value
    return out


def test_collector_emits_events_on_transitions_only(cluster: BrokenCluster) -> None:
    cluster.create_node(NodeObject(NODE))
    runtime, clock = FlakyRuntime(), Clock()
    recorder = _recorder(cluster)
    collector = SnapshotCollector(runtime, None, interval_s=10, deadline_s=2, clock=clock, events=recorder)
    metrics = PrometheusExporterMetrics(collector.snapshot, node=NODE, clock=clock)

    def step(refreshes: int = 3) -> list[str]:
        """Reasons of the Events recorded by these refreshes, once per occurrence (a repeat folded into an earlier
        Event's count is counted too)."""
        before = [e.count for e in cluster.events]
        for _ in range(refreshes):
            clock.now += 10
            collector.refresh()
        assert recorder.flush()
        counts = [e.count - (before[i] if i < len(before) else 0) for i, e in enumerate(cluster.events)]
        return [e.reason for e, n in zip(cluster.events, counts, strict=True) for _ in range(n)]

    try:
        assert step() == []
        runtime.fail = True
        assert step(2) == [RUNTIME_UNREACHABLE]
        assert step(2) == [DATA_STALE]  # 40 s old > 3 intervals
        runtime.fail = False
        assert step() == [RUNTIME_REACHABLE, DATA_FRESH]
        runtime.set_health("GPU-1", Health.UNHEALTHY, "XID 79")
        runtime.xids = {79: 1}
        assert step() == [XID_ERROR, GPU_UNHEALTHY]  # GPU 0 before GPU 1
        assert "GPU 1 (GPU-1) became unhealthy: XID 79" in [e.message for e in cluster.events]
        runtime.set_health("GPU-1", Health.HEALTHY)
        assert step() == [GPU_RECOVERED]
        sent = _samples(metrics, PREFIX + "exporter_events_total")
        assert sent == {RUNTIME_UNREACHABLE: 1, DATA_STALE: 1, RUNTIME_REACHABLE: 1, DATA_FRESH: 1,
                        GPU_UNHEALTHY: 1, XID_ERROR: 1, GPU_RECOVERED: 1}
        assert _samples(metrics, PREFIX + "exporter_event_errors_total") == {"": 0.0}
        assert all(e.kind == "Node" and e.name == NODE for e in cluster.events)
    finally:
        collector.close()


def test_no_event_families_when_events_are_off() -> None:
    collector = SnapshotCollector(FlakyRuntime(), None, deadline_s=2)
    metrics = PrometheusExporterMetrics(collector.snapshot, node=NODE)
    collector.refresh()
    assert collector.events is None
    assert _samples(metrics, PREFIX + "exporter_event_errors_total") == {}
    collector.close()


# ---------------------------------------------------------------- wiring


def test_container_wires_the_cluster_into_the_collector(tmp_path: Path) -> None:
    settings = ExporterSettings(node_name=NODE, runtime_socket=tmp_path / "rt.sock", listen="127.0.0.1:0")
    container = ExporterContainer(settings=settings)
    cluster = InMemoryCluster()
    node = cluster.create_node(NodeObject(NODE))
    runtime = FlakyRuntime()
    with container.runtime.override(providers.Object(runtime)), \
            container.cluster.override(providers.Object(cluster)):
        app = container.app()
        assert app.collector.events is not None
        app.collector.refresh()
        runtime.fail = True
        app.collector.refresh()
        assert app.collector.events.flush()
        assert [(e.reason, e.uid) for e in cluster.events] == [(RUNTIME_UNREACHABLE, node.uid)]
        assert b"lj_runtimekit_exporter_events_total" in app.exposition()
        app.collector.close()


def test_unloadable_kubeconfig_disables_events_with_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = ExporterSettings(node_name=NODE, runtime_socket=tmp_path / "rt.sock", listen="127.0.0.1:0",
                                kubeconfig=tmp_path / "missing.yaml")
    container = ExporterContainer(settings=settings)
    caplog.set_level(logging.INFO)
    with container.runtime.override(providers.Object(FlakyRuntime())):
        app = container.app()
        assert container.cluster() is None
        assert app.collector.events is None
        app.collector.close()
    lines = [r for r in caplog.records if "Events" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].levelno == logging.WARNING
    assert "disabled" in lines[0].getMessage()
    container.shutdown_resources()


def test_kubeconfig_flag_reaches_settings() -> None:
    args = ["--node-name", "n", "--runtime-socket", "/r.sock", "--listen", "127.0.0.1:9400"]
    assert settings_from_args(build_parser().parse_args(args)).kubeconfig is None
    parsed = settings_from_args(build_parser().parse_args([*args, "--kubeconfig", "/etc/kube.yaml"]))
    assert parsed.kubeconfig == Path("/etc/kube.yaml")
