"""What ``ljrk up`` submits: pods with arrival times and run durations, and the Pod objects a user would create.

Two sources, both read once before anything starts:

* ``synthetic`` (default): the embedded workload of ``ljrk simulate``
  (:func:`domain.simulation.synthetic.synthetic_pods`, the published pod mix), shuffled with the seed. It has no
  timeline, so one is drawn: arrivals uniform over :data:`SYNTHETIC_SPAN_S` trace seconds, run durations
  exponential with a mean chosen so that, on average, the pods running at once ask for :data:`TARGET_LOAD` of the
  cluster's GPUs (minimum :data:`MIN_DURATION_S`).
* a pod list in the openb trace format (``PODS.csv``, read by ``adapters.csvtrace``): arrivals at
  ``creation_time`` (relative to the first pod taken) and run durations ``deletion_time − creation_time``; a pod
  without a ``deletion_time`` runs to the end of the run. Pods are taken in creation order. A file without the
  timeline columns (the ``multigpu`` files) gets the synthetic timeline.

Time is compressed by ``speedup`` trace seconds per wall second: given, or chosen so the arrivals take
``duration_s`` wall seconds. The kubelet emulators divide the pods' durations (the
``lj-runtimekit.io/emulated-duration-seconds`` annotation, in trace seconds) by the same factor.

Each pod (:func:`pod_object`) has one container ``main`` whose requests equal its limits: ``cpu``, ``memory`` and,
for GPU pods, our resources — whole GPUs as ``resources.gpu``, a share as ``resources.core`` in percent (its memory
follows the default proportional rule); the trace's model allow-list becomes the GPU-models annotation; the
scheduler name is the protocol's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import attrs
import numpy as np

from domain.kube.objects import ContainerSpec, PodObject, TaintEffect, Toleration
from domain.kube.protocol import ProtocolConstants
from domain.simulation.synthetic import POD_MIX, synthetic_pods
from domain.simulation.workload import TracePod
from domain.units import MILLI_PER_GPU, MILLI_PER_PERCENT

SYNTHETIC = "synthetic"
"""``--workload`` value of the embedded workload."""

SYNTHETIC_SPAN_S = 3600.0
"""Trace seconds over which the synthetic arrivals are spread."""

TARGET_LOAD = 0.8
"""Share of the cluster's GPUs the synthetic pods running at once ask for, on average."""

MIN_DURATION_S = 1.0
"""Shortest synthetic run, trace seconds."""

NAMESPACE = "default"
"""Namespace of the workload's pods."""

MANAGED_BY = ("app.kubernetes.io/managed-by", "ljrk-up")
"""Label on every pod ``ljrk up`` creates (so a run against a real API server can clean up after itself)."""


NOT_READY_TOLERATION = Toleration(key="node.kubernetes.io/not-ready", operator="Exists",
                                  effect=TaintEffect.NO_SCHEDULE)
"""What the pods carry on a real API server: it taints every new Node ``not-ready`` (``TaintNodesByCondition``) and
only a node lifecycle controller, seeing the kubelet report ``Ready``, removes it — the emulated nodes report no
status, so the taint stays and the workload tolerates it."""


class WorkloadError(ValueError):
    """The workload cannot be built (no pods, a share that is not a whole percent); the message says why."""


@attrs.frozen
class Arrival:
    """One pod to submit: ``pod``, ``at_s`` (trace seconds after the first arrival) and ``duration_s`` (trace
    seconds it runs once started; None = until the run ends)."""

    pod: TracePod
    at_s: float
    duration_s: float | None


@attrs.frozen
class Workload:
    """``name`` (``synthetic`` or the file), the ``arrivals`` in time order, and ``span_s``: trace seconds from
    the first to the last arrival."""

    name: str
    arrivals: tuple[Arrival, ...]

    @property
    def span_s(self) -> float:
        """Trace seconds between the first and the last arrival (0 for one pod)."""
        return self.arrivals[-1].at_s if self.arrivals else 0.0

    def speedup_for(self, duration_s: float) -> float:
        """Trace seconds per wall second that make the arrivals take ``duration_s`` wall seconds (> 0); 1.0 when
        every pod arrives at once."""
        return max(self.span_s, 1.0) / duration_s if self.span_s > 0 else 1.0


def _gpu_demand(pod: TracePod) -> float:
    return pod.total_gpu_milli / MILLI_PER_GPU


def synthetic_timeline(pods: Sequence[TracePod], *, cluster_gpus: int, seed: int) -> tuple[Arrival, ...]:
    """Arrivals for ``pods`` (module docstring): uniform over :data:`SYNTHETIC_SPAN_S`, exponential durations
    targeting :data:`TARGET_LOAD` of ``cluster_gpus``; deterministic for ``seed``."""
    rng = np.random.default_rng(seed)
    demand = sum(_gpu_demand(p) for p in pods)
    if demand > 0 and cluster_gpus > 0:
        mean = TARGET_LOAD * cluster_gpus * SYNTHETIC_SPAN_S / demand
    else:
        mean = SYNTHETIC_SPAN_S / 4
    times = np.sort(rng.uniform(0.0, SYNTHETIC_SPAN_S, len(pods)))
    durations = rng.exponential(mean, len(pods))
    start = float(times[0]) if len(pods) else 0.0
    return tuple(Arrival(pod, float(t) - start, max(float(d), MIN_DURATION_S))
                 for pod, t, d in zip(pods, times, durations, strict=True))


def synthetic_workload(count: int, *, cluster_gpus: int, seed: int) -> Workload:
    """``count`` pods of the embedded synthetic workload (module docstring). Raises :class:`WorkloadError` for
    ``count`` < 1."""
    if count < 1:
        raise WorkloadError(f"--pods {count}: need at least one pod")
    total = sum(POD_MIX.values())
    scale = count / total
    pods = synthetic_pods(scale, seed=seed)
    while len(pods) < count:  # rounding per kind may fall short
        scale *= 1.1
        pods = synthetic_pods(scale, seed=seed)
    order = np.random.default_rng(seed).permutation(len(pods))
    chosen = [pods[int(i)] for i in order[:count]]
    return Workload(SYNTHETIC, synthetic_timeline(chosen, cluster_gpus=cluster_gpus, seed=seed))


def trace_workload(
    name: str, pods: Sequence[TracePod], times: Mapping[str, tuple[int | None, int | None]], *, count: int | None,
    cluster_gpus: int, seed: int,
) -> Workload:
    """The first ``count`` pods (None = all) of a trace pod list in creation order with their ``times``
    (``adapters.csvtrace.CsvTraceReader.read_pod_times``); without creation times, the synthetic timeline.
    Raises :class:`WorkloadError` for an empty selection."""
    if count is not None and count < 1:
        raise WorkloadError(f"--pods {count}: need at least one pod")
    if not pods:
        raise WorkloadError(f"{name}: no pods")
    timed = [p for p in pods if times.get(p.name, (None, None))[0] is not None]
    if len(timed) < len(pods):
        chosen = list(pods[:count] if count is not None else pods)
        return Workload(name, synthetic_timeline(chosen, cluster_gpus=cluster_gpus, seed=seed))
    order = sorted(range(len(pods)), key=lambda i: (times[pods[i].name][0] or 0, i))
    selected = [pods[i] for i in (order[:count] if count is not None else order)]
    first = times[selected[0].name][0] or 0
    arrivals = []
    for pod in selected:
        created, deleted = times[pod.name]
        created = created or 0
        arrivals.append(Arrival(pod, float(created - first), None if deleted is None else float(deleted - created)))
    return Workload(name, tuple(arrivals))


def check_pod(pod: TracePod) -> None:
    """Raise :class:`WorkloadError` unless ``pod`` can be written in the protocol's units (a share must be a whole
    percent of a GPU)."""
    if 0 < pod.per_gpu_milli < MILLI_PER_GPU and pod.per_gpu_milli % MILLI_PER_PERCENT:
        raise WorkloadError(f"pod {pod.name}: gpu_milli={pod.gpu_milli} is not a whole percent of a GPU")


def pod_name(pod: TracePod) -> str:
    """A DNS-1123 pod name for a trace pod (lower case; other characters become ``-``)."""
    text = "".join(c if c.isalnum() or c == "-" else "-" for c in pod.name.lower()).strip("-")
    return text[:253] or "pod"


def pod_object(arrival: Arrival, protocol: ProtocolConstants, *, duration_annotation: str,
               tolerations: tuple[Toleration, ...] = ()) -> PodObject:
    """The Pod a user would create for ``arrival`` (module docstring) with ``tolerations``; ``duration_annotation``
    is the kubelet emulator's duration key. Raises :class:`WorkloadError` (see :func:`check_pod`)."""
    pod = arrival.pod
    check_pod(pod)
    resources = {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi"}
    if pod.num_gpu > 0 and pod.gpu_milli == MILLI_PER_GPU:
        resources[protocol.resources.gpu] = str(pod.num_gpu)
    elif pod.num_gpu > 0:
        resources[protocol.resources.core] = str(pod.gpu_milli // MILLI_PER_PERCENT)
    annotations: dict[str, str] = {}
    if arrival.duration_s is not None and math.isfinite(arrival.duration_s):
        annotations[duration_annotation] = f"{arrival.duration_s:.3f}"
    if pod.gpu_spec:
        annotations[protocol.annotations.pod_gpu_models] = ",".join(pod.gpu_spec)
    return PodObject(
        "", NAMESPACE, pod_name(pod),
        containers=(ContainerSpec("main", requests=dict(resources), limits=dict(resources)),),
        scheduler_name=protocol.scheduler_name, annotations=annotations, labels=dict([MANAGED_BY]),
        tolerations=tolerations,
    )
