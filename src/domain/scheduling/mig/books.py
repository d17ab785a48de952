"""The scheduler's MIG books (:class:`MigBooks`): one :class:`~domain.mig.ledger.MigNodeLedger` per node with GPUs
in MIG mode, built from the inventory's MIG layout, plus the MIG reservations not yet confirmed by a plan and the
MIG instances DRA claims hold (:meth:`MigBooks.hold`, kept across rebuilds of a node's books).

Invariants: the books of a node are rebuilt exactly when what they are built from changes (its MIG GPUs, their
health, the listed layout, the published strategy); instances the Runtime lists as held that no record claims are
booked by placeholder records (:data:`PLACEHOLDER_PREFIX`) re-derived after every change of the node's records or
layout; a record is booked all or nothing. Rules and their failure cases: ``docs/ledger-sync.md``.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence

from domain.errors import DomainError, InvalidRequestError
from domain.gpu import Gpu, MigMode
from domain.kube.annotations import MigInstanceRecord, MigLayout
from domain.kube.objects import PodObject
from domain.kube.protocol import ProtocolConstants
from domain.kube.translate import asks_mig, mig_pod_request, read_mig_plan
from domain.mig.gpu import MigGpu, PlacementMode
from domain.mig.ledger import MigBooking, MigNodeLedger, MigPodAllocation
from domain.mig.profiles import resolve_profile
from domain.request import PodRequest
from domain.scheduling.mig.plugin import MigFilterResult, MigPlan, MigPlugin

PLACEHOLDER_PREFIX = "runtime-held:"
"""Pod UID prefix of the MIG books' placeholder records (module docstring)."""


def place(booking: MigBooking) -> tuple[int, int]:
    """``(gpu index, start slice)`` of ``booking``: where it sits on its node."""
    return (booking.gpu_index, booking.start)


class MigBooks:
    """The MIG books of every node (module docstring), in placement mode ``mode`` (the scheduler's
    ``--mig-strategy``, which must match the Runtime's).

    Public state: ``plugin`` (the :class:`MigPlugin` holding the per-node books); ``gates`` (node → why it takes
    no new MIG pod: it publishes another strategy); ``problems`` (node → MIG GPUs left out and why). Both maps are
    refilled in place by :meth:`adopt` (readers keep their reference).
    """

    def __init__(self, protocol: ProtocolConstants, mode: PlacementMode) -> None:
        self.protocol = protocol
        self.mode = mode
        self.plugin = MigPlugin()
        self.gates: dict[str, str] = {}
        self.problems: dict[str, str] = {}
        self._view: dict[str, object] = {}  # node → what its books were built from
        self._layouts: dict[str, MigLayout] = {}
        self._strategy: dict[str, str] = {}
        self._base: dict[str, list[MigGpu]] = {}  # node → base layout built from its inventory
        self._assumed: dict[str, MigPodAllocation] = {}
        self._held: dict[str, MigPodAllocation] = {}  # record key → a DRA claim's instances
        self._placeholders: dict[str, set[str]] = {}

    # ------------------------------------------------------------------ layout
    def last_layout(self, name: str) -> tuple[MigLayout, str]:
        """The layout and strategy the node's books were last built from (empty for an unknown node)."""
        return self._layouts.get(name, {}), self._strategy.get(name, "")

    def last_good(self) -> dict[str, tuple[MigLayout, str]]:
        """Per node, the MIG layout and strategy of the last inventory that decoded (a copy)."""
        return {name: (dict(layout), self._strategy.get(name, "")) for name, layout in self._layouts.items()}

    def seed(self, last_good: Mapping[str, tuple[Mapping[int, tuple[MigInstanceRecord, ...]], str]]) -> None:
        """Start from ``last_good`` layouts (a rebuild: nodes whose annotation is missing keep them)."""
        self._layouts = {name: dict(layout) for name, (layout, _) in last_good.items()}
        self._strategy = {name: strategy for name, (_, strategy) in last_good.items()}

    def prune(self, known: Container[str]) -> None:
        """Forget the last good layouts of nodes not in ``known``."""
        for table in (self._layouts, self._strategy):
            for name in [n for n in table if n not in known]:
                del table[name]

    def instance_ids(self, node: str) -> dict[tuple[int, int], str]:
        """``(gpu index, start)`` → NVML GPU instance id of the instances the node's Runtime listed (for plans)."""
        layout = self._layouts.get(node, {})
        return {(index, i.start): str(i.gpu_instance_id) for index, instances in layout.items() for i in instances}

    def _base_layout(self, gpus: Iterable[Gpu], layout: Mapping[int, tuple[MigInstanceRecord, ...]]
                     ) -> tuple[list[MigGpu], list[str]]:
        """The node's GPUs in MIG mode as :class:`MigGpu` base layouts, and why others were left out."""
        out: list[MigGpu] = []
        problems: list[str] = []
        for gpu in gpus:
            if gpu.mig_mode is not MigMode.ENABLED:
                continue
            try:
                mig = MigGpu.from_gpu(gpu, mode=self.mode)
                for instance in layout.get(gpu.index, ()):
                    profile = resolve_profile(mig.model, instance.profile)
                    mig = mig.with_free(profile, instance.start, instance_id=str(instance.gpu_instance_id))
            except DomainError as error:  # no profile table, or a listing the table does not allow
                problems.append(f"GPU {gpu.index} ({gpu.model}) left out of the MIG books: {error}")
                continue
            out.append(mig)
        return out, problems

    def update(self, name: str, gpus: tuple[Gpu, ...], layout: MigLayout, strategy: str, *,
               bound: Sequence[PodObject], bound_uids: Container[str]) -> dict[str, str]:
        """Rebuild node ``name``'s books when what they are built from changed; ``bound``: the pods bound to it
        (counted again from their plans or our reservations), ``bound_uids``: every bound pod's UID (a reservation
        of one is left to its object). Returns ``{pod UID: problem or ""}`` for the MIG pods of ``bound`` counted
        again (empty when nothing changed)."""
        mig_gpus = tuple((g.index, g.uuid, g.model, g.memory_bytes, g.health) for g in gpus
                         if g.mig_mode is MigMode.ENABLED)
        view = (mig_gpus, tuple(sorted(layout.items())), strategy)
        if self._view.get(name) == view:
            return {}
        self._view[name] = view
        self._layouts[name], self._strategy[name] = layout, strategy
        if strategy and strategy != self.mode.value:
            self.gates[name] = (f"node runs the MIG strategy {strategy}, this scheduler {self.mode.value} "
                                "(start both with the same --mig-strategy)")
        else:
            self.gates.pop(name, None)
        books, problems = self._base_layout(gpus, layout)
        if problems:
            self.problems[name] = "; ".join(problems)
        else:
            self.problems.pop(name, None)
        self._placeholders.pop(name, None)
        if not books:
            self._base.pop(name, None)
            self.plugin.remove_node(name)
            return {}
        self._base[name] = books
        self.plugin.add_node(MigNodeLedger(name, books))
        counted: dict[str, str] = {}
        for pod in bound:
            problem = self.count(pod, gpus, refresh=False)
            if problem is not None:
                counted[pod.uid] = problem
        for uid, mig in sorted(self._assumed.items()):
            if mig.node == name and uid not in bound_uids:
                self.observe(mig, refresh=False)
        for uid, mig in sorted(self._held.items()):
            if mig.node == name:
                counted[uid] = self.observe(mig, refresh=False)
        self.refresh_placeholders(name)
        return counted

    def remove_node(self, name: str) -> None:
        """Node deleted: forget its books, layout and the MIG reservations there."""
        self.plugin.remove_node(name)
        for table in (self._view, self._layouts, self._strategy, self._placeholders, self.gates, self.problems,
                      self._base):
            table.pop(name, None)
        for uid, mig in list(self._assumed.items()):
            if mig.node == name:
                del self._assumed[uid]

    def refresh_placeholders(self, name: str) -> None:
        """Re-derive the node's placeholder records (module docstring)."""
        if name not in self.plugin.node_names():
            self._placeholders.pop(name, None)
            return
        books = self.plugin.node(name)
        for uid in self._placeholders.pop(name, set()):
            books.release(uid)
        # the Runtime's listing is the base layout: an instance the books dropped when its record was released
        # (created for it, dynamic strategy) is still there until the Runtime lists it gone
        books.update_gpus(self._base.get(name, ()))
        claimed = {place(b) for record in books.records().values() for b in record.bookings}
        held: set[str] = set()
        for index, instances in sorted(self._layouts.get(name, {}).items()):
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

    # ------------------------------------------------------------------ records
    def _unfit(self, allocation: MigPodAllocation) -> str:
        """Why ``allocation`` cannot even be recorded in its node's books (unknown node, GPU or profile), or
        empty."""
        if allocation.node not in self.plugin.node_names():
            return f"node {allocation.node} has no GPU in MIG mode with a profile table"
        books = self.plugin.node(allocation.node)
        for booking in allocation.bookings:
            try:
                gpu = books.gpu(booking.gpu_index)
            except KeyError:
                return f"GPU {booking.gpu_index} of node {allocation.node} is not in the MIG books"
            if gpu.model.lookup(booking.profile) is None:
                return f"GPU {booking.gpu_index} ({gpu.model.key}) has no MIG profile {booking.profile}"
        return ""

    def observe(self, allocation: MigPodAllocation, *, refresh: bool = True) -> str:
        """Count ``allocation`` (idempotent; placeholders step aside); returns why it could not be recorded (its
        pod is then out of the books), or empty."""
        problem = self._unfit(allocation)
        if problem:
            self.release(allocation.pod_uid)
            return problem
        name = allocation.node
        books = self.plugin.node(name)
        for uid in self._placeholders.pop(name, set()):
            books.release(uid)
        self.plugin.observe(allocation)
        if refresh:
            self.refresh_placeholders(name)
        else:
            self._placeholders[name] = set()
        return ""

    def release(self, uid: str) -> None:
        """Take pod ``uid``'s record out of the books (idempotent); its reservation, if any, is kept."""
        record = self.plugin.unreserve(uid)
        if record is not None:
            self.refresh_placeholders(record.node)

    def count(self, pod: PodObject, gpus: tuple[Gpu, ...], *, refresh: bool = True) -> str | None:
        """Count bound ``pod``'s MIG instances on its node (GPUs ``gpus``): its trusted plan
        (:func:`~domain.kube.translate.read_mig_plan`), else our reservation. Returns None for a pod that asks
        for no MIG instance, else why it is not in the books, or empty."""
        uid = pod.uid
        if not asks_mig(pod, self.protocol):
            if self._assumed.pop(uid, None) is not None:  # a reservation its claims' records did not take over
                self.release(uid)
            return None
        reading = read_mig_plan(pod, gpus, self.protocol)
        allocation = reading.allocation
        if allocation is not None:
            self._assumed.pop(uid, None)
        else:
            assumed = self._assumed.get(uid)
            allocation = assumed if assumed is not None and assumed.node == pod.node_name else None
        problem = reading.problem
        if allocation is not None:
            problem = self.observe(allocation, refresh=refresh)
        else:
            self.release(uid)
        return problem

    def hold(self, allocation: MigPodAllocation) -> str:
        """Count the MIG instances a DRA claim holds (``allocation``, keyed by the claim's record key,
        :func:`domain.dra.booking.claim_record_uid`; idempotent) now and after every rebuild of its node's books,
        until :meth:`unhold`. Returns why it could not be recorded now (:meth:`observe`), or empty."""
        self._held[allocation.pod_uid] = allocation  # observe replaces an earlier record under that key
        return self.observe(allocation)

    def unhold(self, uid: str) -> None:
        """Stop counting the claim record ``uid`` (idempotent)."""
        if self._held.pop(uid, None) is not None:
            self.release(uid)

    def record(self, uid: str) -> MigPodAllocation | None:
        """The books' record of pod ``uid`` (plan or reservation), or None."""
        return self.plugin.record(uid)

    # ------------------------------------------------------------------ reservations
    def reserve(self, allocation: MigPodAllocation) -> None:
        """Book a MIG reservation all-or-nothing. Raises :class:`~domain.mig.errors.NoMigCapacityError`,
        :class:`~domain.mig.errors.MigPlacementError`, :class:`InvalidRequestError` (unknown node, GPU or profile;
        booked differently) or :class:`~domain.errors.LedgerCorruptedError` (parked records on the node)."""
        problem = self._unfit(allocation)
        if problem:
            raise InvalidRequestError(f"pod[{allocation.pod_uid}].mig", allocation.node, problem)
        self.plugin.reserve(MigPlan(allocation, ()))

    def remember(self, uid: str, allocation: MigPodAllocation) -> None:
        """Keep ``allocation`` as pod ``uid``'s reservation until a trusted plan on the bound pod replaces it."""
        self._assumed[uid] = allocation

    def forget(self, uid: str) -> MigPodAllocation | None:
        """Drop pod ``uid``'s reservation (not its record); returns it, or None."""
        return self._assumed.pop(uid, None)

    def reservation(self, uid: str) -> MigPodAllocation | None:
        """Pod ``uid``'s reservation, or None."""
        return self._assumed.get(uid)

    @property
    def assumed(self) -> dict[str, MigPodAllocation]:
        """MIG reservations not yet confirmed by a trusted plan on the bound pod, by pod UID (a copy)."""
        return dict(self._assumed)

    def held_problem(self, uid: str) -> str:
        """Why pod ``uid``'s MIG reservation must not be kept (gone, node gated, a GPU gone or unhealthy, the
        record parked), or empty."""
        mig = self._assumed.get(uid)
        if mig is None or self.plugin.record(uid) != mig:
            return "its MIG reservation is gone"
        node = mig.node
        if node in self.gates:
            return f"node {node} takes no MIG pods: {self.gates[node]}"
        books = self.plugin.node(node)
        if uid in books.conflicts:
            return f"its MIG record on node {node} no longer applies: {books.conflicts[uid]}"
        for booking in mig.bookings:
            if not books.gpu(booking.gpu_index).healthy:
                return f"MIG GPU {booking.gpu_index} of node {node} is unhealthy"
        return ""

    def filter(self, request: PodRequest, names: Iterable[str]) -> MigFilterResult:
        """Plan ``request``'s MIG instances on each node of ``names`` (nodes in :attr:`gates` are refused with
        that reason); nothing is booked. Raises :class:`InvalidRequestError` /
        :class:`~domain.mig.errors.UnknownMigProfileError` for a request without (valid) MIG asks."""
        admitted = MigPlugin.admit(mig_pod_request(request))
        names = list(names)
        gated = {n: f"takes no MIG pods: {self.gates[n]}" for n in names if n in self.gates}
        result = self.plugin.filter(admitted, [n for n in names if n not in gated])
        return MigFilterResult(result.plans, {**result.reasons, **gated})

    def adopt(self, fresh: MigBooks) -> None:
        """Take over ``fresh``'s books (a rebuild's); :attr:`gates` and :attr:`problems` are refilled in place."""
        self.plugin, self._assumed, self._placeholders = fresh.plugin, fresh._assumed, fresh._placeholders
        self._held = fresh._held
        self._base, self._view, self._layouts, self._strategy = fresh._base, fresh._view, fresh._layouts, \
            fresh._strategy
        self.gates.clear()
        self.gates.update(fresh.gates)
        self.problems.clear()
        self.problems.update(fresh.problems)
