"""The per-node toggle state machine: states, actions, the transition table and the enable label's meaning.

States (the value is what the node's ``runtime-state`` annotation shows):

* ``disabled`` / ``enabled`` — steady: the last Job for the node succeeded and the label still asks for that;
* ``enabling`` / ``disabling`` — a Job is running for the node, or a retry is waiting for its backoff;
* ``failed`` — the configured number of tries all failed; the node stays here until the label asks for
  something else (never left half-toggled without saying so).

Legal transitions (:data:`TRANSITIONS`; anything else raises :class:`IllegalTransitionError`)::

    disabled  → enabling
    enabling  → enabled | failed | disabling      (disabling: the label flipped while the enable Job ran)
    enabled   → disabling
    disabling → disabled | failed | enabling
    failed    → enabling | disabling              (the label changed, or a new episode for the same target)

A retry after a failed Job stays in ``enabling``/``disabling``: it is not a transition, only a new try.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from domain.errors import DomainError


class ToggleState(enum.Enum):
    """A node's toggle state (module docstring). Members refuse truthiness: compare with ``is``."""

    DISABLED = "disabled"
    ENABLING = "enabling"
    ENABLED = "enabled"
    DISABLING = "disabling"
    FAILED = "failed"

    def __bool__(self) -> bool:
        raise TypeError(f"ToggleState.{self.name} has no truth value; compare with `is`")

    @property
    def steady(self) -> bool:
        """``enabled`` or ``disabled``: no Job runs or waits for this node."""
        return self in (ToggleState.ENABLED, ToggleState.DISABLED)


class Action(enum.Enum):
    """What a Job does on its node (the job agent's ``--action``). Members refuse truthiness."""

    ENABLE = "enable"
    DISABLE = "disable"

    def __bool__(self) -> bool:
        raise TypeError(f"Action.{self.name} has no truth value; compare with `is`")

    @property
    def working(self) -> ToggleState:
        """The state while a Job of this action runs or waits to be retried."""
        return ToggleState.ENABLING if self is Action.ENABLE else ToggleState.DISABLING

    @property
    def done(self) -> ToggleState:
        """The state once a Job of this action succeeded."""
        return ToggleState.ENABLED if self is Action.ENABLE else ToggleState.DISABLED


TRANSITIONS: Mapping[ToggleState, frozenset[ToggleState]] = {
    ToggleState.DISABLED: frozenset({ToggleState.ENABLING}),
    ToggleState.ENABLING: frozenset({ToggleState.ENABLED, ToggleState.FAILED, ToggleState.DISABLING}),
    ToggleState.ENABLED: frozenset({ToggleState.DISABLING}),
    ToggleState.DISABLING: frozenset({ToggleState.DISABLED, ToggleState.FAILED, ToggleState.ENABLING}),
    ToggleState.FAILED: frozenset({ToggleState.ENABLING, ToggleState.DISABLING}),
}
"""State → the states it may move to (module docstring)."""


class IllegalTransitionError(DomainError):
    """A move the state machine does not allow; ``current`` and ``new`` are the states, ``node`` the node."""

    def __init__(self, current: ToggleState, new: ToggleState, *, node: str = "") -> None:
        self.current = current
        self.new = new
        self.node = node
        legal = ", ".join(sorted(s.value for s in TRANSITIONS[current]))
        where = f"node {node}: " if node else ""
        super().__init__(f"{where}illegal toggle transition {current.value} → {new.value} (from {current.value} "
                         f"only: {legal})")


def check_transition(current: ToggleState, new: ToggleState, *, node: str = "") -> ToggleState:
    """``new`` when ``current → new`` is in :data:`TRANSITIONS`. Raises :class:`IllegalTransitionError` (naming
    both states and ``node``) otherwise."""
    if new not in TRANSITIONS[current]:
        raise IllegalTransitionError(current, new, node=node)
    return new


def desired_from_label(value: str | None) -> Action:
    """What the enable label asks for: ``true`` → :attr:`Action.ENABLE`; ``false``, any other value, or no label
    at all → :attr:`Action.DISABLE` (removing the label disables, as setting it to ``false`` does — B28).
    Leading and trailing blanks and letter case are ignored."""
    return Action.ENABLE if value is not None and value.strip().lower() == "true" else Action.DISABLE
