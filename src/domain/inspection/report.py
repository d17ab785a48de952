"""``ljrk inspect``'s report: per node and GPU, what the API objects say is allocated, who holds it, and what is wrong.

:func:`build_report` books a listing of Nodes and Pods exactly as the scheduler does (a fresh
:class:`~domain.scheduling.sync.LedgerSync`: plans of bound pods, inference for plan-less ones, stale and
foreign inventories gated, impossible books quarantined, pods on vanished GPUs recorded), then reads those books
back per GPU with the holders of each share, the node's MIG instances and the node's flags
(:mod:`domain.inspection.flags`). Given the scheduler's own view (:mod:`domain.inspection.view`), it lists where
the two disagree (:mod:`domain.inspection.compare`).

Units: core in milli-GPU (1000 = one GPU; ``core_percent`` is ``milli / 10``, of 100 per GPU), memory in bytes,
time in epoch seconds. The report is a pure function of its inputs: the same listing, time and view give the same
report. A node without a readable inventory has no GPUs in the report (its bound pods count nowhere).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from domain.dra.booking import CLAIM_RECORD_PREFIX, is_claim_record
from domain.dra.claims import ClaimAllocation
from domain.gpu import Gpu, Health, MigMode
from domain.inspection.compare import Disagreement, compare_view
from domain.inspection.flags import Flag, cluster_flags, node_flags
from domain.inspection.quota import ClaimQuotaReport
from domain.inspection.view import GpuBooks, NodeBooks, SchedulerView
from domain.kube.annotations import MigInstanceRecord
from domain.kube.objects import NodeObject, PodObject
from domain.kube.protocol import ProtocolConstants
from domain.kube.translate import read_node
from domain.ledger import ClusterLedger
from domain.mig.gpu import PlacementMode
from domain.scheduling.mig.books import PLACEHOLDER_PREFIX
from domain.scheduling.sync import LedgerSync
from domain.units import MILLI_PER_GPU, MILLI_PER_PERCENT


@attrs.frozen
class Holder:
    """One container's share of one GPU: pod ``namespace``/``name``, ``container`` (``init``: an init container),
    ``core_milli`` and ``memory_bytes`` granted, and ``source`` (``plan``, ``inferred``, ``assumed``: where the
    books took it from, :class:`~domain.kube.translate.AllocationSource` values)."""

    namespace: str
    name: str
    container: str
    core_milli: int
    memory_bytes: int
    source: str
    init: bool = False

    @property
    def pod_key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


@attrs.frozen
class MigInstanceReport:
    """One MIG instance of a GPU: ``profile``, ``start`` (memory slice), ``uuid`` (``MIG-…``; empty for one not
    created yet or without compute instance), ``free`` (the Runtime lists no container on it; None for an instance
    only booked, to be created at Allocate) and ``holder`` (``namespace/name/container`` of the pod booked on it,
    empty when none)."""

    profile: str
    start: int
    uuid: str
    free: bool | None
    holder: str = ""


@attrs.frozen
class GpuReport:
    """One GPU: identity (``index``, ``uuid``, ``model``, ``memory_bytes``, ``health``, ``mig``: in MIG mode), the
    books (``core_used_milli`` of 1000, ``memory_used_bytes`` of ``memory_bytes``), the ``holders`` of its
    time-sharing shares and, in MIG mode, its ``mig_instances`` by start."""

    index: int
    uuid: str
    model: str
    memory_bytes: int
    health: str
    mig: bool
    core_used_milli: int
    memory_used_bytes: int
    holders: tuple[Holder, ...] = ()
    mig_instances: tuple[MigInstanceReport, ...] = ()

    @property
    def core_percent(self) -> float:
        """Core allocated, % of one GPU (100 = all of it; above 100 only in impossible books)."""
        return self.core_used_milli / MILLI_PER_PERCENT


@attrs.frozen
class NodeReport:
    """One node: ``gpus`` by index, ``flags`` (what is wrong, :class:`~domain.inspection.flags.Flag`), ``gate``
    (why the scheduler would give it no GPU pod now, empty when it would), ``heartbeat`` (the inventory's epoch
    seconds, None without a readable one), ``pod_uids``/``mig_pod_uids`` (pods the books count there, sorted),
    ``gpu_pods`` (``namespace/name`` of the pods holding a share, a whole GPU or a MIG instance there, sorted),
    ``disagreements`` with the scheduler's view and ``enforcement``: what enforces a share there, the node's
    protocol ``enforcement_label`` (``domain.runtime.enforcement``; ``unknown`` when absent)."""

    name: str
    gpus: tuple[GpuReport, ...] = ()
    flags: tuple[Flag, ...] = ()
    gate: str = ""
    heartbeat: float | None = None
    pod_uids: tuple[str, ...] = ()
    mig_pod_uids: tuple[str, ...] = ()
    gpu_pods: tuple[str, ...] = ()
    disagreements: tuple[Disagreement, ...] = ()
    enforcement: str = "unknown"


@attrs.frozen
class Totals:
    """Cluster totals: ``nodes``, ``flagged_nodes``, ``gpus`` (``healthy_gpus``, ``mig_gpus`` among them); core
    allocated and capacity of the time-sharing GPUs (milli-GPU), their memory allocated and capacity (bytes);
    ``gpu_pods``: pods holding a share, a whole GPU or a MIG instance; ``mig_instances`` and ``mig_held``."""

    nodes: int = 0
    flagged_nodes: int = 0
    gpus: int = 0
    healthy_gpus: int = 0
    mig_gpus: int = 0
    core_used_milli: int = 0
    core_capacity_milli: int = 0
    memory_used_bytes: int = 0
    memory_capacity_bytes: int = 0
    gpu_pods: int = 0
    mig_instances: int = 0
    mig_held: int = 0


@attrs.frozen
class InspectionReport:
    """The report (module docstring): ``nodes`` by name, cluster-wide ``flags``, ``totals``, ``generated_at``
    (epoch s), and ``scheduler``: None without a view, else whether it was serving; ``disagreements`` are all
    nodes' together (a node's own are on its :class:`NodeReport`); ``claim_quotas``: the namespaces with a DRA
    claim quota (:mod:`domain.inspection.quota`, added by the caller that lists Namespaces)."""

    nodes: tuple[NodeReport, ...]
    totals: Totals
    generated_at: float
    flags: tuple[Flag, ...] = ()
    scheduler_serving: bool | None = None
    disagreements: tuple[Disagreement, ...] = ()
    claim_quotas: tuple[ClaimQuotaReport, ...] = ()

    @property
    def problems(self) -> bool:
        """True when any node or the cluster is flagged or the scheduler disagrees (``ljrk inspect`` exits 1)."""
        return bool(self.flags or self.disagreements or any(n.flags for n in self.nodes))

    def node(self, name: str) -> NodeReport | None:
        """The report of node ``name``, or None."""
        return next((n for n in self.nodes if n.name == name), None)


def book(nodes: Iterable[NodeObject], pods: Iterable[PodObject], protocol: ProtocolConstants, *, now: float,
         mig_mode: PlacementMode = PlacementMode.STATIC, claims: Iterable[ClaimAllocation] = ()) -> LedgerSync:
    """The scheduler's books of a listing at ``now`` (epoch s): a fresh :class:`LedgerSync` fed every node, then
    every DRA claim and every pod (what the scheduler's rebuild does, without a last-good GPU list: a fresh
    scheduler's view)."""
    sync = LedgerSync(ClusterLedger(), protocol, clock=lambda: now, mig_mode=mig_mode)
    for node in nodes:
        sync.on_node(node)
    for claim in claims:
        sync.on_claim(claim)
    for pod in pods:
        sync.on_pod(pod)
    return sync


def _holders(sync: LedgerSync, name: str, pods: Mapping[str, PodObject]) -> dict[int, list[Holder]]:
    out: dict[int, list[Holder]] = {}
    claims = sync.claims
    for uid in sync.ledger.pods_on(name):
        record, pod = sync.ledger.record(uid), pods.get(uid)
        if record is None:
            continue
        source = sync.sources.get(uid)
        claim = claims.get(uid.removeprefix(CLAIM_RECORD_PREFIX)) if is_claim_record(uid) else None
        if pod is not None:
            namespace, pod_name = pod.namespace, pod.name
        else:  # a DRA claim's record shows as "claim/<name>"
            namespace, pod_name = ("", uid) if claim is None else (claim.namespace, f"claim/{claim.name}")
        for container in record.containers:
            for grant in container.grants:
                out.setdefault(grant.gpu_index, []).append(Holder(
                    namespace, pod_name, container.container, grant.core_milli, grant.memory_bytes,
                    source.value if source is not None else "", container.init))
    return out


def _mig_instances(sync: LedgerSync, name: str, layout: Mapping[int, tuple[MigInstanceRecord, ...]],
                   pods: Mapping[str, PodObject]) -> tuple[dict[int, list[MigInstanceReport]], tuple[str, ...]]:
    """Per GPU index the instances the inventory lists plus those only booked (to be created), with holders; and
    the UIDs with MIG bookings on the node (Runtime placeholders left out)."""
    booked: dict[tuple[int, int], tuple[str, str]] = {}  # (gpu index, start) -> (holder, profile)
    uids: list[str] = []
    if name in sync.mig.node_names():
        for uid, record in sorted(sync.mig.node(name).records().items()):
            if uid.startswith(PLACEHOLDER_PREFIX):
                continue
            uids.append(uid)
            pod = pods.get(uid)
            who = pod.key if pod is not None else uid
            for booking in record.bookings:
                booked[(booking.gpu_index, booking.start)] = (f"{who}/{booking.container}", booking.profile)
    out: dict[int, list[MigInstanceReport]] = {}
    for index, instances in layout.items():
        for instance in instances:
            holder = booked.get((index, instance.start), ("", ""))[0]
            out.setdefault(index, []).append(
                MigInstanceReport(instance.profile, instance.start, instance.uuid, instance.free, holder))
    listed = {(index, i.start) for index, instances in layout.items() for i in instances}
    for (index, start), (holder, profile) in booked.items():
        if (index, start) not in listed:
            out.setdefault(index, []).append(MigInstanceReport(profile, start, "", None, holder))
    return {i: sorted(v, key=lambda m: m.start) for i, v in out.items()}, tuple(uids)


def _gpu_report(gpu: Gpu, books: GpuBooks, holders: list[Holder], mig: list[MigInstanceReport]) -> GpuReport:
    return GpuReport(gpu.index, gpu.uuid, gpu.model, gpu.memory_bytes, gpu.health.value,
                     gpu.mig_mode is MigMode.ENABLED, books.core_used_milli, books.memory_used_bytes,
                     tuple(sorted(holders, key=lambda h: (h.pod_key, h.container))), tuple(mig))


def _totals(nodes: tuple[NodeReport, ...]) -> Totals:
    gpus = [g for n in nodes for g in n.gpus]
    shared = [g for g in gpus if not g.mig]
    instances = [m for g in gpus for m in g.mig_instances]
    return Totals(
        nodes=len(nodes), flagged_nodes=sum(1 for n in nodes if n.flags), gpus=len(gpus),
        healthy_gpus=sum(1 for g in gpus if g.health == Health.HEALTHY.value), mig_gpus=len(gpus) - len(shared),
        core_used_milli=sum(g.core_used_milli for g in shared), core_capacity_milli=MILLI_PER_GPU * len(shared),
        memory_used_bytes=sum(g.memory_used_bytes for g in shared),
        memory_capacity_bytes=sum(g.memory_bytes for g in shared),
        gpu_pods=len({key for n in nodes for key in n.gpu_pods}),
        mig_instances=len(instances), mig_held=sum(1 for m in instances if m.holder or m.free is False))


def build_report(
    nodes: Iterable[NodeObject],
    pods: Iterable[PodObject],
    protocol: ProtocolConstants,
    *,
    now: float,
    view: SchedulerView | None = None,
    mig_mode: PlacementMode = PlacementMode.STATIC,
    claims: Iterable[ClaimAllocation] = (),
) -> InspectionReport:
    """The report of a listing (module docstring) at ``now`` (epoch s), read with ``protocol`` (the one the
    components loaded: its fingerprint decides protocol mismatches); ``view``: the scheduler's books, to list
    disagreements; ``mig_mode``: the scheduler's MIG strategy (a node publishing another is flagged); ``claims``:
    the ResourceClaims, whose DRA allocations of our driver the books count as the scheduler's do. Never raises
    for bad object content: what cannot be read is flagged."""
    node_list = sorted(nodes, key=lambda n: n.name)
    pod_list = list(pods)
    sync = book(node_list, pod_list, protocol, now=now, mig_mode=mig_mode, claims=claims)
    by_uid = {p.uid: p for p in pod_list}
    on_node: dict[str, list[PodObject]] = {}
    for pod in pod_list:
        on_node.setdefault(pod.node_name, []).append(pod)
    reports: list[NodeReport] = []
    ours: dict[str, NodeBooks] = {}
    for node in node_list:
        name = node.name
        reading = read_node(node, protocol, now=now)
        books = {g.index: GpuBooks(g.index, g.uuid, g.core_used, g.core_capacity, g.memory_used, g.memory_capacity)
                 for g in sync.ledger.gpus(name)}
        holders = _holders(sync, name, by_uid)
        mig, mig_uids = _mig_instances(sync, name, reading.mig, by_uid)
        inventory = sync.ledger.inventory(name).gpus
        gpus = tuple(_gpu_report(g, books[g.index], holders.get(g.index, []), mig.get(g.index, []))
                     for g in inventory)
        flags = node_flags(node, gpus=inventory, pods=on_node.get(name, []), sync=sync,
                           protocol=protocol, now=now)
        keys = {h.pod_key for g in gpus for h in g.holders}
        keys |= {by_uid[uid].key if uid in by_uid else uid for uid in mig_uids}
        pod_uids = tuple(sync.ledger.pods_on(name))
        gate, quarantine = sync.gates.get(name, ""), sync.ledger.quarantine.get(name, "")
        reports.append(NodeReport(name, gpus, flags, gate, reading.heartbeat, pod_uids, mig_uids,
                                  tuple(sorted(keys)), enforcement=node.labels.get(protocol.enforcement_label,
                                                                                   "unknown")))
        ours[name] = NodeBooks(name, tuple(books[g.index] for g in inventory), pod_uids, mig_uids, gate, quarantine)
    disagreements: list[Disagreement] = []
    if view is not None:
        labels = {uid: p.key for uid, p in by_uid.items()}
        disagreements = compare_view(ours, view, label=lambda uid: labels.get(uid, uid))
        reports = [attrs.evolve(n, disagreements=tuple(d for d in disagreements if d.node == n.name))
                   for n in reports]
    done = tuple(reports)
    return InspectionReport(done, _totals(done), now, cluster_flags(pod_list, {n.name for n in node_list}, view),
                            None if view is None else view.serving, tuple(disagreements))
