"""The ledger's storage: :class:`LedgerSlots`, per node slot and GPU column, and :class:`GpuUsage`, one GPU's view.

Storage is columnar (numpy arrays indexed ``[node_slot, gpu_index]``) so that filters and scores run vectorised
over thousands of nodes. This layer owns node slots (add, update, remove, name ↔ slot), interned GPU models and
workload tags, array growth, and read-only views of the books; the bookings themselves (which keep the arrays and
the per-pod records in step) are :class:`domain.ledger.ClusterLedger`'s. Invariants: a node update never resets
usage (failure case B14); a removed node's row is zeroed and its slot reused; arrays only grow.

Derived arrays (free core and memory per GPU, per-node sums and counts over schedulable GPUs: :meth:`LedgerSlots.
refresh_derived`) are owned here and kept exact at every row change (wherever ``version[slot]`` is bumped), so
readers never recompute them; capacity-only data (model masks, largest GPU memory, resolved share needs) is
memoised per :attr:`LedgerSlots.capacity_generation`, bumped whenever a GPU's capacity, model or health changes;
data derived from usage too (a share's per-GPU fit) is kept in :meth:`LedgerSlots.stamped_memo` and recomputed by its
owner for the rows whose ``derived_stamp`` moved.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs
import numpy as np
import numpy.typing as npt

from domain.allocation import PodAllocation
from domain.errors import UnknownNodeError
from domain.gpu import NodeInventory
from domain.units import MILLI_PER_GPU

I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]

Usage = dict[int, tuple[int, int]]
"""Effective per-GPU usage of one record, ``{gpu_index: (core milli-GPU, memory bytes)}``
(:meth:`PodAllocation.per_gpu_usage`)."""

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


class LedgerSlots:
    """Columnar per-node, per-GPU storage (module docstring); :class:`domain.ledger.ClusterLedger` books on it.

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
        self._usage: dict[str, Usage] = {}  # per record: its per_gpu_usage(), derived once when booked
        self._free_slots: list[int] = []
        self._by_node: dict[int, set[str]] = {}
        self.quarantine: dict[str, str] = {}
        self.node_set_generation = 0
        """Node-set generation: incremented whenever a node is added or removed (slot ↔ name mapping changed)."""
        self.capacity_generation = 0
        """Incremented whenever GPU capacity, model or health may have changed (an upsert that changed a node's
        inventory, a removal, growth)."""
        self._capacity_memo: dict[object, object] = {}
        self._stamped_memo: dict[object, object] = {}
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
        self.derived_stamp = np.zeros(rows, np.int64)
        self.tag_counts = np.zeros((rows, tags), np.int64)
        # Derived (refresh_derived); all zero for an all-zero row, so fresh and grown rows and columns are exact.
        self.free_core = np.zeros((rows, cols), np.int64)
        self.free_mem = np.zeros((rows, cols), np.int64)
        self.sched_free = np.zeros((rows, cols), np.int64)
        self.free_whole = np.zeros((rows, cols), np.bool_)
        self.sched_cap = np.zeros(rows, np.int64)
        self.sched_free_sum = np.zeros(rows, np.int64)
        self.sched_gpus = np.zeros(rows, np.int64)
        self.free_gpus = np.zeros(rows, np.int64)
        self.cpu_free = np.zeros(rows, np.int64)
        self.hostmem_free = np.zeros(rows, np.int64)
        self.pods_free = np.zeros(rows, np.int64)
        self._capacity_changed()

    def _grow(self, *, rows: int | None = None, cols: int | None = None, tags: int | None = None) -> None:
        old = {k: v for k, v in vars(self).items() if isinstance(v, np.ndarray)}
        r0, c0 = self.core_cap.shape
        t0 = self.tag_counts.shape[1]
        r, c, t = max(rows or r0, r0), max(cols or c0, c0), max(tags or t0, t0)
        self._alloc_arrays(rows=r, cols=c, tags=t)
        for key, value in old.items():
            new = getattr(self, key)
            new[tuple(slice(0, s) for s in value.shape)] = value

    def refresh_derived(self, slot: int) -> None:
        """Recompute the derived arrays of row ``slot`` from its raw books (called at every row change; code that
        writes the raw arrays directly, such as a test simulating corruption, calls it to keep them exact):

        * per GPU: ``free_core = max(core_cap − core_used, 0)`` (milli-GPU), ``free_mem = max(mem_cap − mem_used, 0)``
          (bytes), ``sched_free`` = ``free_core`` on schedulable GPUs else 0, ``free_whole`` = a schedulable GPU with
          capacity and nothing used, core or memory (bool);
        * per node: ``sched_cap`` = Σ ``core_cap`` and ``sched_free_sum`` = Σ ``sched_free`` over schedulable GPUs
          (milli-GPU), ``sched_gpus`` = number of schedulable GPUs, ``free_gpus`` = number of ``free_whole`` GPUs,
          ``cpu_free``, ``hostmem_free`` and ``pods_free`` = capacity − used (milli-cores, bytes, pods; not clamped);
        * ``derived_stamp[slot]`` is incremented, so a reader caching something derived from these rows recomputes
          exactly the rows whose stamp moved.
        """
        cap, used, mem_used, ok = self.core_cap[slot], self.core_used[slot], self.mem_used[slot], self.gpu_ok[slot]
        free = np.maximum(cap - used, 0)
        sched = free * ok
        whole = (used == 0) & (mem_used == 0) & (cap > 0) & ok
        self.free_core[slot] = free
        self.free_mem[slot] = np.maximum(self.mem_cap[slot] - mem_used, 0)
        self.sched_free[slot] = sched
        self.free_whole[slot] = whole
        self.sched_cap[slot] = (cap * ok).sum()
        self.sched_free_sum[slot] = sched.sum()
        self.sched_gpus[slot] = np.count_nonzero(ok)
        self.free_gpus[slot] = np.count_nonzero(whole)
        self.cpu_free[slot] = self.cpu_cap[slot] - self.cpu_used[slot]
        self.hostmem_free[slot] = self.hostmem_cap[slot] - self.hostmem_used[slot]
        self.pods_free[slot] = self.pods_cap[slot] - self.pods_used[slot]
        self.derived_stamp[slot] += 1

    def capacity_memo(self) -> dict[object, object]:
        """A dict for values derived from capacity, models and health only (emptied whenever
        :attr:`capacity_generation` changes); callers key it by what they derive and must not mutate its values."""
        return self._capacity_memo

    def stamped_memo(self) -> dict[object, object]:
        """A dict for values derived from the derived arrays as well as capacity (emptied with :meth:`capacity_memo`):
        each entry's owner keeps it exact row by row, recomputing the rows whose :attr:`derived_stamp` moved since it
        last looked, and may update its own entry in place."""
        return self._stamped_memo

    def _capacity_changed(self) -> None:
        self.capacity_generation += 1
        self._capacity_memo = {}
        self._stamped_memo = {}

    def model_mask(self, models: tuple[str, ...]) -> B:
        """Bool ``[rows, max_gpus]`` (read-only): the GPU's model is one of ``models`` (memoised per capacity
        generation)."""
        key = ("model_mask", models)
        mask = self._capacity_memo.get(key)
        if not isinstance(mask, np.ndarray):
            mask = np.isin(self.gpu_model, self.model_ids(models))
            mask.flags.writeable = False
            self._capacity_memo[key] = mask
        return mask

    def largest_memory(self) -> int:
        """Largest GPU memory capacity (bytes) over active nodes, 0 when none (memoised per capacity generation)."""
        largest = self._capacity_memo.get("largest_memory")
        if not isinstance(largest, int):
            largest = int(self.mem_cap[self.active].max(initial=0))
            self._capacity_memo["largest_memory"] = largest
        return largest

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
        """Add a node or update its inventory (capacity, health, MIG mode); usage is always kept. The same
        inventory again changes nothing (:attr:`version` and :attr:`capacity_generation` stay).

        Returns the node's slot. A GPU whose grants now exceed its capacity makes the node over-committed,
        never negative.
        """
        slot = self._slot.get(node.name)
        if slot is not None and self._inventory.get(slot) == node:
            return slot  # the same inventory again (a heartbeat): no version or capacity generation moves
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
            self.node_set_generation += 1
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
        count = node.gpu_count  # GPU indexes are 0..count-1 in order (NodeInventory checks it): one write per array
        if count:
            self.core_cap[slot, :count] = MILLI_PER_GPU
            self.mem_cap[slot, :count] = [gpu.memory_bytes for gpu in node.gpus]
            self.gpu_ok[slot, :count] = [gpu.schedulable for gpu in node.gpus]
            self.gpu_model[slot, :count] = [self.model_id(gpu.model) for gpu in node.gpus]
        self.gpu_count[slot] = node.gpu_count
        self.cpu_cap[slot] = node.cpu_milli
        self.hostmem_cap[slot] = node.memory_bytes
        self.pods_cap[slot] = node.max_pods
        self.version[slot] += 1
        self.refresh_derived(slot)
        self._capacity_changed()
        return slot

    def remove_node(self, name: str) -> list[str]:
        """Forget a node and the records of the pods on it; returns the released pod UIDs (sorted)."""
        slot = self.slot(name)
        released = sorted(self._by_node.pop(slot, set()))
        for uid in released:
            del self._records[uid]
            del self._usage[uid]
        del self._slot[name]
        self.node_set_generation += 1
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
        self.refresh_derived(slot)
        self._capacity_changed()
        return released

    def slot(self, name: str) -> int:
        """Array row of a node. Raises :class:`UnknownNodeError`."""
        try:
            return self._slot[name]
        except KeyError:
            raise UnknownNodeError(name) from None

    def select(self, names: Iterable[str]) -> tuple[list[str], B]:
        """The ``names`` this ledger knows, in the given order, and a bool mask over the slots (length :attr:`rows`)
        that is True exactly at their rows: one dict lookup per name. Unknown names are left out; never raises."""
        known: list[str] = []
        rows: list[int] = []
        lookup = self._slot.get
        for name in names:
            slot = lookup(name)
            if slot is not None:
                known.append(name)
                rows.append(slot)
        mask = np.zeros(self.rows, np.bool_)
        mask[rows] = True
        return known, mask

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
        """Free core per ``[slot, gpu]``, milli-GPU, clamped at 0 (a fresh copy of :attr:`free_core`)."""
        return self.free_core.copy()

    def mem_free(self) -> I64:
        """Free GPU memory per ``[slot, gpu]``, bytes, clamped at 0 (a fresh copy of :attr:`free_mem`)."""
        return self.free_mem.copy()

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

    def pod_count(self, name: str) -> int:
        """Number of pods counted on a node. Raises :class:`UnknownNodeError`."""
        return len(self._by_node[self.slot(name)])

    def __contains__(self, pod_uid: object) -> bool:
        return pod_uid in self._records

    def __len__(self) -> int:
        return len(self._records)
