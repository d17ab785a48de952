"""Do the scheduler's ledger, the Runtimes' allocation records and the exporters' ``/metrics`` tell the same story?

Checked at a quiescent point (no reservation awaiting its binding, no bound pod waiting for admission, no Runtime
release in flight), from three independent sources:

* **ledger** — the scheduler's books (:class:`~domain.ledger.GpuUsage` per GPU,
  :class:`~domain.allocation.PodAllocation` per pod), what it decided;
* **runtime** — each node Runtime's ``ExporterGetDataList`` over gRPC: per GPU the granted core and memory, per
  container its grants (what the device plugin asked for at Allocate, minus what the container runtime released);
* **exporter** — each exporter's ``/metrics`` page over HTTP: ``lj_runtimekit_gpu_core_allocated_ratio`` and
  ``…_gpu_memory_allocated_bytes`` per GPU, ``lj_runtimekit_container_gpu_core_limit_ratio`` and
  ``…_container_gpu_memory_limit_bytes`` per container and GPU (only containers kubelet's pod-resources still lists).

Two comparisons, each keyed by node and GPU UUID:

* per GPU: allocated core (milli-GPU) and memory (bytes) must be equal in all three;
* per container of every *running* pod, per GPU: the grant (core milli-GPU, memory bytes) must be equal in all
  three; a Runtime record or an exporter series of a pod that is not running is a disagreement too (a record that
  outlived its pod).

DRA claims (``ljrk up --dra``): the ledger books a claim as record ``claim:<uid>`` and the Runtime as pod = the
claim, container ``dra-claim``; the exporter serves the claim's row under each container that uses it
(pod-resources). Both of the first two are therefore compared under each app container of the running pods the
claim is reserved for; a claim reserved for no running pod stays under ``namespace/claim``, container
``dra-claim`` (``claim:<uid>`` once the claim object is gone), so a claim that outlived its pods is a
disagreement too.

Ratios on the page are converted back to milli-GPU with rounding; byte values are exact (floats hold integers up
to 2⁵³). Each disagreement names the node, the subject and every source's value (``None`` = that source has none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from adapters.prometheus.scrape import Sample
from domain.allocation import PodAllocation
from domain.dra.booking import claim_record_uid, is_claim_record
from domain.dra.claims import CLAIM_CONTAINER, ClaimAllocation
from domain.kube.objects import PodObject, PodPhase
from domain.ledger import GpuUsage
from domain.runtime.types import ExporterData
from domain.units import MILLI_PER_GPU

SOURCES = ("ledger", "runtime", "exporter")

GPU_CORE = "lj_runtimekit_gpu_core_allocated_ratio"
GPU_MEMORY = "lj_runtimekit_gpu_memory_allocated_bytes"
CONTAINER_CORE = "lj_runtimekit_container_gpu_core_limit_ratio"
CONTAINER_MEMORY = "lj_runtimekit_container_gpu_memory_limit_bytes"

Share = tuple[int, int]
"""``(core milli-GPU, memory bytes)``."""


@attrs.frozen
class Disagreement:
    """One mismatch: ``kind`` (``gpu`` or ``container``), ``node``, ``subject`` (a GPU UUID, or
    ``namespace/pod/container on UUID``) and each source's value (``core_milli``/``memory_bytes``, None when the
    source has nothing for the subject)."""

    kind: str
    node: str
    subject: str
    values: Mapping[str, Share | None]

    def describe(self) -> str:
        """One line: ``node: subject: ledger=… runtime=… exporter=…``."""
        def show(value: Share | None) -> str:
            return "-" if value is None else f"{value[0]}m/{value[1]}B"

        shown = " ".join(f"{source}={show(self.values.get(source))}" for source in SOURCES)
        return f"{self.node}: {self.kind} {self.subject}: {shown}"

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {"kind": self.kind, "node": self.node, "subject": self.subject,
                "values": {s: None if (v := self.values.get(s)) is None else {"core_milli": v[0], "memory_bytes": v[1]}
                           for s in SOURCES}}


@attrs.frozen
class Observation:
    """What the three sources said at one moment: ``ledger_gpus`` (node → GPU books), ``ledger_pods`` (pod UID →
    record), ``pods`` (the cluster's pods), ``runtime`` (node → ``ExporterGetDataList``), ``exporter`` (node →
    samples of its page), ``claims`` (the cluster's ResourceClaims, with ``--dra``)."""

    ledger_gpus: Mapping[str, Sequence[GpuUsage]]
    ledger_pods: Mapping[str, PodAllocation]
    pods: Sequence[PodObject]
    runtime: Mapping[str, ExporterData]
    exporter: Mapping[str, Sequence[Sample]]
    claims: Sequence[ClaimAllocation] = ()


def _milli(ratio: float) -> int:
    return round(ratio * MILLI_PER_GPU)


def gpu_views(observation: Observation) -> dict[str, dict[tuple[str, str], Share]]:
    """Per source: ``(node, uuid)`` → allocated share of that GPU."""
    ledger: dict[tuple[str, str], Share] = {
        (node, str(gpu.uuid)): (gpu.core_used, gpu.memory_used)
        for node, gpus in observation.ledger_gpus.items() for gpu in gpus}
    runtime: dict[tuple[str, str], Share] = {
        (node, str(row.device.gpu.uuid)): (row.allocated_core_milli, row.allocated_memory_bytes)
        for node, data in observation.runtime.items() for row in data.gpus}
    exporter: dict[tuple[str, str], Share] = {}
    for node, samples in observation.exporter.items():
        cores = {s.labels.get("gpu_uuid", ""): _milli(s.value) for s in samples if s.name == GPU_CORE}
        memory = {s.labels.get("gpu_uuid", ""): int(s.value) for s in samples if s.name == GPU_MEMORY}
        for uuid in cores.keys() | memory.keys():
            exporter[(node, uuid)] = (cores.get(uuid, 0), memory.get(uuid, 0))
    return {"ledger": ledger, "runtime": runtime, "exporter": exporter}


ContainerKey = tuple[str, str, str, str]
"""``(node, namespace/pod, container, gpu uuid)``."""


def container_views(observation: Observation) -> dict[str, dict[ContainerKey, Share]]:
    """Per source: ``(node, namespace/pod, container, uuid)`` → the container's grant on that GPU. The ledger's
    side holds the running pods only; the Runtime's and the exporter's hold whatever they report."""
    running = {p.uid: p for p in observation.pods if p.node_name and p.phase is PodPhase.RUNNING}
    uuids = {node: {g.index: str(g.uuid) for g in gpus} for node, gpus in observation.ledger_gpus.items()}
    users = _claim_users(observation.claims, running)
    by_record = {claim_record_uid(c.uid): c.key for c in observation.claims}
    ledger: dict[ContainerKey, Share] = {}
    for uid, record in observation.ledger_pods.items():
        pod = running.get(uid)
        claim = by_record.get(uid, uid if is_claim_record(uid) else None)  # a record of a deleted claim: its key
        if pod is None and claim is None:
            continue
        for container in record.containers:
            for grant in container.grants:
                uuid = uuids.get(record.node, {}).get(grant.gpu_index, f"index {grant.gpu_index}")
                subjects = [(pod.key, container.container)] if pod is not None else users.get(claim or "", [])
                for who, name in subjects or [(claim or "", CLAIM_CONTAINER)]:
                    ledger[(record.node, who, name, uuid)] = (grant.core_milli, grant.memory_bytes)
    runtime: dict[ContainerKey, Share] = {}
    for node, data in observation.runtime.items():
        for row in data.containers:
            subject = f"{row.namespace}/{row.pod_name}"
            if row.container == CLAIM_CONTAINER and subject not in users:  # its claim deleted: the ledger's key
                subject = claim_record_uid(row.pod_uid)
            subjects = users.get(subject, []) if row.container == CLAIM_CONTAINER else []
            for gpu in row.gpus:
                for who, name in subjects or [(subject, row.container)]:
                    runtime[(node, who, name, str(gpu.uuid))] = (gpu.core_milli, gpu.memory_limit_bytes)
    exporter: dict[ContainerKey, Share] = {}
    for node, samples in observation.exporter.items():
        for sample in samples:
            if sample.name not in (CONTAINER_CORE, CONTAINER_MEMORY):
                continue
            labels = sample.labels
            key = (node, f"{labels.get('namespace', '')}/{labels.get('pod', '')}", labels.get("container", ""),
                   labels.get("gpu_uuid", ""))
            core, memory = exporter.get(key, (0, 0))
            if sample.name == CONTAINER_CORE:
                core = _milli(sample.value)
            else:
                memory = int(sample.value)
            exporter[key] = (core, memory)
    return {"ledger": ledger, "runtime": runtime, "exporter": exporter}


def _claim_users(claims: Sequence[ClaimAllocation], running: Mapping[str, PodObject]) -> (
        dict[str, list[tuple[str, str]]]):
    """Claim ``namespace/name`` → ``(namespace/pod, container)`` of each app container of the running pods it is
    reserved for (every app container: the stack's pods do not say which container uses which claim)."""
    return {claim.key: [(pod.key, c.name) for uid in claim.reserved_for if (pod := running.get(uid)) is not None
                        for c in pod.containers if not c.init]
            for claim in claims}


def compare(observation: Observation) -> list[Disagreement]:
    """Every disagreement between the three sources (module docstring), GPUs first, sorted."""
    found: list[Disagreement] = []
    gpus = gpu_views(observation)
    for node, uuid in sorted(set().union(*(view.keys() for view in gpus.values()))):
        values = {source: gpus[source].get((node, uuid)) for source in SOURCES}
        if len(set(values.values())) > 1:
            found.append(Disagreement("gpu", node, uuid, values))
    containers = container_views(observation)
    for key in sorted(set().union(*(view.keys() for view in containers.values()))):
        values = {source: containers[source].get(key) for source in SOURCES}
        if len(set(values.values())) > 1:
            node, pod, container, uuid = key
            found.append(Disagreement("container", node, f"{pod}/{container} on {uuid}", values))
    return found
