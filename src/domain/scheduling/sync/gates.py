"""Which nodes take no GPU pods, and why (:class:`NodeGates`).

A node is gated while its inventory is missing, malformed, stale, dated in the future or from another protocol
(:func:`~domain.kube.translate.inventory_reason`), or while a bound pod's GPU request cannot be booked (its usage
is unknown). Invariant: :attr:`NodeGates.gates` is one dict for the instance's life (the node filters hold it), and
staleness is re-evaluated from each node's last reading without decoding annotations again.
"""

from __future__ import annotations

from domain.kube.protocol import ProtocolConstants
from domain.kube.translate import inventory_reason


class NodeGates:
    """Node → why it takes no GPU pods (module docstring). ``gates`` is read by
    :class:`~domain.scheduling.nodefit.NodeGate`; times are epoch seconds given by the caller."""

    def __init__(self, protocol: ProtocolConstants) -> None:
        self.protocol = protocol
        self.gates: dict[str, str] = {}
        self._unknown: dict[str, dict[str, str]] = {}  # node → {pod UID: why its GPU usage is unknown}
        self._readings: dict[str, tuple[float | None, str]] = {}  # node → (heartbeat, steady reason)

    def read(self, name: str, heartbeat: float | None, steady: str, *, now: float) -> None:
        """Record node ``name``'s inventory reading (heartbeat epoch s or None; ``steady``: the part of its reason
        that does not depend on time) and set its gate at ``now``."""
        self._readings[name] = (heartbeat, steady)
        self._set(name, inventory_reason(heartbeat, steady, self.protocol, now=now))

    def tick(self, *, now: float) -> None:
        """Re-evaluate every node's gate at ``now`` from its last reading."""
        for name, (heartbeat, steady) in self._readings.items():
            self._set(name, inventory_reason(heartbeat, steady, self.protocol, now=now))

    def mark_gpu_unknown(self, node: str, uid: str, problem: str | None, *, now: float) -> None:
        """Record (``problem``) or clear (None) a pod of ``node`` whose GPU usage is unknown; regate on a change."""
        pods = self._unknown.get(node, {})
        if pods.get(uid) == problem:
            return
        if problem is None:
            pods.pop(uid)
        else:
            pods[uid] = problem
        if pods:
            self._unknown[node] = pods
        else:
            self._unknown.pop(node, None)
        reading = self._readings.get(node)
        if reading is not None:
            self._set(node, inventory_reason(reading[0], reading[1], self.protocol, now=now))

    def is_unknown(self, node: str, uid: str) -> bool:
        """Whether pod ``uid`` is recorded on ``node`` as a pod of unknown GPU usage."""
        return uid in self._unknown.get(node, {})

    def forget(self, name: str) -> None:
        """Node deleted: drop its reading, gate and unknown pods."""
        self._readings.pop(name, None)
        self.gates.pop(name, None)
        self._unknown.pop(name, None)

    def adopt(self, fresh: NodeGates) -> None:
        """Take over ``fresh``'s readings; :attr:`gates` is refilled in place."""
        self.gates.clear()
        self.gates.update(fresh.gates)
        self._unknown, self._readings = fresh._unknown, fresh._readings

    def _set(self, name: str, reason: str) -> None:
        unknown = self._unknown.get(name, {})
        if unknown:
            problems = "; ".join(problem for _, problem in sorted(unknown.items()))
            reason = "; ".join(part for part in (reason, f"its GPU usage is unknown: a bound pod's GPU request "
                                                 f"cannot be booked ({problems})") if part)
        if reason:
            self.gates[name] = reason
        else:
            self.gates.pop(name, None)
