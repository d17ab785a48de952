"""In-memory twin of :class:`ports.disruption_budgets.DisruptionBudgetsApi`: budgets put by tests (``put``,
``delete``); ``fail`` makes the next lists raise :class:`ports.cluster.UnavailableError` (as an unreachable API
server does)."""

from __future__ import annotations

import threading

from domain.kube.budgets import DisruptionBudget
from ports.cluster import UnavailableError


class InMemoryDisruptionBudgets:
    """Budgets by (namespace, name); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._budgets: dict[tuple[str, str], DisruptionBudget] = {}
        self._failing = False

    def put(self, budget: DisruptionBudget) -> None:
        """Create or replace ``budget``."""
        with self._lock:
            self._budgets[(budget.namespace, budget.name)] = budget

    def delete(self, namespace: str, name: str) -> None:
        """Remove the budget (no error when absent)."""
        with self._lock:
            self._budgets.pop((namespace, name), None)

    def fail(self, failing: bool = True) -> None:
        """Make :meth:`list_budgets` raise :class:`UnavailableError` (``failing``) or work again."""
        with self._lock:
            self._failing = failing

    def list_budgets(self) -> list[DisruptionBudget]:
        """Every budget in (namespace, name) order."""
        with self._lock:
            if self._failing:
                raise UnavailableError("in-memory PodDisruptionBudgets made unavailable by the test")
            return [self._budgets[key] for key in sorted(self._budgets)]
