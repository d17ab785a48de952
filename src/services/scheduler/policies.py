"""Which scheduler schedules a pod: the configured default policy, a per-pod override, FGD's typical pods.

* **Default** — ``fgd`` (:data:`DEFAULT_POLICY`), the published FGD, until a policy places at least as much as it
  at every arrived load. ``fgd-plus`` stays selectable (``--policy fgd-plus`` or the pod annotation):
  on the trace replay (``bench/trace_replay.py``, seeds 42-51) it beats FGD by at least half a point of GPU
  allocation at 130 % arrived load on each of the six openb pod files (``docs/fgd-plus.md``), but below
  saturation it places less than FGD on most traces — typically 0.3-0.6 points less at 70-80 % arrived and
  0.9-1.8 points less at 90-95 % (large multi-GPU pods that FGD places fail) — and a cluster spends most of its
  time below saturation. FGD reaches 95.4 % on ``default`` at 130 % (``best-fit`` 93.2 %).
* **Override** — the pod annotation ``protocol.annotations.pod_policy`` names another registered policy; an
  unknown name raises :class:`UnknownPolicyError` (the pod is unschedulable with that reason).
* **Typical pods** (``fgd``, ``fgd-plus``, ``fgd-staged``, ``fgd-residue``, ``fgd-deficit-blend``,
  ``fgd-deficit-scarce``: every policy that ``needs_typical_pods``, :mod:`domain.scheduling.policies.fgd.typical`) —
  the pods observed in the cluster (non-terminal, readable requests), topped up by the embedded synthetic workload
  (``synthetic_scale``) until ``min_observed_pods`` exist. They are recomputed at every resync; those policies'
  schedulers are rebuilt when they changed.
* **MIG** — pods asking for ``<prefix>/mig-<profile>`` instances go through the same schedulers' node filters, then
  the MIG plugin (:meth:`~domain.scheduling.sync.LedgerSync.schedule`); ``mig_strategy`` (``static`` or
  ``dynamic``, the scheduler's ``--mig-strategy``) is the placement mode of the MIG books and must match the node
  Runtimes' ``--mig-strategy``. MIG pods are not FGD typical pods (they take no time-shared GPU).
* **Filters** — every scheduler starts with :class:`~domain.scheduling.framework.candidates.CandidateNodes` (the
  extender's candidate list, given per cycle), then the node-fit filters of
  :func:`~domain.scheduling.nodefit.node_filters` (cordon, nodeSelector, required node affinity, taints, inventory
  gate), then the policy's own (CPU/memory/pod slots, GPUs in MIG mode, GPU model/UUID, per-GPU fit). All policies
  share one tie rule instance (one node order).

Not thread-safe: :class:`~services.scheduler.service.SchedulerService` calls it under its lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

import attrs
import numpy as np

from domain.errors import InvalidRequestError, UnknownPolicyError
from domain.kube.annotations import MIG_STRATEGIES
from domain.kube.objects import PodObject
from domain.kube.protocol import ProtocolConstants
from domain.kube.translate import mig_stem
from domain.ledger import ClusterLedger
from domain.scheduling.framework.candidates import CandidateNodes
from domain.scheduling.framework.cycle import Scheduler, TieBreaker
from domain.scheduling.framework.tiebreak import make_tie_breaker
from domain.scheduling.nodefit import node_filters
from domain.scheduling.nodefit.holds import DEFAULT_WINDOW_S, hold_window
from domain.scheduling.policies.fgd.fragmentation import PodClass, TypicalPods
from domain.scheduling.policies.fgd.typical import PodClasses, blend_typical
from domain.scheduling.registry import POLICIES, build_profile, get_policy
from domain.scheduling.sync import LedgerSync
from domain.simulation.synthetic import synthetic_pods

DEFAULT_POLICY = "fgd"
"""Default policy (module docstring)."""


@attrs.frozen
class ServiceConfig:
    """Tunables of the scheduler service: ``policy`` (default policy name), ``tie_break`` (tie rule name),
    ``seed`` (draw of the tie order), ``assumed_ttl_seconds`` (s an uncommitted reservation lives),
    ``min_observed_pods`` (observed pods before FGD stops adding the synthetic workload), ``synthetic_scale``
    (size of that workload, :func:`domain.simulation.synthetic.synthetic_pods`), ``mig_strategy`` (``static`` or
    ``dynamic``: placement mode of the MIG books; module docstring), ``admission_hold_seconds`` (s a pod waiting
    for its devices holds its node against pods with a confusable request; 0 or None: no holds, as
    ``--admission-hold 0`` — :func:`domain.scheduling.nodefit.holds.hold_window`). ``follow_nominations``
    (extender mode): hold the node kube-scheduler nominated a pod to (``status.nominatedNodeName``, after its
    preemption) as the standalone loop holds its own nominations (:meth:`.preempting.PreemptionEntries.follow`).
    ``topology_first``: a pod of 2 or more whole GPUs goes only to the nodes offering its best-connected set's best
    tier before the policy scores them (:class:`domain.scheduling.framework.topology.GpuTopologyFirst`).

    Replay hooks (None in production; ``bench/trace_replay.py --driver extender`` sets both so the service
    decides exactly like the in-process replay): ``typical_pods`` pins FGD's typical pods (used as they are,
    never blended with the observed pods); ``rng`` is the generator that draws the tie order (and feeds random
    policies), instead of a fresh ``default_rng(seed)`` per policy.

    Raises :class:`UnknownPolicyError` for an unknown policy or tie rule and :class:`InvalidRequestError` for a
    TTL ≤ 0, a negative ``min_observed_pods``, a scale ≤ 0, an unknown MIG strategy or a negative, NaN or infinite
    ``admission_hold_seconds``.
    """

    policy: str = DEFAULT_POLICY
    tie_break: str = "fixed-order"
    seed: int = 0
    assumed_ttl_seconds: float = 60.0
    min_observed_pods: int = 200
    synthetic_scale: float = 0.1
    typical_pods: TypicalPods | None = attrs.field(default=None, eq=False)
    rng: np.random.Generator | None = attrs.field(default=None, eq=False, repr=False)
    mig_strategy: str = "static"
    admission_hold_seconds: float | None = DEFAULT_WINDOW_S
    follow_nominations: bool = False
    topology_first: bool = False

    def __attrs_post_init__(self) -> None:
        hold_window(self.admission_hold_seconds)
        if self.mig_strategy not in MIG_STRATEGIES:
            raise InvalidRequestError("mig_strategy", self.mig_strategy, f"must be one of {', '.join(MIG_STRATEGIES)}")
        get_policy(self.policy)
        make_tie_breaker(self.tie_break, ClusterLedger(), np.random.default_rng(0))
        if not self.assumed_ttl_seconds > 0:
            raise InvalidRequestError("assumed_ttl_seconds", self.assumed_ttl_seconds, "must be > 0")
        if self.min_observed_pods < 0:
            raise InvalidRequestError("min_observed_pods", self.min_observed_pods, "must be >= 0")
        if not self.synthetic_scale > 0:
            raise InvalidRequestError("synthetic_scale", self.synthetic_scale, "must be > 0")


@cache
def _synthetic_classes(scale: float) -> tuple[PodClass, ...]:
    return tuple(p.pod_class for p in synthetic_pods(scale))


class SchedulerSet:
    """One :class:`Scheduler` per policy over ``sync``'s ledger, built on first use (module docstring)."""

    def __init__(self, sync: LedgerSync, protocol: ProtocolConstants, config: ServiceConfig) -> None:
        self.sync = sync
        self.protocol = protocol
        self.config = config
        self._schedulers: dict[str, Scheduler] = {}
        self._tie: TieBreaker | None = None
        self._observed: dict[str, PodClass] = {}
        self._classes = PodClasses()  # typical-pod keys, one per shared request template
        self._typical: TypicalPods | None = None

    def policy_for(self, pod: PodObject) -> str:
        """The pod's policy: its override annotation, else the default. Raises :class:`UnknownPolicyError`
        whose message names the annotation and lists the known policies."""
        key = self.protocol.annotations.pod_policy
        name = pod.annotations.get(key, "").strip() or self.config.policy
        if name not in POLICIES:
            raise UnknownPolicyError(f"{name} (annotation {key})", list(POLICIES))
        return name

    def get(self, policy: str) -> Scheduler:
        """The scheduler of ``policy`` (module docstring for its filters). Raises :class:`UnknownPolicyError`."""
        found = self._schedulers.get(policy)
        if found is not None:
            return found
        sync, ledger = self.sync, self.sync.ledger
        rng = self.config.rng if self.config.rng is not None else np.random.default_rng(self.config.seed)
        if self._tie is None:
            self._tie = make_tie_breaker(self.config.tie_break, ledger, rng)
        typical = self.typical_pods() if get_policy(policy).needs_typical_pods else None
        profile = build_profile(policy, ledger, rng=rng, typical=typical, mig_stem=mig_stem(self.protocol),
                                topology_first=self.config.topology_first)
        nodes = node_filters(sync.nodes, sync.constraints, sync.gates, usage=sync.extended_usage,
                             state_annotation=self.protocol.annotations.node_state,
                             enable_label=self.protocol.node_label, held=sync.held_nodes,
                             claims_only=sync.claims_only)
        filters = (CandidateNodes(), *nodes, *profile.filters)
        scheduler = Scheduler(ledger, attrs.evolve(profile, filters=filters, tie_breaker=self._tie))
        sync.attach(scheduler)
        self._schedulers[policy] = scheduler
        return scheduler

    # ------------------------------------------------------------------ typical pods
    def observe(self, pod: PodObject) -> None:
        """Record (or, for a finished or unreadable pod, drop) the class of ``pod``. Never raises."""
        if pod.phase.terminal:
            self._observed.pop(pod.uid, None)
            return
        try:
            request = self.sync.requests.get(pod)
        except InvalidRequestError:
            self._observed.pop(pod.uid, None)
            return
        if request.wants_mig:  # a MIG pod takes no time-shared GPU: not a typical pod of FGD
            self._observed.pop(pod.uid, None)
            return
        self._observed[pod.uid] = self._classes.of(request)

    def forget(self, uid: str) -> None:
        """Drop the class of a deleted pod."""
        self._observed.pop(uid, None)

    def reobserve(self, pods: Iterable[PodObject]) -> None:
        """Replace the observed classes by those of a full listing; rebuild FGD's schedulers if their typical
        pods changed."""
        self._observed = {}
        for pod in pods:
            self.observe(pod)
        old, self._typical = self._typical, None
        if old is not None and self.typical_pods() != old:
            for name in [n for n in self._schedulers if get_policy(n).needs_typical_pods]:
                del self._schedulers[name]

    def typical_pods(self) -> TypicalPods:
        """FGD's typical pods (module docstring); computed once per resync, unless pinned by the config."""
        if self.config.typical_pods is not None:
            return self.config.typical_pods
        if self._typical is None:
            self._typical = blend_typical(self._observed.values(), _synthetic_classes(self.config.synthetic_scale),
                                          min_observed=self.config.min_observed_pods)
        return self._typical
