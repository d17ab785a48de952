"""Composition root of ``ljrk up``: which adapter implements each port, and how the stack is assembled.

Providers are annotated with their port types so mypy checks conformance. Settings enter as a validated object (a
``Dependency``). The cluster is a ``Resource``: the in-memory API server twin (:class:`InMemoryCluster`, with a
watch window large enough for thousands of pods) or, with ``--kubeconfig``, the Kubernetes API (the client is closed
at shutdown); every component reaches it through one :class:`~.events.EventTap`. The log file is a ``Resource``
too: JSON lines in ``<output-dir>/ljrk-up.log`` (the terminal keeps the progress bar and the tables). Each
component inside the stack is built by its own container (:mod:`.stack`); the workload is read once, from the
embedded synthetic pods or a trace CSV (``adapters.csvtrace``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

from dependency_injector import containers, providers

from adapters.csvtrace import CsvTraceReader
from adapters.memory.cluster import InMemoryCluster
from adapters.prometheus.scrape import Sample, scrape
from adapters.protocolfile import load_protocol
from adapters.tqdm_progress import TqdmProgress
from domain.kube.protocol import ProtocolConstants
from entrypoints._shared.cluster import api_server
from ports.cluster import ClusterApi
from ports.progress import ProgressBar
from services._shared.logs import configure_logging

from .app import Scraper, UpApp, UpSettings, resolve_speedup
from .events import EventTap, as_cluster
from .jobs import JobMode
from .simnode import StackSettings, node_gpus
from .stack import LocalStack
from .workload import SYNTHETIC, Workload, WorkloadError, check_pod, synthetic_workload, trace_workload

LOG_FILE = "ljrk-up.log"
"""The components' JSON-lines log, in the output folder."""

HISTORY_LIMIT = 100_000
"""Watch window of the in-memory cluster (changes per resource): a 2,000-pod run writes about ten per pod."""


def open_log(settings: UpSettings) -> Iterator[logging.Handler]:
    """Send every log record (JSON lines, ``settings.log_level``) to ``<output_dir>/ljrk-up.log`` until shutdown;
    yields the handler. Raises OSError when the folder or file cannot be created."""
    settings.output_dir.mkdir(parents=True, exist_ok=True)
    with (settings.output_dir / LOG_FILE).open("w", encoding="utf-8") as stream:
        yield from configure_logging(settings.log_level, stream)


def open_cluster(settings: UpSettings) -> Iterator[ClusterApi]:
    """The in-memory cluster, or the API server of ``--kubeconfig`` (its client closed at shutdown). Raises the
    client's configuration errors."""
    if settings.kubeconfig is None:
        yield InMemoryCluster(history_limit=HISTORY_LIMIT)
        return
    yield from api_server(settings.kubeconfig, component="ljrk-up")


def load_workload(settings: UpSettings, trace: CsvTraceReader) -> Workload:
    """The workload of ``--workload`` (``entrypoints.up.workload``), sized for the cluster's GPUs. Raises
    ``ports.trace.TraceError`` (unreadable CSV), :class:`~.workload.WorkloadError` or
    :class:`~.simnode.StackError` (bad ``--gpus-per-node``, or a ``--topology`` that does not fit it)."""
    gpus = settings.nodes * len(node_gpus(settings.gpus_per_node, node="probe", topology=settings.topology))
    if settings.workload == SYNTHETIC:
        workload = synthetic_workload(settings.pod_count, cluster_gpus=gpus, seed=settings.seed)
    else:
        path = Path(settings.workload)
        pods = trace.read_pods(path)
        workload = trace_workload(str(path), pods, trace.read_pod_times(path), count=settings.pod_count,
                                  cluster_gpus=gpus, seed=settings.seed)
    for arrival in workload.arrivals:
        check_pod(arrival.pod)
    if not workload.arrivals:
        raise WorkloadError(f"{workload.name}: no pods to submit")
    return workload


def stack_settings(settings: UpSettings, speedup: float) -> StackSettings:
    """The stack's settings: the flags' node shape, the run's ``speedup``, and Jobs finished by status writes on
    the in-memory cluster (no Job controller) or by pod phases on a real API server."""
    mode = JobMode.JOB_STATUS if settings.kubeconfig is None else JobMode.POD_PHASE
    return StackSettings(nodes=settings.nodes, gpus_per_node=settings.gpus_per_node, speedup=speedup,
                         policy=settings.policy, work_dir=settings.work_dir, job_mode=mode,
                         log_level=settings.log_level, topology=settings.topology, dra=settings.dra)


def scrape_page(url: str, timeout_s: float) -> Sequence[Sample]:
    """:func:`adapters.prometheus.scrape.scrape` as a :data:`~.app.Scraper`."""
    return scrape(url, timeout_s=timeout_s)


def _stdout() -> TextIO:
    return sys.stdout


class UpContainer(containers.DeclarativeContainer):
    """``settings`` (required) → log file, protocol, workload, cluster (tapped), stack, progress, app."""

    settings: providers.Dependency[UpSettings] = providers.Dependency(instance_of=UpSettings)
    logging: providers.Provider[logging.Handler] = providers.Resource(open_log, settings)
    protocol: providers.Provider[ProtocolConstants] = providers.Singleton(load_protocol, None)
    trace: providers.Provider[CsvTraceReader] = providers.Singleton(CsvTraceReader)
    workload: providers.Provider[Workload] = providers.Singleton(load_workload, settings, trace)
    speedup: providers.Provider[float] = providers.Singleton(resolve_speedup, settings, workload)
    cluster: providers.Provider[ClusterApi] = providers.Resource(open_cluster, settings)
    tap: providers.Provider[EventTap] = providers.Singleton(EventTap, cluster)
    tapped: providers.Provider[ClusterApi] = providers.Callable(as_cluster, tap)
    stack: providers.Provider[LocalStack] = providers.Singleton(
        LocalStack, tapped, protocol, providers.Callable(stack_settings, settings, speedup))
    progress: providers.Provider[ProgressBar] = providers.Singleton(TqdmProgress, enabled=settings.provided.progress)
    scrape: providers.Provider[Scraper] = providers.Object(scrape_page)
    stdout: providers.Provider[TextIO] = providers.Callable(_stdout)
    app: providers.Provider[UpApp] = providers.Factory(
        UpApp, settings=settings, stack=stack, tap=tap, workload=workload, protocol=protocol, progress=progress,
        scrape=scrape, stdout=stdout, speedup=speedup)
