"""The cluster ledger: per node, gpuCount × {core, memory} used and free, plus node CPU, memory and pod slots.

Storage is columnar (numpy arrays indexed ``[node_slot, gpu_index]``) so that filters and scores run
vectorised over thousands of nodes; every change goes through the methods below, which keep the arrays and the
per-pod records (:class:`PodAllocation`, keyed by pod UID) in step.

Invariants:

* ``reserve`` is all-or-nothing: it checks every grant against free capacity and changes nothing on failure.
* ``observe`` (informer add/update) and ``release`` are idempotent: counting a pod twice never changes totals
  (failure case B04); releasing an unknown pod is a no-op.
* A whole-GPU grant takes 100 % core and all memory of one GPU; a GPU held at 100 % core admits nothing else.
* Free values are ``max(capacity − used, 0)``: never negative. Observed pods are counted even when they exceed
  capacity (reality wins); such a node is *over-committed* and admits nothing on the affected GPUs (the cluster
  sync also quarantines the whole node while a GPU it lists is over-committed: :mod:`domain.scheduling.overbooking`).
* Before admitting a pod onto a node, ``reserve`` re-derives the node's totals from its records; any mismatch
  quarantines the node and raises :class:`LedgerCorruptedError` — a corrupted ledger never admits a pod.
* Node updates (health, labels) never reset usage (failure case B14).
"""

from __future__ import annotations

import attrs
import numpy as np
import numpy.typing as npt

from domain.allocation import PodAllocation
from domain.errors import InsufficientResourcesError, InvalidRequestError, LedgerCorruptedError, UnknownNodeError
from domain.gpu import NodeInventory
from domain.units import MILLI_PER_GPU, format_bytes

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]


@attrs.frozen
class GpuUsage:
    """Read-only view of one GPU's books: capacity, used and free core (milli-GPU) and memory (bytes)."""

    index: int
    uuid: str
    model: str
    core_capacity: int
    core_used: int
    memory_capacity: int
    memory_used: int
    schedulable: bool

    @property
    def core_free(self) -> int:
        """Free core, milli-GPU, never negative."""
        return max(self.core_capacity - self.core_used, 0)

    @property
    def memory_free(self) -> int:
        """Free memory, bytes, never negative."""
        return max(self.memory_capacity - self.memory_used, 0)


class ClusterLedger:
    """Columnar per-node, per-GPU ledger (see module docstring for the invariants).

    ``max_gpus`` is the initial GPU column count; it grows when a node with more GPUs is added.
    """

    def __init__(self, nodes: list[NodeInventory] | tuple[NodeInventory, ...] = (), *, max_gpus: int = 8) -> None:
        self._names: list[str | None] = []
        self._slot: dict[str, int] = {}
        self._inventory: dict[int, NodeInventory] = {}
        self._models: list[str] = []
        self._model_id: dict[str, int] = {}
        self._tags: list[str] = []
        self._tag_id: dict[str, int] = {}
        self._records: dict[str, PodAllocation] = {}
        self._free_slots: list[int] = []
        self._by_node: dict[int, set[str]] = {}
        self.quarantine: dict[str, str] = {}
        self.topology = 0
        """Incremented whenever a node is added or removed (slot ↔ name mapping changed)."""
        g = max([max_gpus, *[n.gpu_count for n in nodes]]) if nodes else max_gpus
        self._alloc_arrays(rows=max(len(nodes), 1), cols=max(g, 1), tags=4)
        for node in nodes:
            self.upsert_node(node)

    # ------------------------------------------------------------------ storage
    def _alloc_arrays(self, *, rows: int, cols: int, tags: int) -> None:
        self.core_cap = np.zeros((rows, cols), np.int64)
        self.core_used = np.zeros((rows, cols), np.int64)
        self.mem_cap = np.zeros((rows, cols), np.int64)
        self.mem_used = np.zeros((rows, cols), np.int64)
        self.gpu_ok = np.zeros((rows, cols), np.bool_)
        self.gpu_model = np.full((rows, cols), -1, np.int64)
        self.gpu_count = np.zeros(rows, np.int64)
        self.cpu_cap = np.zeros(rows, np.int64)
        self.cpu_used = np.zeros(rows, np.int64)
        self.hostmem_cap = np.zeros(rows, np.int64)
        self.hostmem_used = np.zeros(rows, np.int64)
        self.pods_cap = np.zeros(rows, np.int64)
        self.pods_used = np.zeros(rows, np.int64)
        self.active = np.zeros(rows, np.bool_)
        self.admitting = np.zeros(rows, np.bool_)
        self.version = np.zeros(rows, np.int64)
        self.tag_counts = np.zeros((rows, tags), np.int64)

    def _grow(self, *, rows: int | None = None, cols: int | None = None, tags: int | None = None) -> None:
        old = {k: v for k, v in vars(self).items() if isinstance(v, np.ndarray)}
        r0, c0 = self.core_cap.shape
        t0 = self.tag_counts.shape[1]
        r, c, t = max(rows or r0, r0), max(cols or c0, c0), max(tags or t0, t0)
        self._alloc_arrays(rows=r, cols=c, tags=t)
        for key, value in old.items():
            new = getattr(self, key)
            new[tuple(slice(0, s) for s in value.shape)] = value

    @property
    def max_gpus(self) -> int:
        """Number of GPU columns in the arrays (≥ every node's GPU count)."""
        return int(self.core_cap.shape[1])

    @property
    def rows(self) -> int:
        """Number of node slots (active or free) in the arrays."""
        return int(self.core_cap.shape[0])

    def model_id(self, model: str) -> int:
        """Stable small integer for a GPU model string (interned)."""
        if model not in self._model_id:
            self._model_id[model] = len(self._models)
            self._models.append(model)
        return self._model_id[model]

    @property
    def model_count(self) -> int:
        """Number of interned GPU model strings."""
        return len(self._models)

    def model_ids(self, models: tuple[str, ...]) -> npt.NDArray[np.int64]:
        """Model ids of the given model strings (unknown models map to ids no GPU carries yet)."""
        return np.array([self.model_id(m) for m in models], np.int64)

    def tag_id(self, tag: str) -> int:
        """Column of ``tag_counts`` for a workload tag (see :attr:`PodAllocation.gpu_tag`)."""
        if tag not in self._tag_id:
            self._tag_id[tag] = len(self._tags)
            self._tags.append(tag)
            if len(self._tags) > self.tag_counts.shape[1]:
                self._grow(tags=2 * len(self._tags))
        return self._tag_id[tag]

    # ------------------------------------------------------------------ nodes
    def upsert_node(self, node: NodeInventory) -> int:
        """Add a node or update its inventory (capacity, health, MIG mode); usage is always kept.

        Returns the node's slot. A GPU whose grants now exceed its capacity makes the node over-committed,
        never negative.
        """
        slot = self._slot.get(node.name)
        if slot is None:
            if self._free_slots:
                slot = self._free_slots.pop()
                self._names[slot] = node.name
            else:
                slot = len(self._names)
                self._names.append(node.name)
            if slot >= self.rows:
                self._grow(rows=2 * self.rows)
            self._slot[node.name] = slot
            self.topology += 1
            self._by_node[slot] = set()
            self.active[slot] = True
            self.admitting[slot] = True
        if node.gpu_count > self.max_gpus:
            self._grow(cols=node.gpu_count)
        self._inventory[slot] = node
        self.core_cap[slot] = 0
        self.mem_cap[slot] = 0
        self.gpu_ok[slot] = False
        self.gpu_model[slot] = -1
        for gpu in node.gpus:
            self.core_cap[slot, gpu.index] = MILLI_PER_GPU
            self.mem_cap[slot, gpu.index] = gpu.memory_bytes
            self.gpu_ok[slot, gpu.index] = gpu.schedulable
            self.gpu_model[slot, gpu.index] = self.model_id(gpu.model)
        self.gpu_count[slot] = node.gpu_count
        self.cpu_cap[slot] = node.cpu_milli
        self.hostmem_cap[slot] = node.memory_bytes
        self.pods_cap[slot] = node.max_pods
        self.version[slot] += 1
        return slot

    def remove_node(self, name: str) -> list[str]:
        """Forget a node and the records of the pods on it; returns the released pod UIDs (sorted)."""
        slot = self.slot(name)
        released = sorted(self._by_node.pop(slot, set()))
        for uid in released:
            del self._records[uid]
        del self._slot[name]
        self.topology += 1
        del self._inventory[slot]
        self._names[slot] = None
        self._free_slots.append(slot)
        self.quarantine.pop(name, None)
        for array in (self.core_cap, self.core_used, self.mem_cap, self.mem_used, self.tag_counts):
            array[slot] = 0
        for vector in (self.gpu_count, self.cpu_cap, self.cpu_used, self.hostmem_cap, self.hostmem_used,
                       self.pods_cap, self.pods_used):
            vector[slot] = 0
        self.gpu_ok[slot] = False
        self.gpu_model[slot] = -1
        self.active[slot] = False
        self.admitting[slot] = False
        self.version[slot] += 1
        return released

    def slot(self, name: str) -> int:
        """Array row of a node. Raises :class:`UnknownNodeError`."""
        try:
            return self._slot[name]
        except KeyError:
            raise UnknownNodeError(name) from None

    def name(self, slot: int) -> str:
        """Node name of an active slot. Raises :class:`UnknownNodeError` for a free slot."""
        name = self._names[slot] if 0 <= slot < len(self._names) else None
        if name is None:
            raise UnknownNodeError(f"slot {slot}")
        return name

    def node_names(self) -> list[str]:
        """Names of all nodes, in slot order."""
        return [n for n in self._names if n is not None]

    def inventory(self, name: str) -> NodeInventory:
        """The inventory last given for ``name``."""
        return self._inventory[self.slot(name)]

    def model_name(self, model_id: int) -> str:
        """Model string of an interned model id."""
        return self._models[model_id]

    # ------------------------------------------------------------------ views
    def core_free(self) -> I64:
        """Free core per ``[slot, gpu]``, milli-GPU, clamped at 0 (a fresh array)."""
        free: I64 = np.maximum(self.core_cap - self.core_used, 0)
        return free

    def mem_free(self) -> I64:
        """Free GPU memory per ``[slot, gpu]``, bytes, clamped at 0 (a fresh array)."""
        free: I64 = np.maximum(self.mem_cap - self.mem_used, 0)
        return free

    def gpus(self, name: str) -> list[GpuUsage]:
        """Per-GPU books of one node."""
        slot = self.slot(name)
        inv = self._inventory[slot]
        return [
            GpuUsage(
                index=g.index,
                uuid=g.uuid,
                model=g.model,
                core_capacity=int(self.core_cap[slot, g.index]),
                core_used=int(self.core_used[slot, g.index]),
                memory_capacity=int(self.mem_cap[slot, g.index]),
                memory_used=int(self.mem_used[slot, g.index]),
                schedulable=bool(self.gpu_ok[slot, g.index]),
            )
            for g in inv.gpus
        ]

    def records(self) -> dict[str, PodAllocation]:
        """All allocation records by pod UID (a shallow copy)."""
        return dict(self._records)

    def record(self, pod_uid: str) -> PodAllocation | None:
        """The record of one pod, or None."""
        return self._records.get(pod_uid)

    def pods_on(self, name: str) -> list[str]:
        """UIDs of the pods counted on a node (sorted)."""
        return sorted(self._by_node[self.slot(name)])

    def __contains__(self, pod_uid: object) -> bool:
        return pod_uid in self._records

    def __len__(self) -> int:
        return len(self._records)

    # ------------------------------------------------------------------ changes
    def reserve(self, allocation: PodAllocation) -> None:
        """Book ``allocation`` if and only if all of it fits; idempotent for an identical record.

        Raises :class:`InsufficientResourcesError` (nothing changed) when any grant does not fit,
        :class:`InvalidRequestError` when the pod is already booked differently or a grant names a GPU the
        node lacks, :class:`UnknownNodeError`, and :class:`LedgerCorruptedError` when the node's books are
        inconsistent (the node is quarantined).
        """
        existing = self._records.get(allocation.pod_uid)
        if existing is not None:
            if existing == allocation:
                return
            raise InvalidRequestError(
                f"pod[{allocation.pod_uid}]", existing.node, "already booked with a different plan; release first"
            )
        slot = self.slot(allocation.node)
        self.verify_node(allocation.node)
        if allocation.node in self.quarantine:
            raise LedgerCorruptedError(f"node={allocation.node!r}: quarantined: {self.quarantine[allocation.node]}")
        problem = self._fit_problem(slot, allocation)
        if problem is not None:
            raise InsufficientResourcesError(f"pod[{allocation.pod_uid}] on node={allocation.node!r}: {problem}")
        self._apply(slot, allocation, sign=1)

    def observe(self, allocation: PodAllocation) -> bool:
        """Count a pod seen in the cluster (informer add/update, rebuild): idempotent, never refused for fit.

        A changed record (new node or grants) replaces the old one. Returns True when the books changed. A grant
        on a GPU index the node no longer has (the GPU vanished) is still counted, against zero capacity, so the
        node shows as over-committed and a rebuild from the same objects gives the same books.
        Raises :class:`UnknownNodeError`.
        """
        existing = self._records.get(allocation.pod_uid)
        if existing == allocation:
            return False
        slot = self.slot(allocation.node)
        highest = max(allocation.per_gpu_usage(), default=-1)
        if highest >= self.max_gpus:
            self._grow(cols=highest + 1)
        if existing is not None:
            self.release(existing.pod_uid)
        self._apply(slot, allocation, sign=1)
        return True

    def release(self, pod_uid: str) -> PodAllocation | None:
        """Remove a pod's record and give its resources back; idempotent. Returns the removed record."""
        record = self._records.get(pod_uid)
        if record is None:
            return None
        self._apply(self._slot[record.node], record, sign=-1)
        return record

    def _check_indexes(self, slot: int, allocation: PodAllocation) -> None:
        count = int(self.gpu_count[slot])
        for index in allocation.per_gpu_usage():
            if index >= count:
                raise InvalidRequestError(
                    f"pod[{allocation.pod_uid}].grant.gpu_index", index, f"node {allocation.node} has {count} GPUs"
                )

    def _fit_problem(self, slot: int, allocation: PodAllocation) -> str | None:
        self._check_indexes(slot, allocation)
        if not self.admitting[slot]:
            return "node is not admitting pods"
        if self.cpu_used[slot] + allocation.cpu_milli > self.cpu_cap[slot]:
            return f"cpu_milli={allocation.cpu_milli} exceeds free {int(self.cpu_cap[slot] - self.cpu_used[slot])}"
        if self.hostmem_used[slot] + allocation.memory_bytes > self.hostmem_cap[slot]:
            free = int(self.hostmem_cap[slot] - self.hostmem_used[slot])
            return f"memory_bytes={format_bytes(allocation.memory_bytes)} exceeds free {format_bytes(free)}"
        if self.pods_used[slot] + 1 > self.pods_cap[slot]:
            return "no free pod slot"
        whole = allocation.whole_gpu_indexes
        for index, (core, mem) in allocation.per_gpu_usage().items():
            if not self.gpu_ok[slot, index]:
                return f"gpu {index} is not schedulable (unhealthy or MIG)"
            used_core, used_mem = int(self.core_used[slot, index]), int(self.mem_used[slot, index])
            cap_core, cap_mem = int(self.core_cap[slot, index]), int(self.mem_cap[slot, index])
            if index in whole and (used_core or used_mem or core != cap_core or mem != cap_mem):
                return f"gpu {index}: a whole-GPU grant needs the GPU completely free and takes all of it"
            if used_core + core > cap_core:
                return f"gpu {index}: core_milli={core} exceeds free {max(cap_core - used_core, 0)}"
            if used_mem + mem > cap_mem:
                left = format_bytes(max(cap_mem - used_mem, 0))
                return f"gpu {index}: memory_bytes={format_bytes(mem)} exceeds free {left}"
        return None

    def _apply(self, slot: int, allocation: PodAllocation, *, sign: int) -> None:
        for index, (core, mem) in allocation.per_gpu_usage().items():
            self.core_used[slot, index] += sign * core
            self.mem_used[slot, index] += sign * mem
        self.cpu_used[slot] += sign * allocation.cpu_milli
        self.hostmem_used[slot] += sign * allocation.memory_bytes
        self.pods_used[slot] += sign
        tag = allocation.gpu_tag
        if tag is not None:
            column = self.tag_id(tag)  # may grow tag_counts, so resolve before indexing
            self.tag_counts[slot, column] += sign
        if sign > 0:
            self._records[allocation.pod_uid] = allocation
            self._by_node[slot].add(allocation.pod_uid)
        else:
            del self._records[allocation.pod_uid]
            self._by_node[slot].discard(allocation.pod_uid)
        self.version[slot] += 1

    # ------------------------------------------------------------------ integrity
    def _derived(self, slot: int) -> tuple[I64, I64, int, int, int]:
        core = np.zeros(self.max_gpus, np.int64)
        mem = np.zeros(self.max_gpus, np.int64)
        cpu = hostmem = 0
        uids = self._by_node[slot]
        for uid in uids:
            record = self._records[uid]
            for index, (c, m) in record.per_gpu_usage().items():
                core[index] += c
                mem[index] += m
            cpu += record.cpu_milli
            hostmem += record.memory_bytes
        return core, mem, cpu, hostmem, len(uids)

    def verify_node(self, name: str) -> list[str]:
        """Re-derive a node's totals from its records; returns the problems found (empty if consistent).

        A mismatch or a negative running total quarantines the node (it then admits no pod until
        :meth:`repair`). Over-commit by observed pods is reported but is not corruption.
        """
        slot = self.slot(name)
        core, mem, cpu, hostmem, pods = self._derived(slot)
        problems = []
        if not np.array_equal(core, self.core_used[slot]) or not np.array_equal(mem, self.mem_used[slot]):
            problems.append("per-GPU totals differ from the allocation records")
        if (cpu, hostmem, pods) != (int(self.cpu_used[slot]), int(self.hostmem_used[slot]), int(self.pods_used[slot])):
            problems.append("node totals differ from the allocation records")
        if (self.core_used[slot] < 0).any() or (self.mem_used[slot] < 0).any():
            problems.append("negative usage")
        if problems:
            self.quarantine[name] = "; ".join(problems)
            self.admitting[slot] = False
        return problems

    def quarantine_node(self, name: str, reason: str) -> None:
        """Stop ``name`` admitting pods, with ``reason`` in :attr:`quarantine`, until :meth:`lift_quarantine` or
        :meth:`repair`; the books are untouched. Raises :class:`UnknownNodeError`."""
        self.admitting[self.slot(name)] = False
        self.quarantine[name] = reason

    def lift_quarantine(self, name: str) -> None:
        """Admit pods on ``name`` again (whatever quarantined it); the books are untouched. Raises
        :class:`UnknownNodeError`."""
        self.admitting[self.slot(name)] = True
        self.quarantine.pop(name, None)

    def overcommitted(self, name: str) -> list[int]:
        """GPU indexes whose counted usage exceeds capacity (e.g. after observing foreign pods)."""
        slot = self.slot(name)
        bad = (self.core_used[slot] > self.core_cap[slot]) | (self.mem_used[slot] > self.mem_cap[slot])
        return [int(i) for i in np.flatnonzero(bad)]

    def repair(self, name: str) -> list[str]:
        """Rebuild a node's totals from its records and lift its quarantine; returns what was wrong."""
        slot = self.slot(name)
        problems = self.verify_node(name)
        core, mem, cpu, hostmem, pods = self._derived(slot)
        self.core_used[slot] = core
        self.mem_used[slot] = mem
        self.cpu_used[slot], self.hostmem_used[slot], self.pods_used[slot] = cpu, hostmem, pods
        self.tag_counts[slot] = 0
        for uid in self._by_node[slot]:
            tag = self._records[uid].gpu_tag
            if tag is not None:
                column = self.tag_id(tag)
                self.tag_counts[slot, column] += 1
        self.quarantine.pop(name, None)
        self.admitting[slot] = True
        self.version[slot] += 1
        return problems

    def books(self) -> dict[str, dict[str, object]]:
        """A comparable snapshot of every node's totals (used by rebuild-equals-live checks)."""
        out: dict[str, dict[str, object]] = {}
        for name, slot in sorted(self._slot.items()):
            used = np.flatnonzero(self.core_used[slot] | self.mem_used[slot])
            n = max(int(self.gpu_count[slot]), int(used[-1]) + 1 if len(used) else 0)
            out[name] = {
                "core_used": self.core_used[slot, :n].tolist(),
                "mem_used": self.mem_used[slot, :n].tolist(),
                "cpu_used": int(self.cpu_used[slot]),
                "hostmem_used": int(self.hostmem_used[slot]),
                "pods": sorted(self._by_node[slot]),
            }
        return out

    @classmethod
    def rebuild(
        cls, nodes: list[NodeInventory], allocations: list[PodAllocation], *, max_gpus: int = 8
    ) -> ClusterLedger:
        """Build a ledger from API objects only: node inventories plus the allocations of existing pods."""
        ledger = cls(nodes, max_gpus=max_gpus)
        for allocation in allocations:
            ledger.observe(allocation)
        return ledger
