"""Where the scheduler's books (its :class:`~domain.inspection.view.SchedulerView`) differ from the books of the API
objects as ``ljrk inspect`` reads them.

Compared per node: presence; per GPU (by index) the UUID, core used (milli-GPU) and memory used (bytes); the pods
counted there (time-sharing ledger and MIG books, by UID, named ``namespace/name`` where the listing knows them);
whether the node takes GPU pods (its gate) and whether it is quarantined. The scheduler also counts its own
reservations of pods not bound yet, and the two readings are a few milliseconds apart: in a moving cluster a
disagreement may be transient, so a caller reruns before calling it drift.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from domain.inspection.view import NodeBooks, SchedulerView


@attrs.frozen
class Disagreement:
    """One difference on ``node`` (``gpu`` index, or None for the node as a whole): ``field`` and the value the API
    objects give (``api``) and the scheduler's (``scheduler``), both as text."""

    node: str
    field: str
    api: str
    scheduler: str
    gpu: int | None = None

    def describe(self) -> str:
        """One line: ``node n1 GPU 0 coreUsedMilli: API 600, scheduler 300``."""
        where = f"node {self.node}" + ("" if self.gpu is None else f" GPU {self.gpu}")
        return f"{where} {self.field}: API {self.api}, scheduler {self.scheduler}"


def _pods(node: str, field: str, ours: tuple[str, ...], theirs: tuple[str, ...],
          label: Callable[[str], str]) -> list[Disagreement]:
    only_api, only_scheduler = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
    if not only_api and not only_scheduler:
        return []
    return [Disagreement(node, field, ", ".join(label(u) for u in only_api) or "-",
                         ", ".join(label(u) for u in only_scheduler) or "-")]


def compare_node(ours: NodeBooks, theirs: NodeBooks, *, label: Callable[[str], str] = str) -> list[Disagreement]:
    """The differences between two readings of one node (module docstring); pod lists give the pods only that side
    counts (``-``: none); ``label`` names a pod UID."""
    name = ours.name
    out: list[Disagreement] = []
    api_gpus, their_gpus = {g.index: g for g in ours.gpus}, {g.index: g for g in theirs.gpus}
    for index in sorted(set(api_gpus) | set(their_gpus)):
        a, s = api_gpus.get(index), their_gpus.get(index)
        if a is None or s is None:
            out.append(Disagreement(name, "gpu", "absent" if a is None else a.uuid,
                                    "absent" if s is None else s.uuid, index))
            continue
        for field, x, y in (("uuid", a.uuid, s.uuid), ("coreUsedMilli", a.core_used_milli, s.core_used_milli),
                            ("memoryUsedBytes", a.memory_used_bytes, s.memory_used_bytes)):
            if x != y:
                out.append(Disagreement(name, field, str(x), str(y), index))
    out += _pods(name, "pods", ours.pods, theirs.pods, label)
    out += _pods(name, "migPods", ours.mig_pods, theirs.mig_pods, label)
    for field, x, y in (("gate", ours.gate, theirs.gate), ("quarantine", ours.quarantine, theirs.quarantine)):
        if bool(x) != bool(y):
            out.append(Disagreement(name, field, x or "none", y or "none"))
    return out


def compare_view(ours: Mapping[str, NodeBooks], view: SchedulerView, *,
                 label: Callable[[str], str] = str) -> list[Disagreement]:
    """Every difference between the API objects' books ``ours`` (node name → books) and ``view``, by node name."""
    out: list[Disagreement] = []
    for name in sorted(set(ours) | set(view.nodes)):
        a, s = ours.get(name), view.nodes.get(name)
        if a is None or s is None:
            out.append(Disagreement(name, "node", "absent" if a is None else "present",
                                    "absent" if s is None else "present"))
        else:
            out += compare_node(a, s, label=label)
    return out
