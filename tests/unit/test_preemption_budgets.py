"""PodDisruptionBudgets in preemption: the meta/v1 selector rules and policy/v1 matching of ``domain.kube.budgets``
(kube-scheduler's ``filterPodsWithPDBViolation``), and the scheduler reading them once per preemption — standalone
spares a budget-protected pod when another victim set fits without a violation, takes it when the budget allows a
disruption, and preempts as before when the budgets cannot be listed; the extender's ``preempt`` answer counts the
violations of the set it returns."""

from __future__ import annotations

import pytest

from adapters.memory.disruption_budgets import InMemoryDisruptionBudgets
from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.errors import InvalidRequestError
from domain.kube.annotations import encode_plan
from domain.kube.budgets import (
    DisruptionBudget,
    LabelRequirement,
    LabelSelector,
    SelectorOperator,
    protection,
)
from domain.kube.objects import PodObject, PodPhase
from domain.units import GiB
from entrypoints.scheduler.extender_json import ExtenderJson
from services.scheduler.extender import Extender
from services.scheduler.standalone import StandaloneLoop
from support.kube_builders import KEYS, RES, make_gpus, make_pod
from support.scheduler_world import NONE_SCHEDULER, World, world

IN, NOT_IN = SelectorOperator.IN, SelectorOperator.NOT_IN
EXISTS, ABSENT = SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST


def pod(name: str, namespace: str = "default", **labels: str) -> PodObject:
    return PodObject(f"uid-{name}", namespace, name, labels=labels)


def budget(name: str, selector: LabelSelector | None, allowed: int = 0, *, namespace: str = "default",
           disrupted: frozenset[str] = frozenset()) -> DisruptionBudget:
    return DisruptionBudget(namespace, name, selector, allowed, disrupted)


@pytest.mark.parametrize(("term", "labels", "holds"), [
    (LabelRequirement("tier", IN, frozenset({"db", "cache"})), {"tier": "db"}, True),
    (LabelRequirement("tier", IN, frozenset({"db"})), {"tier": "web"}, False),
    (LabelRequirement("tier", IN, frozenset({"db"})), {}, False),
    (LabelRequirement("tier", NOT_IN, frozenset({"db"})), {}, True),
    (LabelRequirement("tier", NOT_IN, frozenset({"db"})), {"tier": "db"}, False),
    (LabelRequirement("tier", EXISTS), {"tier": ""}, True),
    (LabelRequirement("tier", EXISTS), {}, False),
    (LabelRequirement("tier", ABSENT), {}, True),
    (LabelRequirement("tier", ABSENT), {"tier": "db"}, False),
])
def test_selector_terms_follow_meta_v1(term: LabelRequirement, labels: dict[str, str], holds: bool) -> None:
    assert term.holds(labels) is holds
    assert LabelSelector(match_expressions=(term,)).matches(labels) is holds


def test_a_term_with_values_where_none_belong_names_the_key_and_values() -> None:
    with pytest.raises(InvalidRequestError, match=r"matchExpressions\[key=tier\]\.values=\['db'\].*Exists"):
        LabelRequirement("tier", EXISTS, frozenset({"db"}))
    with pytest.raises(InvalidRequestError, match="operator In takes one or more values"):
        LabelRequirement("tier", IN)


def test_budgets_match_their_namespace_their_selector_and_not_pods_already_disrupted() -> None:
    app = LabelSelector({"app": "train"}, (LabelRequirement("tier", NOT_IN, frozenset({"scratch"})),))
    budgets = [
        budget("train", app, 1),
        budget("empty", LabelSelector(), 3),          # empty selector: protects nothing
        budget("none", None, 3),                      # no selector: protects nothing
        budget("elsewhere", app, 2, namespace="other"),
        budget("after-a", LabelSelector({"app": "train"}), 0, disrupted=frozenset({"a"})),
    ]
    pods = [pod("a", app="train"), pod("b", app="train", tier="scratch"), pod("c", app="serve"),
            pod("d", "other", app="train")]
    matched, allowed = protection(budgets, pods)
    # a: train (after-a already counted it); b: only after-a (scratch is NotIn train's); c: none; d: its namespace's
    assert matched == {"uid-a": ("default/train",), "uid-b": ("default/after-a",), "uid-d": ("other/elsewhere",)}
    assert allowed == {"default/train": 1, "default/empty": 3, "default/none": 3, "other/elsewhere": 2,
                       "default/after-a": 0}


# ---------------------------------------------------------------------------------------------- the scheduler
PROTECTED = LabelSelector({"app": "protected"})


def running(w: World, name: str, gpu: int, percent: int, priority: int, **labels: str) -> PodObject:
    template = make_pod("template", core=str(percent), mem="1")
    made = w.cluster.create_pod(PodObject("", "default", name, containers=template.containers, labels=labels,
                                          scheduler_name=NONE_SCHEDULER, priority=priority))
    grant = ContainerGrant("main", (GpuGrant(gpu, percent * 10, GiB),))
    plan = encode_plan(PodAllocation(made.uid, "n1", (grant,)), make_gpus("n1", 2), writer=NONE_SCHEDULER)
    w.cluster.patch_pod_annotations("default", name, {KEYS.pod_plan: plan})
    w.cluster.bind_pod("default", name, uid=made.uid, node="n1")
    bound = w.cluster.set_pod_phase("default", name, PodPhase.RUNNING)
    w.service.on_pod(bound)
    return bound


def cluster_with(budgets: InMemoryDisruptionBudgets) -> tuple[World, PodObject, PodObject]:
    """n1, 2 GPUs: ``a`` (60 %, priority 5, labelled protected) on GPU 0, ``b`` (60 %, priority 10) on GPU 1.
    Without budgets an 80 % preemptor evicts ``a``, the lower priority."""
    w = world(budgets=budgets)
    w.node("n1", 2)
    assert w.service.start_leading()
    a = running(w, "a", 0, 60, priority=5, app="protected")
    b = running(w, "b", 1, 60, priority=10)
    return w, a, b


def preempt_standalone(w: World) -> list[str]:
    template = make_pod("template", core="80", mem="1")
    hi = w.cluster.create_pod(PodObject("", "default", "hi", containers=template.containers, priority=1000,
                                        scheduler_name=w.service.protocol.scheduler_name))
    w.service.on_pod(hi)
    assert StandaloneLoop(w.service).attempt(hi) is False
    return sorted(p.name for p in w.cluster.list_pods().items if p.deletion_timestamp is not None)


def test_standalone_spares_the_pod_a_budget_protects_when_another_victim_fits() -> None:
    budgets = InMemoryDisruptionBudgets()
    budgets.put(budget("protect-a", PROTECTED, allowed=0))
    w, _, _ = cluster_with(budgets)
    assert preempt_standalone(w) == ["b"]


def test_standalone_takes_the_protected_pod_when_its_budget_allows_a_disruption() -> None:
    budgets = InMemoryDisruptionBudgets()
    budgets.put(budget("protect-a", PROTECTED, allowed=1))
    w, _, _ = cluster_with(budgets)
    assert preempt_standalone(w) == ["a"]


def test_standalone_preempts_as_if_unprotected_when_budgets_cannot_be_listed(caplog: pytest.LogCaptureFixture) -> None:
    budgets = InMemoryDisruptionBudgets()
    budgets.put(budget("protect-a", PROTECTED, allowed=0))
    budgets.fail()
    w, _, _ = cluster_with(budgets)
    assert preempt_standalone(w) == ["a"]
    assert "PodDisruptionBudgets not read" in caplog.text


def preempt_json(name: str, percent: int) -> dict[str, object]:
    limits = {RES.core: str(percent), RES.memory: "1"}
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"priority": 1000, "containers": [{"name": "main", "resources": {"limits": limits}}]},
            "status": {}}


def test_the_extender_answers_the_violation_free_set_within_the_proposal_with_its_own_count() -> None:
    budgets = InMemoryDisruptionBudgets()
    budgets.put(budget("protect-a", PROTECTED, allowed=0))
    w, a, b = cluster_with(budgets)
    wire = ExtenderJson(Extender(w.service))
    proposal = {"n1": {"Pods": [{"UID": a.uid}, {"UID": b.uid}], "NumPDBViolations": 1}}
    reply = wire.preempt({"Pod": preempt_json("hi", 80), "NodeNameToMetaVictims": proposal})
    assert reply == {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": b.uid}], "NumPDBViolations": 0}}}
    only_a = {"n1": {"Pods": [{"UID": a.uid}], "NumPDBViolations": 0}}
    reply = wire.preempt({"Pod": preempt_json("hi", 80), "NodeNameToMetaVictims": only_a})
    assert reply == {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": a.uid}], "NumPDBViolations": 1}}}
    budgets.fail()  # unread budgets: kube-scheduler's own number for its proposal
    reply = wire.preempt({"Pod": preempt_json("hi", 80), "NodeNameToMetaVictims": proposal})
    assert reply == {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": a.uid}], "NumPDBViolations": 1}}}


def test_standalone_lists_budgets_only_for_a_pod_some_eviction_helps_and_each_time() -> None:
    budgets = InMemoryDisruptionBudgets()
    listings = []
    read = budgets.list_budgets

    def counted() -> list[DisruptionBudget]:
        listings.append(1)
        return read()

    budgets.list_budgets = counted  # type: ignore[method-assign]
    w, _, _ = cluster_with(budgets)
    template = make_pod("template", core="80", mem="1")

    def pending(name: str, priority: int) -> PodObject:
        pod = w.cluster.create_pod(PodObject("", "default", name, containers=template.containers, priority=priority,
                                             scheduler_name=w.service.protocol.scheduler_name))
        w.service.on_pod(pod)
        return pod

    loop = StandaloneLoop(w.service)
    low = pending("low", 1)
    for _ in range(3):  # no pod of lower priority: no victim set, no listing
        assert loop.attempt(low) is False
    assert listings == []
    budgets.put(budget("protect-a", PROTECTED, allowed=0))  # created just before the preemption: it counts
    assert loop.attempt(pending("high", 1000)) is False
    assert len(listings) == 1
    assert [p.name for p in w.cluster.list_pods().items if p.deletion_timestamp is not None] == ["b"]  # a spared
