"""PodDisruptionBudgets, read only (:class:`~ports.disruption_budgets.DisruptionBudgetsApi`), over the official
client's ``PolicyV1Api`` (``policy/v1``, Kubernetes 1.21+).

Read: ``spec.selector`` (``matchLabels``, ``matchExpressions``), ``status.disruptionsAllowed`` (missing: 0) and
the names of ``status.disruptedPods``. A budget whose selector the domain refuses (an operator it does not know,
values where none belong) is left out and logged: it protects nothing, which is also how kube-scheduler treats a
selector it cannot convert. API errors become :class:`ports.cluster.ClusterError` (:func:`.errors.api_errors`).
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes import client

from domain.errors import InvalidRequestError
from domain.kube.budgets import DisruptionBudget, LabelRequirement, LabelSelector, SelectorOperator

from .compat import wire_timeout
from .errors import api_errors

log = logging.getLogger(__name__)


def _selector(model: Any) -> LabelSelector | None:
    if model is None:
        return None
    terms = []
    for expression in model.match_expressions or ():
        try:
            operator = SelectorOperator(expression.operator)
        except ValueError as error:
            raise InvalidRequestError(f"spec.selector.matchExpressions[key={expression.key}].operator",
                                      expression.operator, "not In, NotIn, Exists or DoesNotExist") from error
        terms.append(LabelRequirement(expression.key, operator, frozenset(expression.values or ())))
    return LabelSelector(dict(model.match_labels or {}), tuple(terms))


def budget_from_v1(model: Any) -> DisruptionBudget:
    """A ``V1PodDisruptionBudget`` as the domain's budget. Raises InvalidRequestError for a selector it refuses."""
    status = model.status
    allowed = status.disruptions_allowed if status is not None and status.disruptions_allowed is not None else 0
    disrupted = frozenset((status.disrupted_pods or {}).keys()) if status is not None else frozenset()
    spec = model.spec
    return DisruptionBudget(namespace=model.metadata.namespace or "", name=model.metadata.name or "",
                            selector=_selector(spec.selector if spec is not None else None),
                            disruptions_allowed=int(allowed), disrupted_pods=disrupted)


class KubernetesDisruptionBudgets:
    """:class:`~ports.disruption_budgets.DisruptionBudgetsApi` over ``api_client`` with ``request_timeout`` (s)
    per call; the caller owns and closes the client."""

    def __init__(self, api_client: client.ApiClient, *, request_timeout: float = 30.0) -> None:
        self._api = client.PolicyV1Api(api_client)
        self._timeout = wire_timeout(request_timeout)

    def list_budgets(self) -> list[DisruptionBudget]:
        """Every budget of every namespace, in (namespace, name) order. Raises ClusterError."""
        with api_errors("list poddisruptionbudgets"):
            listed = self._api.list_pod_disruption_budget_for_all_namespaces(_request_timeout=self._timeout)
        budgets = []
        for model in listed.items:
            try:
                budgets.append(budget_from_v1(model))
            except InvalidRequestError as error:
                meta = model.metadata
                where = f"{meta.namespace}/{meta.name}" if meta is not None else "(no metadata)"
                log.warning("PodDisruptionBudget %s left out: %s", where, error)
        return sorted(budgets, key=lambda b: (b.namespace, b.name))
