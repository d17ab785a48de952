"""Port of the PodDisruptionBudgets preemption reads (policy/v1).

:class:`DisruptionBudgetsApi`: ``list_budgets`` returns every budget of every namespace as
:class:`domain.kube.budgets.DisruptionBudget`. Implementations: ``adapters.kubernetes.disruptionbudgets.
KubernetesDisruptionBudgets`` and ``adapters.memory.disruption_budgets.InMemoryDisruptionBudgets``;
``tests/contract/test_disruption_budgets_contract.py`` checks both against one contract. Every failure is a
:class:`ports.cluster.ClusterError` (unreachable server: :class:`ports.cluster.UnavailableError`); a budget whose
selector the domain refuses is skipped by the adapter and logged, never raised.
"""

from __future__ import annotations

from typing import Protocol

from domain.kube.budgets import DisruptionBudget

__all__ = ["DisruptionBudgetsApi"]


class DisruptionBudgetsApi(Protocol):
    """PodDisruptionBudgets of all namespaces, read only (module docstring)."""

    def list_budgets(self) -> list[DisruptionBudget]:
        """Every budget, in (namespace, name) order. Raises :class:`ports.cluster.ClusterError`."""
        ...
