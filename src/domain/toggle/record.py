"""What the controller knows about one node's toggle (:class:`NodeToggle`) and how it is written on the Node.

Two annotations (keys from the protocol constants): ``node_state`` holds the bare state (``enabling``…) for
people and the scheduler; ``node_toggle`` holds the rest as compact JSON — ``target`` (``enable``/``disable``),
``tries`` (Jobs created for that target in this episode), ``generation`` (Jobs created for the node so far; part
of Job names), ``job`` (the Job in flight), ``retryAt`` (epoch s), ``error`` (last failure, ≤ 300 characters),
``since`` (epoch s the state was entered). A controller that restarts reads them back with :func:`decode` and
resumes where the last one stopped. A missing or unreadable detail decodes to defaults; an unknown state
decodes as if there were no annotation (the node is then treated as never managed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import attrs

from .states import Action, ToggleState, check_transition

MAX_ERROR = 300
"""Characters of a failure message kept in the annotation (Job messages can be long)."""


@attrs.frozen
class NodeToggle:
    """One node's toggle: ``node`` name and ``node_uid``; ``state``; ``target`` of the current episode (None
    before the first Job); ``tries`` in this episode; ``generation`` (Jobs created for the node, the last one's
    number); ``job`` (name of the Job in flight, empty when none); ``retry_at`` (epoch s before which no new Job
    starts); ``error`` (last failure); ``since`` (epoch s the state was entered); ``episode`` (the controller's
    count of enable-label changes when the episode began: a ``failed`` node starts over after a label change)."""

    node: str
    node_uid: str = ""
    state: ToggleState = ToggleState.DISABLED
    target: Action | None = None
    tries: int = 0
    generation: int = 0
    job: str = ""
    retry_at: float | None = None
    error: str = ""
    since: float = 0.0
    episode: int = 0

    def moved(self, state: ToggleState, *, now: float) -> NodeToggle:
        """This record in ``state`` since ``now`` (unchanged when already there). Raises
        :class:`~.states.IllegalTransitionError` for a move :data:`~.states.TRANSITIONS` does not allow."""
        if state is self.state:
            return self
        check_transition(self.state, state, node=self.node)
        return attrs.evolve(self, state=state, since=now)

    def annotations(self, *, state_key: str, detail_key: str) -> dict[str, str]:
        """The two annotations that publish this record (module docstring)."""
        return {state_key: self.state.value, detail_key: encode_detail(self)}


def encode_detail(record: NodeToggle) -> str:
    """The ``node_toggle`` annotation value of ``record`` (compact JSON, sorted keys)."""
    detail: dict[str, object] = {
        "target": record.target.value if record.target is not None else None,
        "tries": record.tries,
        "generation": record.generation,
        "job": record.job or None,
        "retryAt": record.retry_at,
        "error": record.error[:MAX_ERROR] or None,
        "since": record.since,
    }
    return json.dumps({k: v for k, v in detail.items() if v is not None}, sort_keys=True, separators=(",", ":"))


def _number(value: object, default: float) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def decode(
    node: str, annotations: Mapping[str, str], *, state_key: str, detail_key: str, node_uid: str = ""
) -> NodeToggle | None:
    """The record published on a node (module docstring), or None when it carries no (known) state. Never
    raises: a malformed detail reads as defaults."""
    try:
        state = ToggleState(annotations.get(state_key, "").strip())
    except ValueError:
        return None
    try:
        raw = json.loads(annotations.get(detail_key) or "{}")
    except ValueError:
        raw = {}
    detail: dict[str, object] = raw if isinstance(raw, dict) else {}
    try:
        target: Action | None = Action(detail.get("target"))
    except ValueError:
        target = None
    if target is None and not state.steady and state is not ToggleState.FAILED:
        target = Action.ENABLE if state is ToggleState.ENABLING else Action.DISABLE
    retry_at = detail.get("retryAt")
    return NodeToggle(
        node=node,
        node_uid=node_uid,
        state=state,
        target=target,
        tries=max(0, int(_number(detail.get("tries"), 0))),
        generation=max(0, int(_number(detail.get("generation"), 0))),
        job=str(detail.get("job") or ""),
        retry_at=_number(retry_at, 0.0) if retry_at is not None else None,
        error=str(detail.get("error") or "")[:MAX_ERROR],
        since=_number(detail.get("since"), 0.0),
    )
