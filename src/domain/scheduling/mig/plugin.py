"""The MIG scheduling plugin: admit, filter, score, reserve and unreserve MIG pods over nodes' MIG books.

The phases follow :mod:`domain.scheduling.framework.cycle` (filter → score → normalise → select → reserve, unreserve
on any later failure), but per node on :class:`MigNodeLedger` instead of the numpy ``ClusterLedger``: MIG
placement is a small combinatorial problem per GPU, not arithmetic over columns.

Plan (used by filter and reserve alike, so they never disagree). The pod's instances are placed largest first,
each at the candidate with the smallest fragmentation loss (:mod:`domain.mig.fragmentation`, compared
lexicographically). Candidates: static mode, the free instances of the profile; dynamic mode, the free
instances of the profile (reused) and every start where a new instance fits (created by the Runtime at
Allocate). Ties go to reuse before create, then to the GPU holding more owned instances (packing keeps whole
GPUs idle, which is what a later re-layout needs), then the lower GPU index and start. The search is greedy: a
pod with several instances may be refused on a node where an exhaustive search would find a plan.

Score. A node's plan loss; nodes are ranked by it exactly in :meth:`MigPlugin.select` (ties by node name) and
:meth:`MigPlugin.score` maps the ranks to ``0..MAX_NODE_SCORE`` (dense rank: best 100, worst 0) for a caller
that combines plugins.

Requests (:mod:`domain.mig.requests`). A pod needs, per profile, ``MigPodRequest.demand``'s instances (Kubernetes'
effective-request rule). :meth:`MigPlugin.admit` rejects names no table knows with
:class:`UnknownMigProfileError` (B30), so such a pod never waits silently.

Separation from time-sharing. The plugin sees only :class:`MigGpu` values, which exist only for GPUs in MIG mode
(:meth:`MigGpu.from_gpu` refuses others, :func:`mig_node_from_inventory` skips them), and the time-sharing
``ClusterLedger`` books MIG GPUs as unschedulable (``Gpu.schedulable``): neither kind of pod reaches the other's
GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from domain.errors import InvalidRequestError
from domain.gpu import MigMode, NodeInventory
from domain.mig.errors import MigPlacementError, NoMigCapacityError, UnknownMigProfileError
from domain.mig.fragmentation import Vector, add, loss, placeable
from domain.mig.ledger import MigBooking, MigGpu, MigNodeLedger, MigOwner, MigPodAllocation, PlacementMode
from domain.mig.profiles import MIG_MODELS
from domain.mig.requests import MigPodRequest
from domain.scheduling.framework.cycle import MAX_NODE_SCORE


@attrs.frozen
class MigPlan:
    """A planned allocation on one node and its fragmentation ``loss`` (vector over
    :data:`domain.mig.fragmentation.SIZES`; smaller is better, compared lexicographically)."""

    allocation: MigPodAllocation
    loss: Vector


@attrs.frozen
class MigFilterResult:
    """Filter outcome: ``plans`` for feasible nodes and ``reasons`` for the others, by node name."""

    plans: Mapping[str, MigPlan]
    reasons: Mapping[str, str]


@attrs.frozen
class MigScheduleResult:
    """One cycle's outcome: the booked ``allocation``, or None with ``reason`` (per-node reasons joined)."""

    pod_uid: str
    allocation: MigPodAllocation | None
    reason: str = ""

    @property
    def scheduled(self) -> bool:
        """True when the pod was reserved."""
        return self.allocation is not None


def mig_node_from_inventory(
    inventory: NodeInventory, *, mode: PlacementMode, layouts: Mapping[int, Sequence[tuple[str, int]]] | None = None
) -> MigNodeLedger:
    """MIG books for the GPUs of ``inventory`` that are in MIG mode (the others belong to time-sharing).

    ``layouts``: per GPU index, the pre-created free instances as ``(profile name, start)``. Raises
    :class:`UnknownMigModelError`, :class:`UnknownMigProfileError` and :class:`MigPlacementError` for a MIG GPU
    without table or a bad layout, and :class:`InvalidRequestError` for a layout on a GPU not in MIG mode.
    """
    layouts = layouts or {}
    mig = {g.index: g for g in inventory.gpus if g.mig_mode is MigMode.ENABLED}
    for index in layouts:
        if index not in mig:
            raise InvalidRequestError(f"node[{inventory.name}].layouts", index, "GPU is not in MIG mode")
    gpus = [MigGpu.from_gpu(g, mode=mode, layout=layouts.get(g.index, ())) for g in mig.values()]
    return MigNodeLedger(inventory.name, gpus)


def _owned(gpu: MigGpu) -> int:
    return sum(1 for i in gpu.instances if i.owner is not None)


def plan_pod(pod: MigPodRequest, node: MigNodeLedger) -> MigPlan:
    """Plan ``pod`` (canonical profile names) on ``node`` as the module docstring says; nothing is booked.

    Raises :class:`NoMigCapacityError` with the reason when a profile has no GPU of a suitable model, no free
    instance (static) or no placement (dynamic), or when the node has parked records.
    """
    if not node.admitting:
        raise NoMigCapacityError(f"node {node.name}: MIG books have parked records {sorted(node.conflicts)}")
    gpus = {g.index: g for g in node.gpus() if g.healthy}
    items: list[tuple[tuple[int, int], str, str]] = []
    for name, labels in pod.demand().items():
        sizes = [p.size for g in gpus.values() if (p := g.model.lookup(name)) is not None]
        if not sizes:
            raise NoMigCapacityError(f"no healthy MIG GPU whose model has profile {name}")
        items.extend((max(sizes), name, label) for label in labels)
    items.sort(key=lambda item: (item[0], item[1]), reverse=True)
    before = {index: placeable(gpu) for index, gpu in gpus.items()}
    bookings: list[MigBooking] = []
    for _, name, label in items:
        owner = MigOwner(pod.uid, label)
        best: tuple[tuple[Vector, bool, int, int, int], MigGpu, MigBooking] | None = None
        for index, gpu in gpus.items():
            profile = gpu.model.lookup(name)
            if profile is None:
                continue
            options = [(i.start, False) for i in gpu.free_instances(profile)]
            if gpu.mode is PlacementMode.DYNAMIC:
                options += [(start, True) for start in gpu.free_starts(profile)]
            now = placeable(gpu)
            for start, create in options:
                after = gpu.create(profile, start, owner) if create else gpu.assign(start, owner)
                key = (loss(now, placeable(after)), create, -_owned(gpu), index, start)
                if best is None or key < best[0]:
                    best = (key, after, MigBooking(index, profile.name, start, label, create))
        if best is None:
            raise NoMigCapacityError(f"no free instance or placement for {name} on a healthy MIG GPU")
        _, after, booking = best
        gpus[booking.gpu_index] = after
        bookings.append(booking)
    total = tuple(0 for _ in next(iter(before.values()), ()))
    for index in sorted({b.gpu_index for b in bookings}):
        total = add(total, loss(before[index], placeable(gpus[index])))
    return MigPlan(MigPodAllocation(pod.uid, node.name, tuple(bookings)), total)


class MigPlugin:
    """Filter, score, reserve and unreserve for MIG pods over per-node :class:`MigNodeLedger` books."""

    name = "MigPlacement"

    def __init__(self, nodes: Iterable[MigNodeLedger] = ()) -> None:
        self._nodes: dict[str, MigNodeLedger] = {}
        self._where: dict[str, str] = {}
        for node in nodes:
            self.add_node(node)

    # ------------------------------------------------------------------ nodes
    def add_node(self, node: MigNodeLedger) -> None:
        """Add or replace a node's books (records of a replaced node are forgotten with it)."""
        self.remove_node(node.name)
        self._nodes[node.name] = node
        for uid in node.records():
            self._where[uid] = node.name

    def remove_node(self, name: str) -> None:
        """Forget a node and its records; unknown names are ignored."""
        node = self._nodes.pop(name, None)
        if node is not None:
            for uid in node.records():
                self._where.pop(uid, None)

    def node(self, name: str) -> MigNodeLedger:
        """The books of one node. Raises :class:`KeyError`."""
        return self._nodes[name]

    def node_names(self) -> list[str]:
        """Node names, sorted."""
        return sorted(self._nodes)

    # ------------------------------------------------------------------ phases
    @staticmethod
    def admit(pod: MigPodRequest) -> MigPodRequest:
        """The pod with canonical profile names. Raises :class:`UnknownMigProfileError` for a name no MIG table
        knows, naming it and every valid name (B30: reject at admission)."""
        containers = []
        for container in pod.containers:
            known = [p for m in MIG_MODELS.values() if (p := m.lookup(container.profile)) is not None]
            if not known:
                valid = sorted({n for m in MIG_MODELS.values() for n in m.names})
                raise UnknownMigProfileError(
                    f"any GPU model ({', '.join(MIG_MODELS)}) in pod {pod.uid} container {container.name}",
                    container.profile,
                    valid,
                )
            containers.append(attrs.evolve(container, profile=known[0].name))
        return attrs.evolve(pod, containers=tuple(containers))

    def filter(self, pod: MigPodRequest, names: Iterable[str] | None = None) -> MigFilterResult:
        """Plan ``pod`` (admitted) on each node of ``names`` (default: all); feasible nodes keep their plan."""
        plans: dict[str, MigPlan] = {}
        reasons: dict[str, str] = {}
        for name in sorted(self._nodes if names is None else names):
            node = self._nodes.get(name)
            if node is None:
                reasons[name] = "not a MIG node"
                continue
            try:
                plans[name] = plan_pod(pod, node)
            except NoMigCapacityError as error:
                reasons[name] = str(error)
        return MigFilterResult(plans, reasons)

    @staticmethod
    def score(result: MigFilterResult) -> dict[str, int]:
        """``0..MAX_NODE_SCORE`` per feasible node by dense rank of plan loss (lowest loss → 100)."""
        ranks = sorted({plan.loss for plan in result.plans.values()})
        if len(ranks) <= 1:
            return dict.fromkeys(result.plans, MAX_NODE_SCORE)
        position = {value: n for n, value in enumerate(ranks)}
        span = len(ranks) - 1
        return {
            name: MAX_NODE_SCORE - MAX_NODE_SCORE * position[plan.loss] // span for name, plan in result.plans.items()
        }

    @staticmethod
    def select(result: MigFilterResult) -> MigPlan | None:
        """The plan with the lexicographically smallest loss (ties: node name), or None when none is feasible."""
        if not result.plans:
            return None
        name = min(result.plans, key=lambda n: (result.plans[n].loss, n))
        return result.plans[name]

    def reserve(self, plan: MigPlan) -> MigPodAllocation:
        """Book ``plan`` on its node (all-or-nothing). Raises what :meth:`MigNodeLedger.reserve` raises."""
        allocation = plan.allocation
        self._nodes[allocation.node].reserve(allocation)
        self._where[allocation.pod_uid] = allocation.node
        return allocation

    def unreserve(self, pod_uid: str) -> MigPodAllocation | None:
        """Release a pod's instances wherever they are booked; idempotent. Returns the released record."""
        name = self._where.pop(pod_uid, None)
        node = self._nodes.get(name) if name is not None else None
        return node.release(pod_uid) if node is not None else None

    def observe(self, allocation: MigPodAllocation) -> bool:
        """Restore a pod's record from its annotations (idempotent; moves it when its node changed).

        Raises :class:`KeyError` for an unknown node.
        """
        node = self._nodes[allocation.node]
        previous = self._where.get(allocation.pod_uid)
        if previous is not None and previous != allocation.node:
            self.unreserve(allocation.pod_uid)
        self._where[allocation.pod_uid] = allocation.node
        return node.observe(allocation)

    def record(self, pod_uid: str) -> MigPodAllocation | None:
        """The booked record of a pod, or None."""
        name = self._where.get(pod_uid)
        return self._nodes[name].record(pod_uid) if name is not None else None

    def schedule(self, pod: MigPodRequest) -> MigScheduleResult:
        """admit → filter → select → reserve in one call; the books change only when the result is scheduled.

        An unknown profile gives an unscheduled result whose reason is the :class:`UnknownMigProfileError`
        message (the admission path raises it earlier).
        """
        existing = self.record(pod.uid)
        if existing is not None:
            return MigScheduleResult(pod.uid, existing, "already counted")
        try:
            admitted = self.admit(pod)
        except UnknownMigProfileError as error:
            return MigScheduleResult(pod.uid, None, str(error))
        result = self.filter(admitted)
        while (plan := self.select(result)) is not None:
            try:
                return MigScheduleResult(pod.uid, self.reserve(plan))
            except (NoMigCapacityError, MigPlacementError) as error:
                plans = {n: p for n, p in result.plans.items() if n != plan.allocation.node}
                result = MigFilterResult(plans, {**result.reasons, plan.allocation.node: str(error)})
        detail = "; ".join(f"{name}: {why}" for name, why in sorted(result.reasons.items()))
        return MigScheduleResult(pod.uid, None, f"0 MIG nodes available: {detail or 'no MIG nodes'}")

