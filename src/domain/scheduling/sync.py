"""The ledger's lifecycle, driven by cluster events: :class:`LedgerSync`.

The ledger is derived state (peers.md L3): what it holds must always equal what the API objects say, plus the
reservations this scheduler made that the watch has not confirmed yet. Rules, with the failure case each one
covers:

* every non-terminal pod bound to a known node is counted, whatever its ``schedulerName`` (B08): from its plan
  when the plan is valid, else by inference (:mod:`domain.kube.inference`); pods without GPU requests count
  node CPU, memory and a pod slot; a pod bound to a node not seen yet is counted when the node arrives;
* a pending pod is never counted from its annotations (B07: a leftover plan of an aborted attempt); the
  scheduler's filters check the ledger afresh, and only our own reservation (:meth:`LedgerSync.assume`) counts;
* ``on_pod`` is idempotent and keyed by UID, so an informer Add after our reservation, or a repeated Add,
  changes nothing (B04); :meth:`LedgerSync.forget` rolls a reservation back after a failed bind (B06);
* terminal phases (Succeeded, Failed) release; a terminating pod (``deletion_timestamp`` set) stays counted
  until it is deleted (B03); a delete may arrive as a :class:`Tombstone` holding only the last known state or
  only the key (B01); a periodic :meth:`LedgerSync.resync` catches deletes that never arrived;
* node updates never reset usage (B14): the inventory is replaced, the usage kept; only a change of GPU
  identity (UUIDs, indexes, sizes) re-derives the node's pods from their objects; a node whose inventory is
  missing, malformed, stale, dated in the future or from another protocol is gated for GPU pods
  (:attr:`LedgerSync.gates`, read by :class:`~domain.scheduling.nodefit.NodeGate`) while its pods stay counted:
  a stale, future or foreign inventory still decodes, so its GPUs are used as published; a missing or malformed
  one has no GPUs, so the node keeps the GPU list of the last inventory that decoded (its "last good" list,
  kept until the node is deleted; a rebuild is given it too). A node never seen with a readable inventory (for
  example after a restart) has no GPUs: its GPU pods count node resources only until an inventory arrives;
  :meth:`LedgerSync.tick` re-evaluates heartbeats from the last reading, without decoding annotations again;
* a bound pod that names our GPU resources with a request that cannot be read (invalid, or impossible such as
  2^63 bytes of GPU memory) counts node CPU, memory and a pod slot, and its node is gated for GPU pods while it
  is there, with a reason naming the pod: its GPU usage is unknown, and any booking of it would be a guess smaller
  than what it may hold (issue 16 item 1);
* a node whose books are impossible (a GPU it lists booked beyond 100 % core or beyond its memory, e.g. by plans
  of pods bound by others) is quarantined by the very event that made them so, with a reason naming GPU and pods,
  and admits pods again once they are possible (:mod:`domain.scheduling.overbooking`; issue 16 item 5);
* a bound pod whose plan names a GPU its node's inventory no longer lists stays counted (by inference) and is
  recorded in :attr:`LedgerSync.vanished` until it ends or the GPU is back (:mod:`domain.scheduling.vanished`;
  issue 16 item 6);
* a pod re-created under the same ``namespace/name`` (new UID) while the old one's delete was missed releases
  the old UID first;
* plan-less pods of a node are re-inferred, in UID order, whenever the node's other pods change, so the live
  books are a function of the objects (and the last good GPU lists) alone: :meth:`LedgerSync.rebuild` from a
  full listing gives the same books whatever order the events came in (property-tested);
* a resync is split for callers that must not hold their lock while listing and rebuilding: :meth:`rebuild`
  (reads only this instance's immutable settings when given ``last_good``) and :meth:`adopt` (quick: carries
  the current reservations over and repairs the live books in place).

MIG (:mod:`domain.mig`). Besides the time-sharing ledger, :attr:`LedgerSync.mig` (a
:class:`~domain.mig.plugin.MigPlugin`) holds one :class:`~domain.mig.ledger.MigNodeLedger` per node with GPUs in MIG
mode, in the placement mode ``mig_mode`` (the scheduler's ``--mig-strategy``, which must match the Runtime's):

* the books are built from the inventory annotation's MIG layout (each listed instance becomes a free instance of
  the base layout, its NVML GPU instance id kept) whenever the node's MIG GPUs, their health, the layout or the
  published strategy change (a missing or malformed annotation keeps the last layout that decoded, like the GPU
  list); a GPU whose model has no profile table, or whose layout does not match the table, is left out (noted in
  :attr:`LedgerSync.mig_problems`); a node publishing another MIG strategy than ``mig_mode`` takes no new MIG pod
  (:attr:`LedgerSync.mig_gates`);
* a MIG pod counts node CPU, memory and a pod slot in the time-sharing ledger (its request asks for no time-sharing
  GPU, so its record there is node-only) and its instances in the MIG books: from its plan when bound and the plan
  is trusted (:func:`domain.kube.translate.read_mig_plan`), else from our own reservation; a bound MIG pod without
  either is not in the MIG books (noted in :attr:`problems`): the Runtime's listing still shows its instance held;
* instances the Runtime lists as held (or without compute instance) that no record claims are booked by
  *placeholder* records (pod UID ``runtime-held:<node>/<gpu>/<start>``, never reported as pods): an instance held
  for a pod this scheduler does not count (bound elsewhere, or ended but not yet released by the Runtime) is never
  offered again, and in dynamic mode its slices stay taken, until the Runtime lists it free or gone. Placeholders
  are re-derived after every change of the node's MIG records or layout;
* pods leave the MIG books exactly when they leave the time-sharing ledger (terminal phase, delete, tombstone,
  rebind, node deleted), and :meth:`LedgerSync.rebuild` builds them from API objects only.

Not thread-safe: the caller serialises events and scheduling cycles. Time comes from the injected ``clock``
(epoch seconds); the domain reads no clock itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import attrs

from domain.allocation import PodAllocation
from domain.errors import (
    DomainError,
    InsufficientResourcesError,
    InvalidRequestError,
    LedgerCorruptedError,
    UnknownNodeError,
)
from domain.gpu import Gpu, MigMode, NodeInventory
from domain.kube.annotations import MigInstanceRecord
from domain.kube.inference import infer_allocation
from domain.kube.objects import NodeObject, PodObject, PodPhase
from domain.kube.protocol import ProtocolConstants
from domain.kube.translate import (
    AllocationSource,
    asks_mig,
    inventory_reason,
    mig_pod_request,
    mig_table,
    pod_request,
    read_allocation,
    read_mig_plan,
    read_node,
)
from domain.ledger import ClusterLedger
from domain.mig.errors import MigPlacementError, NoMigCapacityError, UnknownMigProfileError
from domain.mig.gpu import MigGpu, PlacementMode
from domain.mig.ledger import MigBooking, MigNodeLedger, MigPodAllocation
from domain.mig.plugin import MigFilterResult, MigPlan, MigPlugin, MigPodRequest
from domain.mig.profiles import resolve_profile
from domain.request import PodRequest
from domain.scheduling.candidates import rejection_reasons
from domain.scheduling.drift import DriftReport, compare_books
from domain.scheduling.framework import CycleState, Scheduler, ScheduleResult
from domain.scheduling.holds import AdmissionHolds
from domain.scheduling.nodefit import NodeTable, PodConstraints, extended_requests
from domain.scheduling.overbooking import OverbookingGuard, checks_books
from domain.scheduling.vanished import VanishedGpus

PLACEHOLDER_PREFIX = "runtime-held:"
"""Pod UID prefix of the MIG books' placeholder records (module docstring)."""

_NOT_IN_MIG_BOOKS = "not in the MIG books: "


@attrs.frozen
class Tombstone:
    """A delete whose final state is unknown (client-go's ``DeletedFinalStateUnknown``): the pod's
    ``namespace/name`` key and its last known state, when the informer had one."""

    key: str
    obj: PodObject | None = None


def _identity(inventory: NodeInventory) -> tuple[tuple[int, str, int], ...]:
    return tuple((g.index, g.uuid, g.memory_bytes) for g in inventory.gpus)


def _place(booking: MigBooking) -> tuple[int, int]:
    return (booking.gpu_index, booking.start)


def _grouped(reasons: Mapping[str, str]) -> list[tuple[str, int]]:
    """``(reason, node count)`` pairs of a node → reason map, in first-seen order of the sorted nodes."""
    counts: dict[str, int] = {}
    for name in sorted(reasons):
        counts[reasons[name]] = counts.get(reasons[name], 0) + 1
    return list(counts.items())


class LedgerSync:
    """Keeps ``ledger`` equal to the cluster (module docstring).

    Public state: ``ledger``; ``nodes`` (:class:`NodeTable`, slot → last Node object, for the node filters);
    ``gates`` (node name → why it takes no GPU pods); ``constraints`` (pod UID → :class:`PodConstraints` of pods
    being scheduled, for the node filters); ``problems`` (pod UID → why its plan was not used or its request
    could not be read); ``sources`` (pod UID → :class:`AllocationSource` of its record).
    ``assumed_ttl_seconds``: a reservation whose pod is absent from a resync listing is kept this long (the
    pod may have been created after the listing), then dropped as a missed delete.

    MIG (module docstring): ``mig_mode`` (placement mode of every node's MIG books); ``mig`` (the books, per node);
    ``mig_gates`` (node → why it takes no new MIG pod); ``mig_problems`` (node → MIG GPUs left out and why).
    """

    def __init__(
        self,
        ledger: ClusterLedger,
        protocol: ProtocolConstants,
        *,
        clock: Callable[[], float],
        assumed_ttl_seconds: float = 60.0,
        mig_mode: PlacementMode = PlacementMode.STATIC,
        hold_window_seconds: float | None = None,
    ) -> None:
        self.ledger = ledger
        self.holds = AdmissionHolds(hold_window_seconds)
        """Pods bound or reserved here whose devices are not allocated yet (:mod:`domain.scheduling.holds`; off
        unless ``hold_window_seconds`` is given and not 0: the scheduler service turns it on)."""
        self.protocol = protocol
        self.clock = clock
        self.assumed_ttl_seconds = assumed_ttl_seconds
        self.mig_mode = mig_mode
        self.mig = MigPlugin()
        self.mig_gates: dict[str, str] = {}
        self.mig_problems: dict[str, str] = {}
        self._mig_view: dict[str, object] = {}  # node → what its MIG books were built from
        self._mig_layouts: dict[str, dict[int, tuple[MigInstanceRecord, ...]]] = {}
        self._mig_strategy: dict[str, str] = {}
        self._mig_base: dict[str, list[MigGpu]] = {}  # node → base layout built from its inventory
        self._mig_assumed: dict[str, MigPodAllocation] = {}
        self._placeholders: dict[str, set[str]] = {}
        self.nodes = NodeTable()
        self.gates: dict[str, str] = {}
        self._gpu_unknown: dict[str, dict[str, str]] = {}  # node → {pod UID: why its GPU usage is unknown}
        self.constraints: dict[str, PodConstraints] = {}
        self.problems: dict[str, str] = {}
        self.sources: dict[str, AllocationSource] = {}
        self._node_objects: dict[str, NodeObject] = {}
        self._counted: dict[str, NodeInventory] = {}
        self._last_good: dict[str, tuple[Gpu, ...]] = {}
        self._readings: dict[str, tuple[float | None, str]] = {}  # node → (heartbeat, steady reason)
        self._listed: dict[str, PodObject] = {}  # rebuilds only: the listing's pods by UID, until adopted
        self._pods: dict[str, PodObject] = {}
        self._uid_by_key: dict[str, str] = {}
        self._on_node: dict[str, set[str]] = {}
        self._inferred: dict[str, set[str]] = {}
        self._assumed: dict[str, tuple[PodAllocation, float]] = {}
        names = protocol.resources
        try:
            mig_names = set(mig_table(protocol).names)
        except InvalidRequestError:
            mig_names = set()
        self._our_resources = frozenset({names.gpu, names.core, names.memory} | mig_names)
        self.vanished = VanishedGpus(protocol)
        """Bound pods whose plan names GPUs their node no longer lists (:mod:`domain.scheduling.vanished`)."""
        self.books_guard = OverbookingGuard(ledger, label=self._label)
        """Quarantines a node whose books are impossible, after every event that may change them
        (:mod:`domain.scheduling.overbooking`)."""

    def _label(self, uid: str) -> str:
        pod = self._pods.get(uid)
        return uid if pod is None else pod.key

    @property
    def overbooked(self) -> dict[str, str]:
        """Node → why it is quarantined for impossible books (a copy; :mod:`domain.scheduling.overbooking`)."""
        return dict(self.books_guard.overbooked)

    # ------------------------------------------------------------------ nodes
    @checks_books
    def on_node(self, node: NodeObject) -> None:
        """Node added or updated: book its inventory (usage kept, B14; a missing or malformed inventory keeps
        the last good GPU list), refresh its gate, count waiting pods."""
        now = self.clock()
        reading = read_node(node, self.protocol, now=now)
        counted, steady = reading.counted, reading.steady_reason
        kept = self._last_good.get(node.name) if reading.heartbeat is None else None
        if reading.heartbeat is not None:
            self._last_good[node.name] = counted.gpus
        elif kept:
            counted = attrs.evolve(counted, gpus=kept)
            steady = f"{steady}; its pods stay counted on the {len(kept)} GPUs it last published"
        previous = self._counted.get(node.name)
        regroup = previous is None or _identity(previous) != _identity(counted)
        if regroup and previous is not None:
            for uid in self.ledger.pods_on(node.name):
                self.ledger.release(uid)  # GPU indexes may now name other GPUs: re-derive below
        slot = self.ledger.upsert_node(counted)
        self._counted[node.name] = counted
        self._node_objects[node.name] = node
        self._readings[node.name] = (reading.heartbeat, steady)
        self.nodes.put(slot, node)
        self._gate(node.name, inventory_reason(reading.heartbeat, steady, self.protocol, now=now))
        if regroup:
            self._recount_node(node.name)
        elif previous != counted:
            self._reinfer(node.name)  # health decides which GPUs inference prefers
        if reading.heartbeat is not None:
            layout, strategy = dict(reading.mig), reading.mig_strategy
        else:  # missing or malformed: keep the last layout that decoded, like the GPU list
            layout, strategy = self._mig_layouts.get(node.name, {}), self._mig_strategy.get(node.name, "")
        self._update_mig(node.name, counted.gpus, layout, strategy)

    @checks_books
    def on_node_deleted(self, name: str) -> None:
        """Node deleted: forget it and what is booked there. Its pods stay known and are counted again if a node
        of that name returns; reservations of pending pods there are dropped."""
        if name not in self._counted:
            return
        slot = self.ledger.slot(name)
        for uid in self.ledger.remove_node(name):
            self.sources.pop(uid, None)
        self.nodes.drop(slot)
        del self._counted[name]
        self._node_objects.pop(name, None)
        self._last_good.pop(name, None)
        self._readings.pop(name, None)
        self.gates.pop(name, None)
        self._gpu_unknown.pop(name, None)
        self.vanished.forget_node(name)
        self._inferred.pop(name, None)
        for uid, (allocation, _) in list(self._assumed.items()):
            if allocation.node == name:
                del self._assumed[uid]
        self.mig.remove_node(name)
        for table in (self._mig_view, self._mig_layouts, self._mig_strategy, self._placeholders, self.mig_gates,
                      self.mig_problems, self._mig_base):
            table.pop(name, None)
        for uid, mig in list(self._mig_assumed.items()):
            if mig.node == name:
                del self._mig_assumed[uid]

    def tick(self) -> None:
        """Re-evaluate every node's gate at the clock's time (a device plugin that stops heartbeating sends no
        node event, so staleness must be polled). Cheap: it uses each node's last heartbeat and the rest of its
        last reading, never decoding an annotation."""
        now = self.clock()
        protocol = self.protocol
        for name, (heartbeat, steady) in self._readings.items():
            self._gate(name, inventory_reason(heartbeat, steady, protocol, now=now))

    def last_good(self) -> dict[str, tuple[Gpu, ...]]:
        """Per node, the GPUs of the last inventory that decoded (a copy; for :meth:`rebuild`)."""
        return dict(self._last_good)

    def mig_last_good(self) -> dict[str, tuple[dict[int, tuple[MigInstanceRecord, ...]], str]]:
        """Per node, the MIG layout (GPU index → instances) and strategy of the last inventory that decoded (a
        copy; for :meth:`rebuild`)."""
        return {name: (dict(layout), self._mig_strategy.get(name, "")) for name, layout in self._mig_layouts.items()}

    def _gate(self, name: str, reason: str) -> None:
        """Set or clear ``name``'s gate from its inventory ``reason`` and its pods of unknown GPU usage."""
        unknown = self._gpu_unknown.get(name, {})
        if unknown:
            problems = "; ".join(problem for _, problem in sorted(unknown.items()))
            reason = "; ".join(part for part in (reason, f"its GPU usage is unknown: a bound pod's GPU request "
                                                 f"cannot be booked ({problems})") if part)
        if reason:
            self.gates[name] = reason
        else:
            self.gates.pop(name, None)

    def _regate(self, name: str) -> None:
        """Re-evaluate ``name``'s gate at the clock's time from its last reading (a known node only)."""
        reading = self._readings.get(name)
        if reading is not None:
            self._gate(name, inventory_reason(reading[0], reading[1], self.protocol, now=self.clock()))

    def _mark_gpu_unknown(self, node: str, uid: str, problem: str | None) -> None:
        """Record (``problem``) or clear (None) a pod of ``node`` whose GPU usage is unknown; regate on a change."""
        pods = self._gpu_unknown.get(node, {})
        if pods.get(uid) == problem:
            return
        if problem is None:
            pods.pop(uid)
        else:
            pods[uid] = problem
        if pods:
            self._gpu_unknown[node] = pods
        else:
            self._gpu_unknown.pop(node, None)
        self._regate(node)

    # ------------------------------------------------------------------ pods
    def extended_usage(self, node: str) -> dict[str, int]:
        """What the pods bound to ``node`` request of extended resources other than ours (counts; for
        :class:`~domain.scheduling.nodefit.ExtendedResourceFit`). Pods with malformed quantities count 0."""
        used: dict[str, int] = {}
        for uid in self._on_node.get(node, ()):
            pod = self._pods.get(uid)
            if pod is None:
                continue
            try:
                requests = extended_requests(pod, ignore=self._our_resources)
            except InvalidRequestError:
                continue
            for name, amount in requests:
                used[name] = used.get(name, 0) + amount
        return used

    @checks_books
    def on_pod(self, pod: PodObject) -> None:
        """Pod added or updated (module docstring); idempotent. A new UID under a known ``namespace/name``
        first releases the old UID (the old pod's delete was missed)."""
        uid = pod.uid
        previous = self._uid_by_key.get(pod.key)
        if previous is not None and previous != uid:
            self._drop(previous)
        self._uid_by_key[pod.key] = uid
        if pod.phase.terminal:
            self._drop(uid)
            return
        if not pod.node_name:
            if uid in self._pods:  # bindings are permanent; an unbound pod under a known UID is a new object
                self.holds.release(uid)
                self._assumed.pop(uid, None)
                self._mig_assumed.pop(uid, None)
                self._unstore(uid)
            return  # pending: only our own reservation counts, never a plan on the pod (B07)
        old = self._pods.get(uid)
        if old is not None and old.node_name != pod.node_name:
            self._unstore(uid)
        self._pods[uid] = pod
        self._track_hold(pod)
        self._on_node.setdefault(pod.node_name, set()).add(uid)
        self.constraints.pop(uid, None)
        if pod.node_name not in self._counted:
            self.problems[uid] = f"node {pod.node_name} not known yet"
            return
        if self._count(uid):
            self._reinfer(pod.node_name)

    def _track_hold(self, pod: PodObject) -> None:
        """A bound pod holds its node while Pending without the device plugin's allocated mark."""
        if pod.phase is not PodPhase.PENDING or self.protocol.annotations.pod_allocated in pod.annotations:
            self.holds.release(pod.uid)
            return
        try:
            request = pod_request(pod, self.protocol)
        except InvalidRequestError:
            self.holds.release(pod.uid)
            return
        self.holds.hold(pod.uid, pod.node_name, request, label=pod.key, now=self.clock())

    def held_nodes(self, request: PodRequest) -> dict[str, str]:
        """``{node: reason}``: nodes holding a pod ``request`` could be confused with at Allocate
        (:meth:`AdmissionHolds.held_nodes` at the clock's time)."""
        return self.holds.held_nodes(request, now=self.clock())

    def uid_of(self, key: str) -> str | None:
        """The UID last seen under ``namespace/name``, if any."""
        return self._uid_by_key.get(key)

    @checks_books
    def on_pod_deleted(self, item: PodObject | Tombstone) -> bool:
        """Pod deleted, plainly or as a :class:`Tombstone` (B01); returns True when something was forgotten."""
        if isinstance(item, Tombstone):
            uid = item.obj.uid if item.obj is not None else self._uid_by_key.get(item.key)
            key = item.key
        else:
            uid, key = item.uid, item.key
        if uid is None:
            return False
        if self._uid_by_key.get(key) == uid:
            del self._uid_by_key[key]
        known = uid in self._pods or uid in self._assumed or uid in self.ledger
        self._drop(uid)
        return known

    def _count(self, uid: str) -> bool:
        """Book a stored bound pod; returns True when the node's plan-less pods must be re-inferred."""
        pod = self._pods[uid]
        node = pod.node_name
        assumed = self._assumed.get(uid)
        reading = read_allocation(pod, self._counted[node].gpus, self.protocol,
                                  assumed=None if assumed is None else assumed[0], infer=False)
        self._note(uid, reading.problem)
        self._mark_gpu_unknown(node, uid, reading.problem if reading.gpu_unknown else None)
        judged = node in self._last_good and reading.source is not AllocationSource.PLAN  # a trusted plan: all listed
        self.vanished.track(pod, self._counted[node].gpus if judged else None)
        self._count_mig(uid)
        if reading.source is not AllocationSource.ASSUMED:
            self._assumed.pop(uid, None)  # the API object now speaks for the pod
        inferred = self._inferred.setdefault(node, set())
        if reading.source is AllocationSource.INFERRED:
            inferred.add(uid)
            return True
        was_inferred = uid in inferred
        inferred.discard(uid)
        assert reading.allocation is not None
        self.sources[uid] = reading.source
        try:
            changed = self.ledger.observe(reading.allocation)
        except InvalidRequestError as error:  # an assumption naming a GPU the node no longer has
            self._assumed.pop(uid, None)
            self.problems[uid] = f"reservation dropped: {error}"
            inferred.add(uid)
            return True
        return bool(inferred) and (changed or was_inferred)

    def _reinfer(self, node: str) -> None:
        """Re-place every plan-less pod of ``node``, in UID order, on top of the others."""
        inferred = self._inferred.get(node)
        if not inferred or node not in self._counted:
            return
        for uid in inferred:
            self.ledger.release(uid)
        gpus = self._counted[node].gpus
        for uid in sorted(inferred):
            request = pod_request(self._pods[uid], self.protocol)  # readable: unreadable ones are node-only
            allocation, note = infer_allocation(request, node, gpus, self.ledger)
            self.ledger.observe(allocation)
            self.sources[uid] = AllocationSource.INFERRED
            if note:
                self.problems[uid] = "; ".join(p for p in (self.problems.get(uid, ""), note) if p)

    def _recount_node(self, node: str) -> None:
        """Re-derive every pod booked on or bound to ``node`` from the stored objects and reservations."""
        for uid in self.ledger.pods_on(node):
            self.ledger.release(uid)
        self._inferred[node] = set()
        for uid in sorted(self._on_node.get(node, ())):
            self._count(uid)
        for uid, (allocation, _) in list(self._assumed.items()):
            if allocation.node == node and uid not in self._pods:
                try:
                    self.ledger.observe(allocation)
                except InvalidRequestError as error:
                    del self._assumed[uid]
                    self.problems[uid] = f"reservation dropped: {error}"
        self._reinfer(node)

    def _unstore(self, uid: str) -> None:
        pod = self._pods.pop(uid, None)
        self.vanished.forget(uid)
        self._release_mig(uid)
        record = self.ledger.release(uid)
        self.sources.pop(uid, None)
        if pod is not None:
            self._on_node.get(pod.node_name, set()).discard(uid)
            self._inferred.get(pod.node_name, set()).discard(uid)
            if uid in self._gpu_unknown.get(pod.node_name, {}):
                self._mark_gpu_unknown(pod.node_name, uid, None)
        if record is not None:
            self._inferred.get(record.node, set()).discard(uid)
            self._reinfer(record.node)  # the node's plan-less pods may now sit elsewhere

    def _drop(self, uid: str) -> None:
        self.holds.release(uid)
        self._assumed.pop(uid, None)
        self._mig_assumed.pop(uid, None)
        self.constraints.pop(uid, None)
        self.problems.pop(uid, None)
        self._unstore(uid)

    def _note(self, uid: str, problem: str) -> None:
        if problem:
            self.problems[uid] = problem
        else:
            self.problems.pop(uid, None)

    # ------------------------------------------------------------------ MIG books
    def _mig_gpus(self, name: str, gpus: Iterable[Gpu], layout: Mapping[int, tuple[MigInstanceRecord, ...]]
                  ) -> tuple[list[MigGpu], list[str]]:
        """The node's GPUs in MIG mode as :class:`MigGpu` base layouts, and why others were left out."""
        out: list[MigGpu] = []
        problems: list[str] = []
        for gpu in gpus:
            if gpu.mig_mode is not MigMode.ENABLED:
                continue
            try:
                mig = MigGpu.from_gpu(gpu, mode=self.mig_mode)
                for instance in layout.get(gpu.index, ()):
                    profile = resolve_profile(mig.model, instance.profile)
                    mig = mig.with_free(profile, instance.start, instance_id=str(instance.gpu_instance_id))
            except DomainError as error:  # no profile table, or a listing the table does not allow
                problems.append(f"GPU {gpu.index} ({gpu.model}) left out of the MIG books: {error}")
                continue
            out.append(mig)
        return out, problems

    def _update_mig(self, name: str, gpus: tuple[Gpu, ...], layout: dict[int, tuple[MigInstanceRecord, ...]],
                    strategy: str) -> None:
        """Rebuild the node's MIG books when what they are built from changed (module docstring)."""
        mig_gpus = tuple((g.index, g.uuid, g.model, g.memory_bytes, g.health) for g in gpus
                         if g.mig_mode is MigMode.ENABLED)
        view = (mig_gpus, tuple(sorted(layout.items())), strategy)
        if self._mig_view.get(name) == view:
            return
        self._mig_view[name] = view
        self._mig_layouts[name], self._mig_strategy[name] = layout, strategy
        if strategy and strategy != self.mig_mode.value:
            self.mig_gates[name] = (f"node runs the MIG strategy {strategy}, this scheduler {self.mig_mode.value} "
                                    "(start both with the same --mig-strategy)")
        else:
            self.mig_gates.pop(name, None)
        books, problems = self._mig_gpus(name, gpus, layout)
        if problems:
            self.mig_problems[name] = "; ".join(problems)
        else:
            self.mig_problems.pop(name, None)
        self._placeholders.pop(name, None)
        if not books:
            self._mig_base.pop(name, None)
            self.mig.remove_node(name)
            return
        self._mig_base[name] = books
        self.mig.add_node(MigNodeLedger(name, books))
        for uid in sorted(self._on_node.get(name, ())):
            if uid in self._pods:
                self._count_mig(uid, refresh=False)
        for uid, mig in sorted(self._mig_assumed.items()):
            if mig.node == name and uid not in self._pods:
                self._observe_mig(mig, refresh=False)
        self._refresh_placeholders(name)

    def _refresh_placeholders(self, name: str) -> None:
        """Re-derive the node's placeholder records (module docstring)."""
        if name not in self.mig.node_names():
            self._placeholders.pop(name, None)
            return
        books = self.mig.node(name)
        for uid in self._placeholders.pop(name, set()):
            books.release(uid)
        # the Runtime's listing is the base layout: an instance the books dropped when its record was released
        # (created for it, dynamic strategy) is still there until the Runtime lists it gone
        books.update_gpus(self._mig_base.get(name, ()))
        claimed = {_place(b) for record in books.records().values() for b in record.bookings}
        held: set[str] = set()
        for index, instances in sorted(self._mig_layouts.get(name, {}).items()):
            try:
                gpu = books.gpu(index)
            except KeyError:
                continue
            for instance in instances:
                if (index, instance.start) in claimed or (instance.free and instance.usable):
                    continue
                profile = gpu.model.lookup(instance.profile)
                there = gpu.instance_at(instance.start)
                if profile is None or there is None or there.owner is not None or there.profile != profile:
                    continue  # not in the base layout, or taken by a (parked) record: nothing to hold
                uid = f"{PLACEHOLDER_PREFIX}{name}/{index}/{instance.start}"
                books.observe(MigPodAllocation(uid, name, (MigBooking(index, profile.name, instance.start,
                                                                      "runtime"),)))
                gpu = books.gpu(index)
                held.add(uid)
        self._placeholders[name] = held

    def _mig_fits_books(self, allocation: MigPodAllocation) -> str:
        """Why ``allocation`` cannot even be recorded in its node's books (unknown node, GPU or profile), or
        empty."""
        if allocation.node not in self.mig.node_names():
            return f"node {allocation.node} has no GPU in MIG mode with a profile table"
        books = self.mig.node(allocation.node)
        for booking in allocation.bookings:
            try:
                gpu = books.gpu(booking.gpu_index)
            except KeyError:
                return f"GPU {booking.gpu_index} of node {allocation.node} is not in the MIG books"
            if gpu.model.lookup(booking.profile) is None:
                return f"GPU {booking.gpu_index} ({gpu.model.key}) has no MIG profile {booking.profile}"
        return ""

    def _observe_mig(self, allocation: MigPodAllocation, *, refresh: bool = True) -> str:
        """Count ``allocation`` in the MIG books (idempotent; placeholders step aside); returns why it could not
        be recorded, or empty."""
        problem = self._mig_fits_books(allocation)
        if problem:
            self._release_mig(allocation.pod_uid)
            return problem
        name = allocation.node
        books = self.mig.node(name)
        for uid in self._placeholders.pop(name, set()):
            books.release(uid)
        self.mig.observe(allocation)
        if refresh:
            self._refresh_placeholders(name)
        else:
            self._placeholders[name] = set()
        return ""

    def _release_mig(self, uid: str) -> None:
        record = self.mig.unreserve(uid)
        if record is not None:
            self._refresh_placeholders(record.node)

    def _count_mig(self, uid: str, *, refresh: bool = True) -> None:
        """Count a stored bound pod's MIG instances: its trusted plan, else our reservation (module docstring)."""
        pod = self._pods[uid]
        if not asks_mig(pod, self.protocol):
            return
        name = pod.node_name
        reading = read_mig_plan(pod, self._counted[name].gpus, self.protocol)
        allocation = reading.allocation
        if allocation is not None:
            self._mig_assumed.pop(uid, None)
        else:
            assumed = self._mig_assumed.get(uid)
            allocation = assumed if assumed is not None and assumed.node == name else None
        problem = reading.problem
        if allocation is not None:
            problem = self._observe_mig(allocation, refresh=refresh)
        else:
            self._release_mig(uid)
        if problem:
            self.problems[uid] = f"{_NOT_IN_MIG_BOOKS}{problem}"
        elif self.problems.get(uid, "").startswith(_NOT_IN_MIG_BOOKS):
            del self.problems[uid]

    def _reserve_mig(self, allocation: MigPodAllocation) -> None:
        """Book a MIG reservation all-or-nothing. Raises :class:`NoMigCapacityError`, :class:`MigPlacementError`,
        :class:`InvalidRequestError` (unknown node, GPU or profile; booked differently) or
        :class:`LedgerCorruptedError` (parked records on the node)."""
        problem = self._mig_fits_books(allocation)
        if problem:
            raise InvalidRequestError(f"pod[{allocation.pod_uid}].mig", allocation.node, problem)
        self.mig.reserve(MigPlan(allocation, ()))

    @property
    def mig_assumed(self) -> dict[str, MigPodAllocation]:
        """MIG reservations not yet confirmed by a trusted plan on the bound pod, by pod UID (a copy)."""
        return dict(self._mig_assumed)

    def mig_record(self, uid: str) -> MigPodAllocation | None:
        """The MIG books' record of pod ``uid`` (plan or reservation), or None."""
        return self.mig.record(uid)

    def mig_instance_ids(self, node: str) -> dict[tuple[int, int], str]:
        """``(gpu index, start)`` → NVML GPU instance id of the instances the node's Runtime listed (for plans)."""
        layout = self._mig_layouts.get(node, {})
        return {(index, i.start): str(i.gpu_instance_id) for index, instances in layout.items() for i in instances}

    def mig_held_problem(self, uid: str) -> str:
        """Why pod ``uid``'s MIG reservation must not be kept (gone, node gated, a GPU gone or unhealthy, the
        record parked), or empty."""
        mig = self._mig_assumed.get(uid)
        if mig is None or self.mig.record(uid) != mig:
            return "its MIG reservation is gone"
        node = mig.node
        if node in self.mig_gates:
            return f"node {node} takes no MIG pods: {self.mig_gates[node]}"
        books = self.mig.node(node)
        if uid in books.conflicts:
            return f"its MIG record on node {node} no longer applies: {books.conflicts[uid]}"
        for booking in mig.bookings:
            if not books.gpu(booking.gpu_index).healthy:
                return f"MIG GPU {booking.gpu_index} of node {node} is unhealthy"
        return ""

    def _mig_request(self, request: PodRequest) -> MigPodRequest:
        return MigPlugin.admit(mig_pod_request(request))

    def mig_filter(self, request: PodRequest, names: Iterable[str]) -> MigFilterResult:
        """Plan ``request``'s MIG instances on each node of ``names`` (nodes in :attr:`mig_gates` are refused with
        that reason); nothing is booked. Raises :class:`InvalidRequestError` / :class:`UnknownMigProfileError`
        for a request without (valid) MIG asks."""
        admitted = self._mig_request(request)
        names = list(names)
        gated = {n: f"takes no MIG pods: {self.mig_gates[n]}" for n in names if n in self.mig_gates}
        result = self.mig.filter(admitted, [n for n in names if n not in gated])
        return MigFilterResult(result.plans, {**result.reasons, **gated})

    def _schedule_mig(self, scheduler: Scheduler, request: PodRequest
                      ) -> tuple[ScheduleResult, MigPodAllocation | None]:
        """One cycle for a MIG pod: ``scheduler``'s filters for the node-level checks (candidates, node fit,
        toggle, gate, CPU, memory, pod slots), then the MIG plugin's filter and selection (lowest fragmentation
        loss, ties by node name) among the nodes left, then the node-only record in the time-sharing ledger and the
        instances in the MIG books, both or neither."""
        uid = request.uid
        existing = self.ledger.record(uid)
        if existing is not None:
            return ScheduleResult(uid, existing, reason="already counted", feasible_nodes=1), self.mig.record(uid)
        try:
            result = self.mig_filter(request, ())
        except (InvalidRequestError, UnknownMigProfileError) as error:
            return ScheduleResult(uid, None, reason=f"invalid request: {error}"), None
        slots, rejected = scheduler.feasible(request, CycleState())
        result = self.mig_filter(request, (self.ledger.name(int(slot)) for slot in slots))
        plans, reasons = dict(result.plans), dict(result.reasons)
        while plans:
            plan = MigPlugin.select(MigFilterResult(plans, reasons))
            assert plan is not None
            node = plan.allocation.node
            mig = MigPodAllocation(uid, node, tuple(sorted(plan.allocation.bookings, key=_place)))
            allocation = PodAllocation(uid, node, (), cpu_milli=request.cpu_milli, memory_bytes=request.memory_bytes)
            try:
                self.ledger.reserve(allocation)
            except (InsufficientResourcesError, LedgerCorruptedError, InvalidRequestError, UnknownNodeError) as error:
                reasons[node] = str(error)
                del plans[node]
                continue
            try:
                self._reserve_mig(mig)
            except (NoMigCapacityError, MigPlacementError, LedgerCorruptedError, InvalidRequestError) as error:
                self.ledger.release(uid)
                reasons[node] = str(error)
                del plans[node]
                continue
            return ScheduleResult(uid, allocation, feasible_nodes=len(plans), rejected=tuple(rejected)), mig
        rejected += [(f"MIG: {why}", count) for why, count in _grouped(reasons)]
        detail = "; ".join(f"{count} node(s): {why}" for why, count in rejected) or "no nodes available"
        return ScheduleResult(uid, None, reason=f"0 nodes available: {detail}", rejected=tuple(rejected)), None

    def mig_reasons(self, scheduler: Scheduler, request: PodRequest, names: Iterable[str], *, fallback: str
                    ) -> dict[str, str]:
        """Per node of ``names``, why it cannot take MIG pod ``request``: the first node-level filter that removes
        it (:func:`~domain.scheduling.candidates.rejection_reasons`), else the MIG plugin's reason, else
        ``fallback``. Never raises for the request (its problem becomes every node's reason)."""
        names = list(names)
        reasons = rejection_reasons(scheduler, request, names, fallback=fallback)
        passed = [n for n, why in reasons.items() if why == fallback]
        try:
            result = self.mig_filter(request, passed)
        except (InvalidRequestError, UnknownMigProfileError) as error:
            return dict.fromkeys(names, f"invalid request: {error}")
        for name, why in result.reasons.items():
            reasons[name] = f"MIG: {why}"
        return reasons

    # ------------------------------------------------------------------ reservations
    @checks_books
    def assume(self, allocation: PodAllocation, *, mig: MigPodAllocation | None = None) -> None:
        """Count our reservation of a pending pod until the watch confirms it (keyed by UID, B04); ``mig``: its
        MIG instances (a MIG pod's ``allocation`` is node-only).

        Books it with :meth:`ClusterLedger.reserve` unless the ledger already holds this exact record (the
        scheduler reserved it), and ``mig`` in the MIG books likewise, both or neither. Raises what ``reserve``
        raises (and what the MIG books' ``reserve`` raises). A pod already seen bound is left to its object.
        """
        uid = allocation.pod_uid
        if uid in self._pods:
            return
        booked = False
        if self.ledger.record(uid) != allocation:
            self.ledger.reserve(allocation)
            booked = True
        if mig is not None and self.mig.record(uid) != mig:
            try:
                self._reserve_mig(mig)
            except DomainError:
                if booked:
                    self.ledger.release(uid)
                raise
        if mig is not None:
            self._mig_assumed[uid] = mig
        self._assumed[uid] = (allocation, self.clock())
        self.sources[uid] = AllocationSource.ASSUMED
        self._reinfer(allocation.node)

    @checks_books
    def forget(self, uid: str) -> bool:
        """Roll back our reservation of ``uid`` (bind failed, B06); idempotent; returns True if one existed.

        A pod already seen bound stays counted from its object.
        """
        entry = self._assumed.pop(uid, None)
        mig = self._mig_assumed.pop(uid, None)
        if uid not in self._pods:
            self.holds.release(uid)
        if uid in self._pods:
            if mig is not None:
                self._count_mig(uid)  # only a trusted plan counts now
            return entry is not None
        self._release_mig(uid)
        record = self.ledger.release(uid)
        self.sources.pop(uid, None)
        if record is not None:
            self._reinfer(record.node)
        return entry is not None or record is not None

    @property
    def assumed(self) -> dict[str, PodAllocation]:
        """Reservations not yet confirmed by the watch, by pod UID (a copy)."""
        return {uid: allocation for uid, (allocation, _) in self._assumed.items()}

    def attach(self, scheduler: Scheduler) -> None:
        """Make every unreserve of ``scheduler`` (failed bind, B06) forget the reservation here too."""

        def rollback(pod: PodRequest, allocation: PodAllocation) -> None:
            self.forget(allocation.pod_uid)

        scheduler.on_unreserve.append(rollback)

    def schedule(self, scheduler: Scheduler, pod: PodObject) -> ScheduleResult:
        """One scheduling cycle for a pending ``pod``: translate, record its node constraints, run ``scheduler``
        (which must share this ledger), and assume the reservation. Never raises for bad pod content: an
        invalid request (B12) becomes an unscheduled result whose reason names the container, resource and
        value."""
        try:
            request = pod_request(pod, self.protocol)
        except InvalidRequestError as error:
            return ScheduleResult(pod.uid or pod.key, None, reason=f"invalid request: {error}")
        self.constraints[pod.uid] = PodConstraints.of(pod, ignore=self._our_resources)
        if request.wants_mig:
            result, mig = self._schedule_mig(scheduler, request)
            if result.allocation is not None:
                self.assume(result.allocation, mig=mig)
        else:
            result = scheduler.schedule(request)
            if result.allocation is not None:
                self.assume(result.allocation)
        if result.allocation is not None and pod.uid not in self._pods:
            self.holds.hold(pod.uid, result.allocation.node, request, label=pod.key, now=self.clock())
        return result

    # ------------------------------------------------------------------ rebuild and resync
    def rebuild(
        self,
        nodes: Iterable[NodeObject],
        pods: Iterable[PodObject],
        *,
        keep_assumed: bool = False,
        last_good: Mapping[str, tuple[Gpu, ...]] | None = None,
        mig_last_good: Mapping[str, tuple[Mapping[int, tuple[MigInstanceRecord, ...]], str]] | None = None,
    ) -> LedgerSync:
        """A new :class:`LedgerSync` on a fresh ledger, built from API objects only (same protocol and clock).

        ``last_good``: per node, the GPU list a node with a missing or malformed inventory is counted on (default:
        this instance's, :meth:`last_good`); ``mig_last_good`` likewise its MIG layout and strategy (default:
        :meth:`mig_last_good`). Given explicitly and with ``keep_assumed`` False, this reads nothing
        of this instance that changes, so a caller may run it without its lock and :meth:`adopt` the result under
        it. With ``keep_assumed``, this instance's reservations are carried over (see :meth:`adopt`).
        """
        fresh = LedgerSync(ClusterLedger(max_gpus=self.ledger.max_gpus), self.protocol, clock=self.clock,
                           assumed_ttl_seconds=self.assumed_ttl_seconds, mig_mode=self.mig_mode,
                           hold_window_seconds=self.holds.window_s)
        fresh._last_good = dict(self._last_good if last_good is None else last_good)
        mig_good = self.mig_last_good() if mig_last_good is None else mig_last_good
        fresh._mig_layouts = {name: dict(layout) for name, (layout, _) in mig_good.items()}
        fresh._mig_strategy = {name: strategy for name, (_, strategy) in mig_good.items()}
        for node in nodes:
            fresh.on_node(node)
        fresh._last_good = {name: gpus for name, gpus in fresh._last_good.items() if name in fresh._counted}
        for table in (fresh._mig_layouts, fresh._mig_strategy):
            for name in [n for n in table if n not in fresh._counted]:
                del table[name]
        pods = list(pods)
        fresh._listed = {p.uid: p for p in pods}
        for pod in pods:
            fresh.on_pod(pod)
        if keep_assumed:
            fresh._carry(self._assumed, self.constraints, self._mig_assumed)
        return fresh

    def _carry(self, assumed: Mapping[str, tuple[PodAllocation, float]],
               constraints: Mapping[str, PodConstraints],
               mig_assumed: Mapping[str, MigPodAllocation] | None = None) -> None:
        """Book ``assumed`` (another instance's reservations) here, unless their pod is listed in a terminal
        phase, or is absent from the listing and was reserved more than ``assumed_ttl_seconds`` ago, or their
        node is gone; take over the constraints of pods not seen bound."""
        now = self.clock()
        for uid, (allocation, since) in assumed.items():
            pod = self._listed.get(uid)
            expired = pod is None and now - since > self.assumed_ttl_seconds
            if expired or (pod is not None and pod.phase.terminal) or allocation.node not in self._counted:
                continue
            mig = (mig_assumed or {}).get(uid)
            stored = self._pods.get(uid)
            if stored is not None:  # bound: its object speaks; the reservation only stands in for a missing plan
                self._assumed[uid] = (allocation, since)
                if mig is not None:
                    self._mig_assumed[uid] = mig
                if stored.node_name in self._counted and self._count(uid):
                    self._reinfer(stored.node_name)
                continue
            try:
                self.ledger.observe(allocation)
            except InvalidRequestError:
                continue  # names a GPU the node no longer has: dropped
            if mig is not None:
                if self._observe_mig(mig):
                    self.ledger.release(uid)
                    continue  # its MIG GPUs are gone: dropped
                self._mig_assumed[uid] = mig
            self.sources[uid] = AllocationSource.ASSUMED
            self._assumed[uid] = (allocation, since)
            self._reinfer(allocation.node)  # plan-less pods go on top of the reservation
        self._listed = {}
        self.constraints.update({k: v for k, v in constraints.items() if k not in self._pods})

    @checks_books
    def adopt(self, fresh: LedgerSync) -> DriftReport:
        """Make the live books equal ``fresh`` (a :meth:`rebuild` from a listing, without reservations) plus this
        instance's current reservations, repairing the live ledger in place (the scheduler and its plugins keep
        their reference), and report the drift. The caller holds its lock; cost: the reservations and the
        differences, not the cluster."""
        fresh._carry(self._assumed, self.constraints, self._mig_assumed)
        report = compare_books(self.ledger, fresh.ledger)
        self._adopt(fresh, report)
        return report

    def resync(self, nodes: Iterable[NodeObject], pods: Iterable[PodObject]) -> DriftReport:
        """Compare the live books with a rebuild from a full listing (reservations kept), repair the live ledger
        in place (the scheduler and its plugins keep their reference), and report the drift."""
        return self.adopt(self.rebuild(nodes, pods))

    def _adopt(self, fresh: LedgerSync, report: DriftReport) -> None:
        """Repair the live ledger in place; cost: the differences (and one pass over the node table), so the
        caller's lock is held briefly. Only nodes whose books may be off are verified: those with differing
        totals, those the record repairs touched, new ones and quarantined ones (any other node's totals equal
        the rebuild's, which are derived from the same records)."""
        ledger, records = self.ledger, fresh.ledger.records()
        suspect = {*report.totals, *report.nodes_missing, *ledger.quarantine}
        for uid in (*report.extra, *report.changed):
            released = ledger.release(uid)
            if released is not None:
                suspect.add(released.node)
        for name in report.nodes_extra:
            self.nodes.drop(ledger.slot(name))
            ledger.remove_node(name)
        for name, inventory in fresh._counted.items():
            same = self._counted.get(name) == inventory and name not in report.nodes_missing
            slot = ledger.slot(name) if same else ledger.upsert_node(inventory)
            self.nodes.put(slot, fresh._node_objects[name])
        for uid in (*report.missing, *report.changed):
            ledger.observe(records[uid])
            suspect.add(records[uid].node)
        for name in sorted(suspect & set(fresh._counted)):
            if ledger.verify_node(name) or name in ledger.quarantine:
                ledger.repair(name)
        self.gates.clear()  # the node filters hold these very mappings: refill them in place
        self.gates.update(fresh.gates)
        self._gpu_unknown, self.vanished = fresh._gpu_unknown, fresh.vanished
        self.constraints.clear()
        self.constraints.update(fresh.constraints)
        self.problems, self.sources = fresh.problems, fresh.sources
        self._node_objects, self._counted, self._pods = fresh._node_objects, fresh._counted, fresh._pods
        self._last_good, self._readings = fresh._last_good, fresh._readings
        self._uid_by_key, self._on_node, self._inferred = fresh._uid_by_key, fresh._on_node, fresh._inferred
        self._assumed = fresh._assumed
        self.holds.adopt(fresh.holds, keep=self._assumed)
        self.mig, self._mig_assumed, self._placeholders = fresh.mig, fresh._mig_assumed, fresh._placeholders
        self._mig_base = fresh._mig_base
        self._mig_view, self._mig_layouts = fresh._mig_view, fresh._mig_layouts
        self._mig_strategy = fresh._mig_strategy
        self.mig_gates.clear()
        self.mig_gates.update(fresh.mig_gates)
        self.mig_problems.clear()
        self.mig_problems.update(fresh.mig_problems)
