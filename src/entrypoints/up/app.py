"""The ``up`` use case: start the stack, submit the workload on its timeline, reach a quiescent point, check that
the components agree, report, stop.

One run (:meth:`UpApp.run`):

1. start every component (:class:`~.stack.LocalStack`) and wait until every node takes pods (plugins registered
   with the kubelet emulator, inventory published, the controller's enable Job done, the exporter pulling) and the
   scheduler serves;
2. create the pods at their arrival times (trace time ÷ speedup), with a progress bar; they run for their
   durations on the kubelet emulators and depart (``Succeeded``);
3. stop arrivals and freeze departures (the emulators' clock is paused), then wait until nothing is in flight
   (:meth:`LocalStack.in_flight <.stack.LocalStack.in_flight>`) and the three sources agree
   (:func:`~.agreement.compare`), for at most ``settle_timeout_s``;
4. write ``report.json`` and print the tables (:mod:`.report`); with ``hold``, keep everything running (time
   flowing again) until SIGINT/SIGTERM;
5. stop everything (:meth:`LocalStack.stop <.stack.LocalStack.stop>`), deleting what it created on a real API
   server.

Exit codes (returned by :meth:`UpApp.run`): :data:`EXIT_OK` — the components agree; :data:`EXIT_DISAGREE` — the
report lists disagreements (or no quiescent point was reached); :data:`EXIT_INTERRUPTED` — SIGINT/SIGTERM before the
report. A stack that does not come up, or a ``report.json`` that cannot be written (after the tables are printed),
raises :class:`UpError` (the entrypoint turns it into exit code 1).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import attrs

from adapters.grpc.kubelet_emulator import DURATION_ANNOTATION
from adapters.prometheus.scrape import Sample, ScrapeError
from domain.kube.objects import ClusterEvent, PodObject
from domain.kube.protocol import ProtocolConstants
from domain.runtime.types import ExporterData
from domain.scheduling.registry import get_policy
from domain.topology.machines import MACHINE_NAMES
from entrypoints._shared.command import EXIT_FAILED as EXIT_FAILED
from entrypoints._shared.command import EXIT_OK as EXIT_OK
from entrypoints._shared.command import EXIT_USAGE as EXIT_USAGE
from entrypoints._shared.command import SettingsError as SettingsError
from ports.cluster import ClusterApi, ClusterError
from ports.progress import ProgressBar
from ports.runtime import NodeRuntimeError
from services.scheduler.policies import DEFAULT_POLICY

from .agreement import Disagreement, Observation, compare, container_views, gpu_views
from .events import EventTap
from .report import Report, Timing, render, summarize_pods, write_json
from .stack import LocalStack
from .workload import MANAGED_BY, NOT_READY_TOLERATION, SYNTHETIC, Workload, pod_object

log = logging.getLogger(__name__)

EXIT_DISAGREE, EXIT_INTERRUPTED = 3, 130

DEFAULT_PODS_PER_NODE = 30
"""Pods submitted per node when ``--pods`` is not given."""

Scraper = Callable[[str, float], Sequence[Sample]]
"""``(url, timeout_s) -> samples`` of a ``/metrics`` page; raises ``ScrapeError``."""


class UpError(Exception):
    """The run cannot go on (the stack did not come up, the cluster refused the pods); the message says why."""


@attrs.frozen
class UpSettings:
    """Validated ``ljrk up`` settings (flags in ``__main__``). Times in seconds.

    ``nodes`` (1..200) with ``gpus_per_node`` each; ``workload``: ``synthetic`` or a pod-list CSV path; ``pods``:
    how many pods (None = :data:`DEFAULT_PODS_PER_NODE` × nodes, capped by the file); ``duration_s``: wall seconds
    the arrivals take (> 0) unless ``speedup`` (trace seconds per wall second, > 0) is given; ``seed``; ``policy``:
    the scheduler's default policy; ``kubeconfig``: a real API server instead of the in-memory cluster;
    ``output_dir``: where ``report.json`` and ``ljrk-up.log`` go; ``progress``: None = bar on a terminal only;
    ``hold``: keep running after the report; ``ready_timeout_s``/``settle_timeout_s``: bounds of steps 1 and 3;
    ``work_dir``: parent of the nodes' host directories; ``log_level``: of the log file; ``topology``: the
    simulated machine of every node (``none`` or a name of :data:`domain.topology.machines.MACHINE_NAMES`);
    ``dra``: the nodes run the DRA driver instead of the device plugin and each GPU pod asks through a ResourceClaim
    (:mod:`.dra`; the in-memory cluster only). Raises :class:`SettingsError`, or
    ``domain.errors.UnknownPolicyError``.
    """

    nodes: int = 4
    gpus_per_node: str = "2x16Gi:A100"
    workload: str = SYNTHETIC
    pods: int | None = None
    duration_s: float = 10.0
    speedup: float | None = None
    seed: int = 42
    policy: str = DEFAULT_POLICY
    kubeconfig: Path | None = None
    output_dir: Path = Path("out/up")
    progress: bool | None = None
    hold: bool = False
    ready_timeout_s: float = 60.0
    settle_timeout_s: float = 20.0
    work_dir: Path = Path("/tmp")
    log_level: str = "INFO"
    topology: str = "none"
    dra: bool = False

    def __attrs_post_init__(self) -> None:
        if self.dra and self.kubeconfig is not None:
            raise SettingsError("--dra runs on the in-memory cluster only: leave out --kubeconfig (on a real cluster, "
                                "deploy the DRA driver: docs/dra.md)")
        if self.topology not in MACHINE_NAMES:
            raise SettingsError(f"--topology {self.topology!r}: choose one of {', '.join(MACHINE_NAMES)}")
        if not 1 <= self.nodes <= 200:
            raise SettingsError(f"--nodes {self.nodes}: must be 1..200")
        if self.pods is not None and self.pods < 1:
            raise SettingsError(f"--pods {self.pods}: must be >= 1")
        if not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise SettingsError(f"--duration {self.duration_s}: must be > 0 seconds")
        if self.speedup is not None and not (math.isfinite(self.speedup) and self.speedup > 0):
            raise SettingsError(f"--speedup {self.speedup}: must be > 0")
        for name in ("ready_timeout_s", "settle_timeout_s"):
            if not getattr(self, name) > 0:
                raise SettingsError(f"{name} must be > 0")
        get_policy(self.policy)

    @property
    def pod_count(self) -> int:
        """Pods to submit (a file may hold fewer)."""
        return self.pods if self.pods is not None else DEFAULT_PODS_PER_NODE * self.nodes

    @property
    def cluster_name(self) -> str:
        """``in-memory`` or ``kubeconfig FILE`` (for the report)."""
        return "in-memory" if self.kubeconfig is None else f"kubeconfig {self.kubeconfig}"


@attrs.frozen
class Settled:
    """Outcome of step 3: ``settled`` (nothing in flight), what was ``in_flight`` otherwise, the last
    ``observation`` and its ``disagreements``."""

    settled: bool
    in_flight: tuple[str, ...]
    observation: Observation
    disagreements: tuple[Disagreement, ...]


def resolve_speedup(settings: UpSettings, workload: Workload) -> float:
    """Trace seconds per wall second: ``settings.speedup``, else what makes the arrivals last ``duration_s``."""
    return settings.speedup or workload.speedup_for(settings.duration_s)


def create_pod(cluster: ClusterApi, stack: LocalStack, pod: PodObject) -> bool:
    """Create ``pod`` (True when the API server took it). A pod the API server refused (4xx) gives back the claim
    the stack made for it; without an answer (status 0: a timeout might have created it) the claim stays. Raises
    :class:`UpError` when a pod of that name already exists (409: a previous run's pods)."""
    try:
        cluster.create_pod(pod)
        return True
    except ClusterError as error:
        if error.status == 409:
            raise UpError(f"pod {pod.key} already exists: delete the pods of an earlier run "
                          f"(label {MANAGED_BY[0]}={MANAGED_BY[1]})") from error
        if 400 <= error.status < 500:
            stack.drop_claim(pod)
        log.warning("pod %s not created: %s", pod.key, error)
        return False


class UpApp:
    """One ``ljrk up`` run (module docstring) over ``stack`` and ``tap`` (the cluster port the stack uses, recording
    Events), submitting ``workload`` in protocol ``protocol`` compressed by ``speedup`` (trace seconds per wall
    second; the stack's kubelets use the same); the table goes to ``stdout``."""

    def __init__(
        self, *, settings: UpSettings, stack: LocalStack, tap: EventTap, workload: Workload,
        protocol: ProtocolConstants, progress: ProgressBar, scrape: Scraper, stdout: TextIO, speedup: float,
    ) -> None:
        self.settings = settings
        self.stack = stack
        self.tap = tap
        self.cluster: ClusterApi = stack.cluster
        self.workload = workload
        self.protocol = protocol
        self.progress = progress
        self.scrape = scrape
        self.stdout = stdout
        self.speedup = speedup
        self.tolerations = () if settings.kubeconfig is None else (NOT_READY_TOLERATION,)
        self.submitted: list[str] = []
        self.report: Report | None = None

    # ------------------------------------------------------------------ the run
    def run(self, stop: threading.Event) -> int:
        """Steps 1-5 (module docstring); returns the exit code. Raises :class:`UpError`, or
        ``simnode.StackError`` when a component does not start (the stack is stopped either way)."""
        began = time.monotonic()
        try:
            self.start(stop)
            if stop.is_set():
                return EXIT_INTERRUPTED
            ready = time.monotonic()
            self.submit(stop)
            if stop.is_set():
                return EXIT_INTERRUPTED
            arrived = time.monotonic()
            self.stack.clock.pause()
            settled = self.settle(stop)
            if stop.is_set():
                return EXIT_INTERRUPTED
            quiescent = time.monotonic()
            timing = Timing(startup_s=ready - began, arrivals_s=arrived - ready, settle_s=quiescent - arrived,
                            total_s=quiescent - began)
            report = self.build_report(settled, timing)
            self.report = report
            try:
                path: Path | None = write_json(report, self.settings.output_dir)
                unwritten: OSError | None = None
            except OSError as error:
                path, unwritten = None, error
            render(report, self.stdout, json_path=path)
            if unwritten is not None:
                raise UpError(f"cannot write the JSON report in {self.settings.output_dir}: {unwritten}")
            if self.settings.hold:
                self.stack.clock.resume()
                print("holding: the stack keeps running; Ctrl-C (SIGINT) or SIGTERM stops it", file=self.stdout,
                      flush=True)
                stop.wait()
            return EXIT_OK if report.agrees else EXIT_DISAGREE
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Close the progress bar and stop the stack (deleting what it created on a real API server first). Never
        raises."""
        self.progress.finish()
        if self.settings.kubeconfig is not None:
            self.stack.delete_created()
        self.stack.stop()

    def start(self, stop: threading.Event) -> None:
        """Step 1. Raises :class:`UpError` when the stack is not ready within ``ready_timeout_s``."""
        self.progress.start(0, unit="node")
        self.progress.describe(f"starting {len(self.stack.nodes)} node(s)")
        self.stack.start()
        problems = self.stack.wait_ready(self.settings.ready_timeout_s, stop)
        if problems:
            raise UpError(f"the stack is not ready after {self.settings.ready_timeout_s:g} s: "
                          + "; ".join(problems[:5]) + ("; …" if len(problems) > 5 else ""))

    def submit(self, stop: threading.Event) -> None:
        """Step 2: create each pod at its arrival time (stops early when ``stop`` is set). Raises :class:`UpError`
        when a pod of that name already exists (a real API server with a previous run's pods)."""
        arrivals = self.workload.arrivals
        self.progress.start(len(arrivals), unit="pod")
        began = time.monotonic()
        described = 0.0
        for arrival in arrivals:
            wait = began + arrival.at_s / self.speedup - time.monotonic()
            if wait > 0 and stop.wait(wait):
                return
            if stop.is_set():
                return
            pod = self.stack.with_claim(pod_object(arrival, self.protocol, duration_annotation=DURATION_ANNOTATION,
                                                   tolerations=self.tolerations), arrival.pod)
            if create_pod(self.cluster, self.stack, pod):
                self.submitted.append(pod.key)
            self.progress.advance(1)
            if time.monotonic() - described > 0.5:
                described = time.monotonic()
                self.progress.describe(self._progress_text())

    def _progress_text(self) -> str:
        totals = {"admitted": 0, "succeeded": 0, "rejected": 0}
        for node in self.stack.nodes.values():
            if node.kubelet is not None:
                counts = node.kubelet.counts()
                for key in totals:
                    totals[key] += counts.get(key, 0)
        return f"placed {totals['admitted']} done {totals['succeeded']} failed {totals['rejected']}"

    # ------------------------------------------------------------------ quiescence and agreement
    def settle(self, stop: threading.Event) -> Settled:
        """Step 3: poll every 0.2 s until nothing is in flight and :func:`compare` finds no disagreement, for at
        most ``settle_timeout_s`` (the sources are read only when nothing is in flight, and once more at the
        deadline); the last observation is returned either way."""
        self.progress.describe("settling")
        deadline = time.monotonic() + self.settings.settle_timeout_s
        while True:
            pods = self._pods()
            moving = tuple(self.stack.in_flight(pods))
            late = time.monotonic() >= deadline or stop.is_set()
            if not moving or late:
                observation, problems = self.observe(pods)
                found = tuple(compare(observation)) if not problems else ()
                moving += tuple(problems)
                if not moving and not found:
                    return Settled(True, (), observation, ())
                if late:
                    return Settled(not moving, moving, observation, found)
            stop.wait(0.2)

    def _pods(self) -> list[PodObject]:
        try:
            return self.stack.pods()
        except ClusterError as error:
            log.warning("cannot list pods: %s", error)
            return []

    def observe(self, pods: list[PodObject]) -> tuple[Observation, list[str]]:
        """Read the three sources (:mod:`.agreement`): the ledger in the scheduler, each Runtime over gRPC, each
        exporter's page over HTTP once it serves a pull made after this call began. Returns the observation and the
        sources that could not be read."""
        since = time.time()
        problems: list[str] = []
        scheduler = self.stack.scheduler
        assert scheduler is not None, "start() first"
        service = scheduler.service
        names = list(self.stack.nodes)
        with service.books() as books:
            ledger_gpus = {n: service.gpus(n) for n in names if service.knows_node(n)}
            ledger_pods = {uid: r for uid, r in books.ledger.records().items() if r.node in self.stack.nodes}
        runtime: dict[str, ExporterData] = {}
        for name, node in self.stack.nodes.items():
            try:
                runtime[name] = node.runtime_data()
            except NodeRuntimeError as error:
                problems.append(f"{name}: Runtime unreadable: {error}")
        exporter: dict[str, Sequence[Sample]] = {}
        for name, url in self.stack.exporter_urls().items():
            samples = self._fresh_page(url, since)
            if samples is None:
                problems.append(f"{name}: no fresh exporter page at {url}")
            else:
                exporter[name] = samples
        claims = () if self.stack.claims is None else self.stack.claims.list_claims().items
        return Observation(ledger_gpus, ledger_pods, pods, runtime, exporter, claims), problems

    def _fresh_page(self, url: str, since: float) -> Sequence[Sample] | None:
        """The page once its data was pulled at or after ``since`` (epoch s), within a few pull intervals."""
        deadline = time.monotonic() + 3 * self.stack.settings.exporter_interval_s + 2.0
        while time.monotonic() < deadline:
            try:
                samples = self.scrape(url, 5.0)
            except ScrapeError as error:
                log.warning("scrape failed: %s", error)
                samples = ()
            ages = [s.value for s in samples if s.name == "lj_runtimekit_exporter_data_age_seconds"]
            if ages and time.time() - ages[0] >= since:
                return samples
            time.sleep(0.1)
        return None

    # ------------------------------------------------------------------ report
    def build_report(self, settled: Settled, timing: Timing) -> Report:
        """The :class:`Report` of this run."""
        key, value = MANAGED_BY
        pods = [p for p in settled.observation.pods if p.labels.get(key) == value]
        events: dict[str, ClusterEvent | None] = {
            p.key: self.tap.last_event("Pod", p.namespace, p.name) for p in pods}
        summary = summarize_pods(pods, submitted=len(self.submitted), last_event=events)
        settings = self.settings
        components: dict[str, object] = {
            "kubelets": {n.name: n.kubelet.counts() for n in self.stack.nodes.values() if n.kubelet is not None},
            "runtime_records_released": sum(n.releaser.released for n in self.stack.nodes.values()
                                            if n.releaser is not None),
            "toggle_jobs": {"succeeded": self.stack.jobs.succeeded if self.stack.jobs else 0,
                            "failed": self.stack.jobs.failed if self.stack.jobs else 0},
        }
        if self.stack.claim_releaser is not None:
            components["claims_released"] = self.stack.claim_releaser.released
        observation = settled.observation
        return Report(
            settings={"nodes": settings.nodes, "gpus_per_node": settings.gpus_per_node,
                      "workload": self.workload.name, "pods": len(self.workload.arrivals),
                      "duration_s": settings.duration_s, "speedup": round(self.speedup, 3), "seed": settings.seed,
                      "policy": settings.policy, "cluster": settings.cluster_name,
                      "gpus_through": "dra" if settings.dra else "device-plugin"},
            timing=timing, pods=summary, gpus=observation.ledger_gpus,
            endpoints={"scheduler": self.stack.scheduler_url(), "controller": self.stack.controller_url(),
                       "exporters": self.stack.exporter_urls(), "device_plugins": self.stack.device_plugin_urls()},
            settled=settled.settled, in_flight=settled.in_flight, disagreements=settled.disagreements,
            gpus_compared=len(gpu_views(observation)["ledger"]),
            containers_compared=len(container_views(observation)["ledger"]),
            components=components,
        )
