"""Contract of the PodDisruptionBudget port (``ports.disruption_budgets.DisruptionBudgetsApi``), against
InMemoryDisruptionBudgets and KubernetesDisruptionBudgets (a real kube-apiserver of the live version serving
``policy/v1``, marker ``k8s``, the contract suite's shared control plane; no disruption controller runs there, so
the test writes ``status`` itself through the status subresource).

Behaviours covered: budgets of two namespaces listed in (namespace, name) order with their selector (matchLabels
and every operator of matchExpressions), ``status.disruptionsAllowed`` and ``status.disruptedPods`` names; a
budget without a status reads 0 allowed; a deleted budget is gone from the next list.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import attrs
import pytest

from adapters.memory.disruption_budgets import InMemoryDisruptionBudgets
from domain.kube.budgets import DisruptionBudget, LabelRequirement, LabelSelector, SelectorOperator
from ports.disruption_budgets import DisruptionBudgetsApi


@attrs.define
class BudgetsUnderTest:
    """The port, plus ``write`` (create with status) and ``delete``."""

    api: DisruptionBudgetsApi
    write: Callable[[DisruptionBudget], None]
    delete: Callable[[DisruptionBudget], None]


def _memory() -> BudgetsUnderTest:
    store = InMemoryDisruptionBudgets()
    return BudgetsUnderTest(store, store.put, lambda b: store.delete(b.namespace, b.name))


def _selector_json(selector: LabelSelector | None) -> dict[str, object] | None:
    if selector is None:
        return None
    return {"matchLabels": dict(selector.match_labels),
            "matchExpressions": [{"key": t.key, "operator": t.operator.value, "values": sorted(t.values)}
                                 for t in selector.match_expressions]}


@pytest.fixture(params=["memory", pytest.param("kubernetes", marks=pytest.mark.k8s)])
def budgets(request: pytest.FixtureRequest) -> Iterator[BudgetsUnderTest]:
    if request.param == "memory":
        yield _memory()
        return
    from kubernetes import client

    from adapters.kubernetes.disruptionbudgets import KubernetesDisruptionBudgets

    plane = request.getfixturevalue("contract_k8s_plane")
    api_client = plane.api_client()
    policy, core = client.PolicyV1Api(api_client), client.CoreV1Api(api_client)
    made: list[DisruptionBudget] = []

    def write(budget: DisruptionBudget) -> None:
        try:
            core.create_namespace({"metadata": {"name": budget.namespace}})
        except client.ApiException as error:
            if error.status != 409:
                raise
        body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": budget.name},
                "spec": {"maxUnavailable": 1, "selector": _selector_json(budget.selector)}}
        policy.create_namespaced_pod_disruption_budget(budget.namespace, body)
        made.append(budget)
        if budget.disruptions_allowed or budget.disrupted_pods:
            status = {"status": {"disruptionsAllowed": budget.disruptions_allowed, "currentHealthy": 0,
                                 "desiredHealthy": 0, "expectedPods": 0,
                                 "disruptedPods": dict.fromkeys(budget.disrupted_pods, "2026-01-01T00:00:00Z")}}
            policy.patch_namespaced_pod_disruption_budget_status(budget.name, budget.namespace, status,
                                                                 _content_type="application/merge-patch+json")

    def delete(budget: DisruptionBudget) -> None:
        policy.delete_namespaced_pod_disruption_budget(budget.name, budget.namespace)
        made.remove(budget)

    try:
        yield BudgetsUnderTest(KubernetesDisruptionBudgets(api_client), write, delete)
    finally:
        for budget in list(made):
            delete(budget)
        api_client.close()


def test_budgets_list_with_selectors_and_status_in_namespace_order(budgets: BudgetsUnderTest) -> None:
    suffix = uuid.uuid4().hex[:6]
    terms = (LabelRequirement("tier", SelectorOperator.IN, frozenset({"db", "cache"})),
             LabelRequirement("zone", SelectorOperator.NOT_IN, frozenset({"b"})),
             LabelRequirement("gpu", SelectorOperator.EXISTS),
             LabelRequirement("scratch", SelectorOperator.DOES_NOT_EXIST))
    first = DisruptionBudget(f"pdb-b-{suffix}", "train", LabelSelector({"app": "train"}, terms), 2,
                             frozenset({"train-0"}))
    second = DisruptionBudget(f"pdb-a-{suffix}", "serve", LabelSelector({"app": "serve"}), 0)
    budgets.write(first)
    budgets.write(second)
    mine = [b for b in budgets.api.list_budgets() if b.namespace.endswith(suffix)]
    assert mine == [second, first]

    budgets.delete(second)
    assert [b for b in budgets.api.list_budgets() if b.namespace.endswith(suffix)] == [first]
