"""PodDisruptionBudgets (policy/v1) as preemption reads them: which budgets protect which pods, and how many more
disruptions each allows.

Source: kube-scheduler's ``filterPodsWithPDBViolation`` and ``getPodDisruptionBudgets``
(``pkg/scheduler/framework/preemption``) and the meta/v1 label selector rules (``LabelSelectorAsSelector``):

* a budget matches a pod of **its own namespace** whose labels its selector matches; a budget with no selector or an
  empty one (no ``matchLabels``, no ``matchExpressions``) matches nothing (policy/v1 says an empty selector
  selects nothing);
* ``matchLabels`` and every ``matchExpressions`` term must all hold: ``In`` (the label is present with one of the
  values), ``NotIn`` (absent, or present with none of them), ``Exists``, ``DoesNotExist``;
* a pod named in the budget's ``status.disruptedPods`` was already counted by the disruption controller and takes
  nothing more from that budget;
* ``status.disruptionsAllowed`` is what the budget still allows (0 when the disruption controller has not
  written it yet).

Pure: no I/O. :func:`protection` turns budgets and pods into the two maps :mod:`domain.scheduling.preemption`
takes (pod UID → budget keys, budget key → disruptions allowed).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

import attrs

from domain.errors import InvalidRequestError
from domain.kube.objects import PodObject


class SelectorOperator(enum.Enum):
    """``matchExpressions[].operator`` of a meta/v1 LabelSelector."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


@attrs.frozen
class LabelRequirement:
    """One ``matchExpressions`` term: ``key``, ``operator`` and ``values`` (non-empty for In/NotIn, empty for
    Exists/DoesNotExist, as the API server validates)."""

    key: str
    operator: SelectorOperator
    values: frozenset[str] = frozenset()

    def __attrs_post_init__(self) -> None:
        wants_values = self.operator in (SelectorOperator.IN, SelectorOperator.NOT_IN)
        if wants_values != bool(self.values):
            need = "one or more values" if wants_values else "no values"
            raise InvalidRequestError(f"selector.matchExpressions[key={self.key}].values", sorted(self.values),
                                      f"operator {self.operator.value} takes {need}")

    def holds(self, labels: Mapping[str, str]) -> bool:
        """True when ``labels`` satisfy this term."""
        present = self.key in labels
        if self.operator is SelectorOperator.IN:
            return present and labels[self.key] in self.values
        if self.operator is SelectorOperator.NOT_IN:
            return not present or labels[self.key] not in self.values
        if self.operator is SelectorOperator.EXISTS:
            return present
        return not present


@attrs.frozen
class LabelSelector:
    """A meta/v1 LabelSelector: ``match_labels`` and ``match_expressions``, all ANDed."""

    match_labels: Mapping[str, str] = attrs.field(factory=dict)
    match_expressions: tuple[LabelRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        """No term at all (a PodDisruptionBudget's empty selector matches no pod)."""
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when every term holds for ``labels`` (an empty selector matches everything, as in meta/v1;
        budgets exclude it themselves)."""
        return (all(labels.get(k) == v for k, v in self.match_labels.items())
                and all(term.holds(labels) for term in self.match_expressions))


@attrs.frozen
class DisruptionBudget:
    """A policy/v1 PodDisruptionBudget: ``namespace``, ``name``, ``selector`` (None when the spec has none),
    ``disruptions_allowed`` (``status.disruptionsAllowed``) and ``disrupted_pods`` (names in
    ``status.disruptedPods``)."""

    namespace: str
    name: str
    selector: LabelSelector | None = None
    disruptions_allowed: int = 0
    disrupted_pods: frozenset[str] = frozenset()

    @property
    def key(self) -> str:
        """``namespace/name``, the budget's key in :func:`protection`'s maps."""
        return f"{self.namespace}/{self.name}"

    def protects(self, pod: PodObject) -> bool:
        """True when this budget counts a disruption of ``pod`` (module docstring)."""
        if self.selector is None or self.selector.empty or pod.namespace != self.namespace:
            return False
        return pod.name not in self.disrupted_pods and self.selector.matches(pod.labels)


def protection(budgets: Iterable[DisruptionBudget], pods: Iterable[PodObject]) -> tuple[
        dict[str, tuple[str, ...]], dict[str, int]]:
    """For ``pods``: pod UID → keys of the budgets that protect it (only pods some budget protects), and budget key
    → disruptions allowed (every budget given). Shapes as :func:`domain.scheduling.preemption.victims.select_victims`
    takes them (``pdbs`` per candidate, ``allowed``)."""
    listed = list(budgets)
    allowed = {budget.key: budget.disruptions_allowed for budget in listed}
    by_namespace: dict[str, list[DisruptionBudget]] = {}
    for budget in listed:
        by_namespace.setdefault(budget.namespace, []).append(budget)
    matched: dict[str, tuple[str, ...]] = {}
    for pod in pods:
        keys = tuple(b.key for b in by_namespace.get(pod.namespace, ()) if b.protects(pod))
        if keys:
            matched[pod.uid] = keys
    return matched, allowed
