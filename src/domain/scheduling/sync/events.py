"""The ledger driven by informer events and our own reservations: :class:`LedgerEvents`.

Invariants (each rule and the failure case it covers: ``docs/ledger-sync.md``): every non-terminal pod bound to a
known node is counted (from its plan when valid, else by inference), a pending pod only through our reservation;
events are idempotent and keyed by UID; node updates never reset usage; plan-less pods of a node are re-inferred in
UID order whenever its other pods change, so the books are a function of the objects (and the last good GPU lists)
alone. Not thread-safe: the caller serialises events and scheduling cycles; time comes from the injected clock.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from domain.allocation import PodAllocation
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, MigMode, NodeInventory
from domain.kube.inference import infer_allocation
from domain.kube.objects import NodeObject, PodObject, PodPhase
from domain.kube.protocol import ProtocolConstants
from domain.kube.requests import PodRequests
from domain.kube.translate import AllocationSource, mig_table, read_allocation, read_node
from domain.ledger import ClusterLedger
from domain.mig.gpu import PlacementMode
from domain.request import PodRequest
from domain.scheduling.mig.books import MigBooks
from domain.scheduling.mig.plugin import MigPlugin
from domain.scheduling.nodefit import NodeTable, PodConstraints, extended_requests
from domain.scheduling.nodefit.holds import AdmissionHolds
from domain.scheduling.sync.draslices import CLAIMS_ONLY, DraSlices
from domain.scheduling.sync.gates import NodeGates
from domain.scheduling.sync.overbooking import OverbookingGuard, checks_books
from domain.scheduling.sync.vanished import VanishedGpus

_NOT_IN_MIG_BOOKS = "not in the MIG books: "


@attrs.frozen
class Tombstone:
    """A delete whose final state is unknown (client-go's ``DeletedFinalStateUnknown``): the pod's
    ``namespace/name`` key and its last known state, when the informer had one."""

    key: str
    obj: PodObject | None = None


def _identity(inventory: NodeInventory) -> tuple[tuple[int, str, int, MigMode], ...]:
    return tuple((g.index, g.uuid, g.memory_bytes, g.mig_mode) for g in inventory.gpus)


class LedgerEvents:
    """Keeps ``ledger`` equal to the cluster's objects plus our reservations (module docstring).

    Public state: ``ledger``; ``nodes`` (:class:`NodeTable`, slot → last Node object, for the node filters);
    ``gates`` (node → why it takes no GPU pods); ``constraints`` (pod UID → :class:`PodConstraints` of pods being
    scheduled); ``problems`` (pod UID → why its plan was not used or its request could not be read); ``sources``
    (pod UID → :class:`AllocationSource` of its record); ``books`` (:class:`MigBooks`); ``holds``; ``vanished``;
    ``books_guard``. ``assumed_ttl_seconds``: how long a reservation absent from a resync listing is kept.
    """

    def __init__(self, ledger: ClusterLedger, protocol: ProtocolConstants, *, clock: Callable[[], float],
                 assumed_ttl_seconds: float = 60.0, mig_mode: PlacementMode = PlacementMode.STATIC,
                 hold_window_seconds: float | None = None) -> None:
        self.ledger = ledger
        self.holds = AdmissionHolds(hold_window_seconds)
        """Pods bound or reserved here whose devices are not allocated yet (:mod:`domain.scheduling.nodefit.holds`)."""
        self.protocol = protocol
        self.clock = clock
        self.assumed_ttl_seconds = assumed_ttl_seconds
        self.mig_mode = mig_mode
        self.books = MigBooks(protocol, mig_mode)
        self.nodes = NodeTable()
        self._gates = NodeGates(protocol)
        self.slices = DraSlices(protocol.dra.driver)
        """Our DRA driver's ResourceSlices: the GPUs of a node without an inventory annotation (:mod:`.draslices`)."""
        self.claims_only: dict[str, str] = {}
        """Node → why it takes no classic GPU container: its GPUs come from ResourceSlices (a live mapping the node
        filters read; :class:`~domain.scheduling.nodefit.ClaimsOnly`)."""
        self.constraints: dict[str, PodConstraints] = {}
        self.problems: dict[str, str] = {}
        self.sources: dict[str, AllocationSource] = {}
        self._node_objects: dict[str, NodeObject] = {}
        self._counted: dict[str, NodeInventory] = {}
        self._last_good: dict[str, tuple[Gpu, ...]] = {}
        self._listed: dict[str, PodObject] = {}  # rebuilds only: the listing's pods by UID, until adopted
        self._pods: dict[str, PodObject] = {}
        self._uid_by_key: dict[str, str] = {}
        self._on_node: dict[str, set[str]] = {}
        self._inferred: dict[str, set[str]] = {}
        self._assumed: dict[str, tuple[PodAllocation, float]] = {}
        self._reinfer_later: set[str] | None = None  # rebuilds only: nodes to re-infer once every pod is counted
        names = protocol.resources
        try:
            mig_names = set(mig_table(protocol).names)
        except InvalidRequestError:
            mig_names = set()
        self._our_resources = frozenset({names.gpu, names.core, names.memory} | mig_names)
        self.requests = PodRequests(protocol)
        """Each pod's request, parsed once per content (:mod:`domain.kube.requests`)."""
        self.vanished = VanishedGpus(protocol)
        """Bound pods whose plan names GPUs their node no longer lists (:mod:`domain.scheduling.sync.vanished`)."""
        self.books_guard = OverbookingGuard(ledger, label=self._label)
        """Quarantines a node whose books are impossible (:mod:`domain.scheduling.sync.overbooking`)."""

    def _label(self, uid: str) -> str:
        pod = self._pods.get(uid)
        return uid if pod is None else pod.key

    @property
    def gates(self) -> dict[str, str]:
        """Node → why it takes no GPU pods (the live mapping the node filters read; :class:`NodeGates`)."""
        return self._gates.gates

    @property
    def mig(self) -> MigPlugin:
        """The MIG books, per node (:attr:`MigBooks.plugin`)."""
        return self.books.plugin

    @property
    def overbooked(self) -> dict[str, str]:
        """Node → why it is quarantined for impossible books (a copy; :mod:`domain.scheduling.sync.overbooking`)."""
        return dict(self.books_guard.overbooked)

    # ------------------------------------------------------------------ nodes
    @checks_books
    def on_node(self, node: NodeObject) -> None:
        """Node added or updated: book its inventory (usage kept, B14; a missing or malformed inventory keeps
        the last good GPU list; without the annotation, the GPUs of our DRA driver's slices), refresh its gate,
        count waiting pods."""
        now = self.clock()
        slices = self.slices.inventory(node.name, self._last_good.get(node.name, ()))
        reading = read_node(node, self.protocol, now=now, slices=slices)
        counted, steady = reading.counted, reading.steady_reason
        kept = None if reading.decoded else self._last_good.get(node.name)
        if reading.decoded:
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
        self.nodes.put(slot, node)
        self._gates.read(node.name, reading.heartbeat, steady, now=now)
        if reading.from_slices:
            self.claims_only[node.name] = CLAIMS_ONLY
        else:
            self.claims_only.pop(node.name, None)
        if reading.decoded:  # the MIG books first: the claims counted again below are held there
            layout, strategy = dict(reading.mig), reading.mig_strategy
        else:  # missing or malformed: keep the last layout that decoded, like the GPU list
            layout, strategy = self.books.last_layout(node.name)
        bound = [self._pods[uid] for uid in sorted(self._on_node.get(node.name, ())) if uid in self._pods]
        for uid, problem in self.books.update(node.name, counted.gpus, layout, strategy, bound=bound,
                                              bound_uids=self._pods).items():
            self._note_mig(uid, problem)
        if regroup:
            self._recount_node(node.name)
        elif previous != counted:
            self._reinfer(node.name)  # health decides which GPUs inference prefers

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
        self._gates.forget(name)
        self.claims_only.pop(name, None)
        self.vanished.forget_node(name)
        self._inferred.pop(name, None)
        for uid, (allocation, _) in list(self._assumed.items()):
            if allocation.node == name:
                del self._assumed[uid]
        self.books.remove_node(name)

    def tick(self) -> None:
        """Re-evaluate every node's gate at the clock's time (a device plugin that stops heartbeating sends no
        node event, so staleness must be polled), from each node's last reading, never decoding an annotation."""
        self._gates.tick(now=self.clock())

    def last_good(self) -> dict[str, tuple[Gpu, ...]]:
        """Per node, the GPUs of the last inventory that decoded (a copy; for a rebuild)."""
        return dict(self._last_good)

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
        """Pod added or updated; idempotent (B04). A new UID under a known ``namespace/name`` first releases the
        old UID (the old pod's delete was missed); a terminal phase releases (B03)."""
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
                self.books.forget(uid)
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
            request = self.requests.get(pod)
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
                                  assumed=None if assumed is None else assumed[0], infer=False,
                                  parse=self.requests.get)
        self._note(uid, reading.problem)
        self._gates.mark_gpu_unknown(node, uid, reading.problem if reading.gpu_unknown else None, now=self.clock())
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

    def _count_mig(self, uid: str, *, refresh: bool = True) -> None:
        pod = self._pods[uid]
        problem = self.books.count(pod, self._counted[pod.node_name].gpus, refresh=refresh)
        if problem is not None:
            self._note_mig(uid, problem)

    def _note_mig(self, uid: str, problem: str) -> None:
        if problem:
            self.problems[uid] = f"{_NOT_IN_MIG_BOOKS}{problem}"
        elif self.problems.get(uid, "").startswith(_NOT_IN_MIG_BOOKS):
            del self.problems[uid]

    def _reinfer(self, node: str) -> None:
        """Re-place every plan-less pod of ``node``, in UID order, on top of the others (within a rebuild, once
        at its end: the placement depends only on the other pods' records, not on the order they came in)."""
        inferred = self._inferred.get(node)
        if not inferred or node not in self._counted:
            return
        if self._reinfer_later is not None:
            self._reinfer_later.add(node)
            return
        for uid in inferred:
            self.ledger.release(uid)
        gpus = self._counted[node].gpus
        for uid in sorted(inferred):
            request = self.requests.get(self._pods[uid])  # readable: unreadable ones are node-only
            allocation, note = infer_allocation(request, node, gpus, self.ledger)
            self.ledger.observe(allocation)
            self.sources[uid] = AllocationSource.INFERRED
            known = self.problems.get(uid, "")
            if note and not known.endswith(note):  # said once, however often the node is re-inferred
                self.problems[uid] = "; ".join(p for p in (known, note) if p)

    def _recount_node(self, node: str) -> None:
        """Re-derive every pod booked on or bound to ``node`` from the stored objects and reservations."""
        for uid in self.ledger.pods_on(node):
            self.ledger.release(uid)
        self._inferred[node] = set()
        self._recount_claims(node)
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

    def _recount_claims(self, node: str) -> None:
        """Re-book the DRA claims of ``node`` (:class:`~domain.scheduling.sync.claims.ClaimEvents`; none here)."""

    def _unstore(self, uid: str) -> None:
        pod = self._pods.pop(uid, None)
        self.vanished.forget(uid)
        self.books.release(uid)
        record = self.ledger.release(uid)
        self.sources.pop(uid, None)
        if pod is not None:
            self._on_node.get(pod.node_name, set()).discard(uid)
            self._inferred.get(pod.node_name, set()).discard(uid)
            if self._gates.is_unknown(pod.node_name, uid):
                self._gates.mark_gpu_unknown(pod.node_name, uid, None, now=self.clock())
        if record is not None:
            self._inferred.get(record.node, set()).discard(uid)
            self._reinfer(record.node)  # the node's plan-less pods may now sit elsewhere

    def _drop(self, uid: str) -> None:
        self.requests.forget(uid)
        self.holds.release(uid)
        self._assumed.pop(uid, None)
        self.books.forget(uid)
        self.constraints.pop(uid, None)
        self.problems.pop(uid, None)
        self._unstore(uid)

    def _note(self, uid: str, problem: str) -> None:
        if problem:
            self.problems[uid] = problem
        else:
            self.problems.pop(uid, None)

