"""Policy registry: every scheduling policy by name, built into a :class:`Profile`.

A policy is a named, pure strategy: node score plugin + reserve-phase GPU chooser + default tie rule. Unknown
names fail at configuration time (:func:`validate_policy_names`), never at the first scheduling call.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import numpy as np

from domain.errors import InvalidRequestError, UnknownPolicyError
from domain.ledger import ClusterLedger
from domain.scheduling.framework.choosers import BestFitGpu, RandomGpu, ShareGpuChooser, WorstFitGpu
from domain.scheduling.framework.cycle import BindPlugin, Profile, ScorePlugin, TieBreaker, WeightedScore
from domain.scheduling.framework.filters import GpuFit, GpuModelMatch, NodeResourcesFit
from domain.scheduling.framework.planner import ChooserPlanner
from domain.scheduling.framework.tiebreak import make_tie_breaker
from domain.scheduling.framework.topology import GpuTopologyFirst, GpuTopologyFit, GpuTopologyTies, TopologyClasses
from domain.scheduling.mig.timesharing import MigModeGpus
from domain.scheduling.policies.classic import (
    BestFitScore,
    BinpackScore,
    DotProductScore,
    GpuClusteringScore,
    GpuPackingScore,
    RandomScore,
    SpreadScore,
)
from domain.scheduling.policies.fgd.deficit import FgdDeficitScore
from domain.scheduling.policies.fgd.fragmentation import FragmentationModel, TypicalPods
from domain.scheduling.policies.fgd.nodestates import NodeStateCache
from domain.scheduling.policies.fgd.plus import FgdPlusScore
from domain.scheduling.policies.fgd.residue import FgdResidueScore
from domain.scheduling.policies.fgd.scarce import FgdScarceScore
from domain.scheduling.policies.fgd.score import FgdScore
from domain.scheduling.policies.fgd.staged import FgdStagedScore
from domain.scheduling.policies.kubedefault import FirstFitGpu, KubeDefaultScore


@attrs.frozen
class PolicyContext:
    """What a policy may need: the ledger, the run's random generator, and (FGD) a node-state cache."""

    ledger: ClusterLedger
    rng: np.random.Generator
    states: NodeStateCache | None = None


@attrs.frozen
class Policy:
    """A registered policy: ``name``, one-line ``summary``, and ``build(context) -> (score, chooser)``."""

    name: str
    summary: str
    build: Callable[[PolicyContext], tuple[ScorePlugin, ShareGpuChooser]]
    needs_typical_pods: bool = False


def _fgd_family(
    name: str, score: type[FgdScore] | type[FgdStagedScore]
) -> Callable[[PolicyContext], tuple[ScorePlugin, ShareGpuChooser]]:
    """The builder of an FGD-family policy: one ``score`` plugin over the run's node-state cache, which is also its
    GPU chooser. The builder raises :class:`InvalidRequestError` (field ``policy``) without typical pods."""

    def build(context: PolicyContext) -> tuple[ScorePlugin, ShareGpuChooser]:
        if context.states is None:
            raise InvalidRequestError("policy", name, "needs a typical-pod distribution (workload) to score against")
        plugin = score(context.states)
        return plugin, plugin

    return build


def _fgd_node_first_fit(context: PolicyContext) -> tuple[ScorePlugin, ShareGpuChooser]:
    """fgd's node score over the run's node-state cache with the DRA allocator's first-fit GPU choice: a pod whose
    GPUs come from claims, placed in extender mode (``services.scheduler.extender``: our filter picks the node,
    kube-scheduler's DynamicResources plugin the devices). Raises :class:`InvalidRequestError` without typical
    pods."""
    score, _ = _fgd_family("fgd-node-first-fit", FgdScore)(context)
    return score, FirstFitGpu()


POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy("binpack", "fill the fullest node and the fullest GPU first", lambda c: (BinpackScore(), BestFitGpu())),
        Policy("spread", "use the emptiest node and the emptiest GPU first", lambda c: (SpreadScore(), WorstFitGpu())),
        Policy("random", "uniformly random feasible node and GPU (ATC'23 Random-fit)",
               lambda c: (RandomScore(c.rng), RandomGpu(c.rng))),
        Policy("dot-product", "Tetris-style dot product, as published (ATC'23 DotProd)",
               lambda c: (DotProductScore(), BestFitGpu())),
        Policy("gpu-clustering", "co-locate pods of the same GPU shape (ATC'23 GpuClustering)",
               lambda c: (GpuClusteringScore(), BestFitGpu())),
        Policy("gpu-packing", "fill partly used GPUs before fresh ones (ATC'23 GpuPacking)",
               lambda c: (GpuPackingScore(), BestFitGpu())),
        Policy("best-fit", "least leftover CPU and GPU (ATC'23 BestFit)", lambda c: (BestFitScore(), BestFitGpu())),
        Policy("dra-first-fit", "kube-scheduler's DRA placement: default node scoring (least allocated and balanced "
               "CPU and memory; GPUs unscored), then the first GPUs that fit in device order",
               lambda c: (KubeDefaultScore(), FirstFitGpu())),
        Policy("fgd", "fragmentation gradient descent (Weng et al., ATC'23)", _fgd_family("fgd", FgdScore),
               needs_typical_pods=True),
        Policy("fgd-node-first-fit", "extender mode with DRA claims: fgd chooses the node, kube-scheduler's DRA "
               "allocator then takes the first GPUs that fit there in device order",
               _fgd_node_first_fit, needs_typical_pods=True),
        Policy("fgd-plus", "fgd-deficit-scarce, with shares placed by cluster-wide gap balance (closing a GPU first, "
               "then the sum of squares of gap counts)", _fgd_family("fgd-plus", FgdPlusScore),
               needs_typical_pods=True),
        Policy("fgd-staged", "fgd, with fgd-plus's gap balance for shares where it takes no whole GPU (partly used "
               "GPUs below saturation, every GPU when at most 10 % of GPUs are whole) and one-GPU pods by "
               "fgd-deficit-scarce, kept off the most CPU-rich node of a GPU count while its GPUs are all free and "
               "another node fits",
               _fgd_family("fgd-staged", FgdStagedScore), needs_typical_pods=True),
        Policy("fgd-residue", "FGD, ties settled by the least loss of absorbable GPU (saturation residue)",
               _fgd_family("fgd-residue", FgdResidueScore), needs_typical_pods=True),
        Policy("fgd-deficit-blend", "fgd-residue, with the GPUs a placement leaves without their typical CPU counted "
               "as fragmentation", _fgd_family("fgd-deficit-blend", FgdDeficitScore), needs_typical_pods=True),
        Policy("fgd-deficit-scarce", "fgd-deficit-blend, also charging GPU taken from models that model-restricted "
               "pods need", _fgd_family("fgd-deficit-scarce", FgdScarceScore), needs_typical_pods=True),
    )
}

PUBLISHED_POLICIES = ("random", "dot-product", "gpu-clustering", "gpu-packing", "best-fit", "fgd")
"""The six policies of the published experiment, in the paper's order."""


def get_policy(name: str) -> Policy:
    """The registered policy ``name``. Raises :class:`UnknownPolicyError` listing the known names."""
    try:
        return POLICIES[name]
    except KeyError:
        raise UnknownPolicyError(name, list(POLICIES)) from None


def validate_policy_names(names: list[str]) -> list[str]:
    """Check a configured list of policy names; returns it. Raises :class:`UnknownPolicyError` or, for an empty
    list, :class:`InvalidRequestError`."""
    if not names:
        raise InvalidRequestError("policy", "", "name at least one policy")
    for name in names:
        get_policy(name)
    return names


def build_profile(
    name: str,
    ledger: ClusterLedger,
    *,
    rng: np.random.Generator,
    typical: TypicalPods | None = None,
    states: NodeStateCache | None = None,
    tie_break: str = "fixed-order",
    binder: BindPlugin | None = None,
    mig_stem: str | None = None,
    tie_breaker: TieBreaker | None = None,
    topology_first: bool = False,
) -> Profile:
    """Build the profile of policy ``name``: filters (node resources, GPUs in MIG mode, GPU model, per-GPU fit, the
    pod's GPU topology requirement),
    its score plugin (weight 1) and the topology tie refiner (weight 0,
    :class:`~domain.scheduling.framework.topology.GpuTopologyTies`), its GPU chooser and the tie rule (default
    ``fixed-order``, §3.4).

    ``mig_stem``: ``<prefix>/mig-`` of the protocol's MIG resources, named when a time-sharing pod meets GPUs in MIG
    mode (:class:`~domain.scheduling.mig.timesharing.MigModeGpus`).

    ``tie_breaker``: an existing tie rule to reuse (then ``tie_break`` is ignored and ``rng`` draws no node order).

    ``topology_first``: add :class:`~domain.scheduling.framework.topology.GpuTopologyFirst` after the filters, so a
    pod of 2 or more whole GPUs goes to a node offering the best-connected set before the policy's score decides.

    ``typical`` (or a ready ``states`` cache) is required for ``fgd``, ``fgd-plus``, ``fgd-staged``,
    ``fgd-residue``, ``fgd-deficit-blend`` and ``fgd-deficit-scarce``. Raises
    :class:`UnknownPolicyError`.
    """
    policy = get_policy(name)
    if states is None and typical is not None:
        states = NodeStateCache(FragmentationModel(typical, ledger))
    score, chooser = policy.build(PolicyContext(ledger=ledger, rng=rng, states=states))
    classes = TopologyClasses()
    first = (GpuTopologyFirst(classes),) if topology_first else ()
    return Profile(
        name=name,
        filters=(NodeResourcesFit(), MigModeGpus(mig_stem), GpuModelMatch(), GpuFit(), GpuTopologyFit(classes),
                 *first),
        scores=(WeightedScore(score), WeightedScore(GpuTopologyTies(classes), weight=0)),
        planner=ChooserPlanner(chooser),
        tie_breaker=tie_breaker if tie_breaker is not None else make_tie_breaker(tie_break, ledger, rng),
        binder=binder,
    )
