"""Victim selection for preemption on one node: which lower-priority pods to evict so that a pending pod fits.

Pure: reads a :class:`~domain.ledger.ClusterLedger` (never changes it) and the pods on the node with their
priorities and PodDisruptionBudget membership; no I/O, no clock.

Rules (``docs/scheduler.md``, section Preemption):

* only pods of **strictly lower** priority than the preemptor are victims; a preemptor whose
  ``preemptionPolicy`` is ``Never`` preempts nothing (Kubernetes' ``PodEligibleToPreemptOthers``);
* the preemptor must fit **on the GPUs it will use** once the victims are gone: the freed core and memory are
  given back per GPU, and the preemptor is planned on the node's per-GPU vectors with the same planner as a normal
  cycle (:func:`~domain.scheduling.framework.planner.plan_vectors`, by the node's topology and meeting the pod's
  required GPU topology), plus node CPU, memory and a pod slot. Freeing 30 % on GPU 0 and 40 % on GPU 1 does not
  fit a 60 % share;
* pods already leaving (``leaving``: terminating, or victims of an earlier round) count as freed and are never
  chosen again;
* among the victim sets that make the preemptor fit, the first by kube-scheduler's order for candidates
  (``pickOneNodeForPreemption`` in ``pkg/scheduler/framework/preemption``, applied here to sets on one node and
  again by :func:`best_node` across nodes): (1) fewest PodDisruptionBudget violations, (2) lowest highest victim
  priority, (3) lowest ``Σ (priority + 2^31)`` — kube-scheduler's offset, which makes fewer victims win before a
  lower plain sum —, (4) fewest victims; then the sorted victim UIDs (our deterministic tie rule, where
  kube-scheduler compares start times);
* PDB violations are counted as kube-scheduler does (``filterPodsWithPDBViolation``): the victims are taken most
  important first (priority descending, then UID), each takes one disruption from every budget it matches
  (``allowed``: budget key → ``status.disruptionsAllowed``, a missing key counts 0), and a victim that drives any
  of them below zero is one violation;
* exact search: with at most :data:`EXACT_LIMIT` useful candidates every subset is ordered by the key above and
  the first that fits is the answer (the minimum); a one-container share on a node not short of CPU, memory or
  pod slots is searched per GPU (only the pods using that GPU; still the minimum, as a share lands on one GPU);
  with more, kube-scheduler's own reprieve (start from every
  candidate evicted, put back PDB-violating ones, then the others, most important first, each kept back when the
  preemptor still fits), which is minimal (no victim can be spared) but not always the minimum. A candidate is
  useful when it uses a GPU the preemptor may use, or when the node is short of CPU, memory or pod slots.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Collection, Mapping, Sequence

import attrs
import numpy as np

from domain.allocation import PodAllocation, add_usage
from domain.errors import UnknownNodeError
from domain.ledger import ClusterLedger
from domain.request import GpuKind, PodRequest
from domain.scheduling.framework.cycle import I64, BoolArray
from domain.scheduling.framework.planner import plan_vectors
from domain.topology import NodeTopology

EXACT_LIMIT = 12
"""Most useful candidates searched exhaustively (2^12 − 1 subsets); above it kube-scheduler's reprieve."""

PRIORITY_OFFSET = 2**31
"""kube-scheduler's ``math.MaxInt32 + 1`` added to each victim's priority in the sum of criterion (3)."""


class PreemptionPolicy(enum.Enum):
    """``spec.preemptionPolicy`` of a pod (core/v1)."""

    PREEMPT_LOWER = "PreemptLowerPriority"
    NEVER = "Never"


@attrs.frozen
class Preemptor:
    """The pending pod: its request, ``priority`` (``spec.priority``, 0 when unset) and preemption policy."""

    request: PodRequest
    priority: int = 0
    policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER


@attrs.frozen
class RunningPod:
    """A pod counted on the node that could be evicted: ``uid`` (its ledger key), ``priority``, ``key``
    (``namespace/name``, for messages) and ``pdbs`` (keys of the PodDisruptionBudgets whose selector matches it)."""

    uid: str
    priority: int = 0
    key: str = ""
    pdbs: tuple[str, ...] = ()


@attrs.frozen
class Victims:
    """A victim set on ``node``: ``pods`` (lowest priority first, then UID), the PDB violations they cause and
    ``allocation``, where the preemptor goes once they are gone. Empty ``pods``: it fits without preemption."""

    node: str
    pods: tuple[RunningPod, ...]
    pdb_violations: int
    allocation: PodAllocation

    @property
    def cost(self) -> tuple[int, int, int, int]:
        """kube-scheduler's order (module docstring): violations, highest priority, offset sum, count."""
        return _cost(self.pods, self.pdb_violations)

    @property
    def uids(self) -> tuple[str, ...]:
        """The victims' UIDs, in :attr:`pods` order."""
        return tuple(pod.uid for pod in self.pods)


@attrs.frozen
class Outcome:
    """What :func:`select_victims` found on one node: ``victims`` (None when preemption cannot help there) and
    ``reason`` (why not, or empty)."""

    node: str
    victims: Victims | None
    reason: str = ""


def _cost(pods: Sequence[RunningPod], violations: int) -> tuple[int, int, int, int]:
    highest = max((p.priority for p in pods), default=-(2**31))
    return violations, highest, sum(p.priority + PRIORITY_OFFSET for p in pods), len(pods)


def pdb_violations(pods: Collection[RunningPod], allowed: Mapping[str, int]) -> int:
    """Victims among ``pods`` that drive a budget below zero (module docstring; kube-scheduler's count)."""
    left = dict(allowed)
    count = 0
    for pod in sorted(pods, key=lambda p: (-p.priority, p.uid)):
        violating = False
        for budget in pod.pdbs:
            left[budget] = left.get(budget, 0) - 1
            violating |= left[budget] < 0
        count += violating
    return count


@attrs.define
class _Node:
    """One node's books as vectors (``[gpus]``), minus what is already leaving."""

    core_used: I64
    mem_used: I64
    core_cap: I64
    mem_cap: I64
    ok: BoolArray
    eligible: BoolArray
    cpu_free: int
    hostmem_free: int
    pods_free: int
    usage: dict[str, tuple[dict[int, tuple[int, int]], int, int]]
    topology: NodeTopology | None = None
    models: I64 | None = None

    def free_with(self, uids: Collection[str]) -> tuple[I64, I64, BoolArray, int, int, int]:
        """Free core, free memory, untouched GPUs and node CPU, memory, pod slots once ``uids`` are gone."""
        core, mem = self.core_used.copy(), self.mem_used.copy()
        cpu, hostmem = self.cpu_free, self.hostmem_free
        for uid in uids:
            gpus, pod_cpu, pod_mem = self.usage[uid]
            for index, (c, m) in gpus.items():
                if index < len(core):
                    core[index] -= c
                    mem[index] -= m
            cpu += pod_cpu
            hostmem += pod_mem
        untouched = (core <= 0) & (mem <= 0) & (self.core_cap > 0) & self.ok
        return (np.maximum(self.core_cap - core, 0), np.maximum(self.mem_cap - mem, 0), untouched, cpu, hostmem,
                self.pods_free + len(uids))


def _node_state(ledger: ClusterLedger, node: str, request: PodRequest, uids: Collection[str],
                held: Mapping[str, Mapping[int, tuple[int, int]]]) -> _Node:
    slot = ledger.slot(node)
    count = int(ledger.gpu_count[slot])
    ok = ledger.gpu_ok[slot, :count].copy()
    eligible = ok & bool(ledger.admitting[slot])
    for gpu in ledger.inventory(node).gpus:
        if gpu.index < count and not request.selector.allows(gpu):
            eligible[gpu.index] = False
    usage = {}
    for uid in uids:
        record = ledger.record(uid)
        assert record is not None
        gpus = record.per_gpu_usage()
        add_usage(gpus, held.get(uid, {}))
        usage[uid] = (gpus, record.cpu_milli, record.memory_bytes)
    return _Node(
        core_used=ledger.core_used[slot, :count].copy(), mem_used=ledger.mem_used[slot, :count].copy(),
        core_cap=ledger.core_cap[slot, :count].copy(), mem_cap=ledger.mem_cap[slot, :count].copy(), ok=ok,
        eligible=eligible, cpu_free=int(ledger.cpu_free[slot]), hostmem_free=int(ledger.hostmem_free[slot]),
        pods_free=int(ledger.pods_free[slot]), usage=usage, topology=ledger.inventory(node).topology,
        models=ledger.gpu_model[slot, :count].copy(),
    )


def _fit(state: _Node, request: PodRequest, node: str, gone: Collection[str]) -> PodAllocation | None:
    core, mem, untouched, cpu, hostmem, pods = state.free_with(gone)
    if cpu < request.cpu_milli or hostmem < request.memory_bytes or pods < 1:
        return None
    grants = plan_vectors(request, state.eligible, state.mem_cap, core, mem, untouched, topology=state.topology,
                          minimum=request.gpu_topology, models=state.models) if request.wants_gpu else ()
    if grants is None:
        return None
    return PodAllocation(request.uid, node, grants, cpu_milli=request.cpu_milli, memory_bytes=request.memory_bytes)


def select_victims(
    ledger: ClusterLedger, node: str, preemptor: Preemptor, pods: Sequence[RunningPod], *,
    allowed: Mapping[str, int] | None = None, leaving: Collection[str] = (), exact_limit: int = EXACT_LIMIT,
    held: Mapping[str, Mapping[int, tuple[int, int]]] | None = None,
) -> Outcome:
    """The victim set on ``node`` for ``preemptor`` among ``pods`` (module docstring), or why there is none.

    ``pods``: the pods on the node that may be evicted (those the ledger does not count on ``node`` are ignored);
    ``allowed``: PodDisruptionBudget key → disruptions allowed; ``leaving``: UIDs already on their way out (counted
    as freed, never chosen); ``held``: pod UID → per-GPU ``(core milli, memory bytes)`` its eviction frees beyond
    its own record (the DRA claims reserved for it alone). Never raises for a node the ledger does not know (an
    :class:`Outcome` says so).
    """
    request = preemptor.request
    if preemptor.policy is PreemptionPolicy.NEVER:
        return Outcome(node, None, "preemptionPolicy is Never")
    try:
        slot = ledger.slot(node)
    except UnknownNodeError:
        return Outcome(node, None, "node unknown to the ledger")
    if not ledger.admitting[slot]:
        return Outcome(node, None, "node not admitting pods")
    on_node = set(ledger.pods_on(node))
    gone = sorted(on_node & set(leaving))
    candidates = sorted((p for p in pods if p.uid in on_node and p.uid not in leaving
                         and p.priority < preemptor.priority), key=lambda p: (p.priority, p.uid))
    state = _node_state(ledger, node, request, [*gone, *(p.uid for p in candidates)], held or {})
    budgets = dict(allowed or {})
    now = _fit(state, request, node, gone)
    if now is not None:
        return Outcome(node, Victims(node, (), 0, now))
    everyone = [*gone, *(p.uid for p in candidates)]
    if _fit(state, request, node, everyone) is None:
        return Outcome(node, None, "does not fit even with every lower-priority pod evicted"
                       if candidates else "no pod of lower priority on the node")
    useful = _useful(state, request, candidates, gone)
    groups = _per_gpu(state, request, useful, gone)
    found = [_search(state, request, node, group, budgets, gone, exact_limit) for group in groups]
    best = min((v for v in found if v is not None), key=lambda v: (v.cost, sorted(v.uids)), default=None)
    return Outcome(node, best)


def _search(state: _Node, request: PodRequest, node: str, useful: list[RunningPod], budgets: Mapping[str, int],
            gone: list[str], exact_limit: int) -> Victims | None:
    if len(useful) <= exact_limit:
        return _exact(state, request, node, useful, budgets, gone)
    return _reprieve(state, request, node, useful, budgets, gone)


def _per_gpu(state: _Node, request: PodRequest, useful: list[RunningPod], gone: list[str]) -> list[list[RunningPod]]:
    """The candidate groups to search: for a one-container share on a node not short of CPU, memory or pod slots,
    one group per eligible GPU (the pods using it: a share lands on one GPU, and evicting a pod that does not use
    that GPU frees nothing it needs, so the minimum over the groups is the minimum); otherwise all of ``useful``."""
    shape = request.simple_shape
    _, _, _, cpu, hostmem, pods = state.free_with(gone)
    short = cpu < request.cpu_milli or hostmem < request.memory_bytes or pods < 1
    if shape is None or shape.kind is not GpuKind.SHARE or short:
        return [useful]
    groups = [[p for p in useful if int(g) in state.usage[p.uid][0]] for g in np.flatnonzero(state.eligible)]
    return [group for group in groups if group]


def _useful(state: _Node, request: PodRequest, candidates: list[RunningPod], gone: list[str]) -> list[RunningPod]:
    _, _, _, cpu, hostmem, pods = state.free_with(gone)
    short = cpu < request.cpu_milli or hostmem < request.memory_bytes or pods < 1
    if short:
        return candidates
    eligible = {int(i) for i in np.flatnonzero(state.eligible)}
    return [p for p in candidates if eligible & set(state.usage[p.uid][0])]


def _victims(state: _Node, request: PodRequest, node: str, chosen: Sequence[RunningPod], budgets: Mapping[str, int],
             gone: list[str]) -> Victims | None:
    allocation = _fit(state, request, node, [*gone, *(p.uid for p in chosen)])
    if allocation is None:
        return None
    ordered = tuple(sorted(chosen, key=lambda p: (p.priority, p.uid)))
    return Victims(node, ordered, pdb_violations(ordered, budgets), allocation)


def _exact(state: _Node, request: PodRequest, node: str, useful: list[RunningPod], budgets: Mapping[str, int],
           gone: list[str]) -> Victims | None:
    subsets = [combo for size in range(1, len(useful) + 1) for combo in itertools.combinations(useful, size)]
    keyed = sorted(((_cost(combo, pdb_violations(combo, budgets)), sorted(p.uid for p in combo), combo)
                    for combo in subsets), key=lambda item: (item[0], item[1]))
    for _, _, combo in keyed:
        victims = _victims(state, request, node, combo, budgets, gone)
        if victims is not None:
            return victims
    return None


def _reprieve(state: _Node, request: PodRequest, node: str, useful: list[RunningPod], budgets: Mapping[str, int],
              gone: list[str]) -> Victims | None:
    important = sorted(useful, key=lambda p: (-p.priority, p.uid))
    violating = _violators(important, budgets)
    evicted = list(useful)
    for pod in [p for p in important if p.uid in violating] + [p for p in important if p.uid not in violating]:
        trial = [p for p in evicted if p.uid != pod.uid]
        if _fit(state, request, node, [*gone, *(p.uid for p in trial)]) is not None:
            evicted = trial
    return _victims(state, request, node, evicted, budgets, gone)


def _violators(important: list[RunningPod], budgets: Mapping[str, int]) -> set[str]:
    left = dict(budgets)
    out = set()
    for pod in important:
        for budget in pod.pdbs:
            left[budget] = left.get(budget, 0) - 1
            if left[budget] < 0:
                out.add(pod.uid)
    return out


def best_node(outcomes: Sequence[Outcome]) -> Victims | None:
    """The victim set to act on across nodes: the least by kube-scheduler's order (module docstring), then the node
    name; None when no outcome has one."""
    found = [o.victims for o in outcomes if o.victims is not None]
    if not found:
        return None
    return min(found, key=lambda v: (v.cost, v.node))
