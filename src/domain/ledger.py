"""The cluster ledger: per node, gpuCount × {core, memory} used and free, plus node CPU, memory and pod slots.

Storage is columnar (:class:`~domain.ledgerslots.LedgerSlots`: numpy arrays indexed ``[node_slot, gpu_index]``)
so that filters and scores run vectorised over thousands of nodes; every booking goes through the methods below,
which keep the arrays and the per-pod records (:class:`PodAllocation`, keyed by pod UID) in step.

Invariants:

* ``reserve`` is all-or-nothing: it checks every grant against free capacity and changes nothing on failure.
* ``observe`` (informer add/update) and ``release`` are idempotent: counting a pod twice never changes totals
  (failure case B04); releasing an unknown pod is a no-op.
* A whole-GPU grant takes 100 % core and all memory of one GPU; a GPU held at 100 % core admits nothing else.
* Free values are ``max(capacity − used, 0)``: never negative. Observed pods are counted even when they exceed
  capacity (reality wins); such a node is *over-committed* and admits nothing on the affected GPUs (the cluster
  sync also quarantines the whole node while a GPU it lists is over-committed:
  :mod:`domain.scheduling.sync.overbooking`).
* Before admitting a pod onto a node, ``reserve`` re-derives the node's totals from its records; any mismatch
  quarantines the node and raises :class:`LedgerCorruptedError` — a corrupted ledger never admits a pod.
* Node updates (health, labels) never reset usage (failure case B14).
* A record's per-GPU usage (:meth:`PodAllocation.per_gpu_usage`) is derived once, when it is booked, and that
  same usage is given back on release and summed by the integrity checks.
"""


from __future__ import annotations

import numpy as np

from domain.allocation import PodAllocation
from domain.errors import InsufficientResourcesError, InvalidRequestError, LedgerCorruptedError
from domain.gpu import NodeInventory
from domain.ledgerslots import GpuUsage, LedgerSlots, Usage
from domain.units import format_bytes

__all__ = ["ClusterLedger", "GpuUsage"]


class ClusterLedger(LedgerSlots):
    """Columnar per-node, per-GPU ledger (see module docstring for the invariants; storage and views:
    :class:`~domain.ledgerslots.LedgerSlots`).

    ``max_gpus`` is the initial GPU column count; it grows when a node with more GPUs is added.
    """

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
        usage = allocation.per_gpu_usage()
        problem = self._fit_problem(slot, allocation, usage)
        if problem is not None:
            raise InsufficientResourcesError(f"pod[{allocation.pod_uid}] on node={allocation.node!r}: {problem}")
        self._apply(slot, allocation, usage, sign=1)

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
        usage = allocation.per_gpu_usage()
        highest = max(usage, default=-1)
        if highest >= self.max_gpus:
            self._grow(cols=highest + 1)
        if existing is not None:
            self.release(existing.pod_uid)
        self._apply(slot, allocation, usage, sign=1)
        return True

    def release(self, pod_uid: str) -> PodAllocation | None:
        """Remove a pod's record and give its resources back; idempotent. Returns the removed record."""
        record = self._records.get(pod_uid)
        if record is None:
            return None
        self._apply(self._slot[record.node], record, self._usage[pod_uid], sign=-1)
        return record

    def copy_node(self, source: ClusterLedger, name: str) -> int:
        """Count every pod ``source`` books on node ``name`` here, where nothing is booked on it and none of those
        pods is booked anywhere: the same books as :meth:`observe` of each record, in one row update (adopting a
        rebuild). ``source`` must hold node ``name`` with the GPUs this ledger has for it. Returns the number of
        records copied. Raises :class:`UnknownNodeError`, and :class:`InvalidRequestError` naming the node when it
        already has records here or one of the pods is booked elsewhere.
        """
        slot, theirs = self.slot(name), source.slot(name)
        uids = source._by_node[theirs]
        if self._by_node[slot] or any(uid in self._records for uid in uids):
            raise InvalidRequestError(f"node[{name}]", sorted(uids), "copy_node needs no record of these pods here")
        if not uids:
            return 0
        columns = source.max_gpus
        if columns > self.max_gpus:
            self._grow(cols=columns)
        self.core_used[slot, :columns] += source.core_used[theirs]
        self.mem_used[slot, :columns] += source.mem_used[theirs]
        self.cpu_used[slot] += source.cpu_used[theirs]
        self.hostmem_used[slot] += source.hostmem_used[theirs]
        self.pods_used[slot] += source.pods_used[theirs]
        for column in np.flatnonzero(source.tag_counts[theirs]):
            mine = self.tag_id(source._tags[column])  # may grow tag_counts, so resolve before indexing
            self.tag_counts[slot, mine] += source.tag_counts[theirs, column]
        for uid in uids:
            self._records[uid] = source._records[uid]
            self._usage[uid] = source._usage[uid]
        self._by_node[slot].update(uids)
        self.version[slot] += 1
        self.refresh_derived(slot)
        return len(uids)

    def _check_indexes(self, slot: int, allocation: PodAllocation, usage: Usage) -> None:
        count = int(self.gpu_count[slot])
        for index in usage:
            if index >= count:
                raise InvalidRequestError(
                    f"pod[{allocation.pod_uid}].grant.gpu_index", index, f"node {allocation.node} has {count} GPUs"
                )

    def _fit_problem(self, slot: int, allocation: PodAllocation, usage: Usage) -> str | None:
        self._check_indexes(slot, allocation, usage)
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
        for index, (core, mem) in usage.items():
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

    def _apply(self, slot: int, allocation: PodAllocation, usage: Usage, *, sign: int) -> None:
        core_used, mem_used = self.core_used, self.mem_used
        for index, (core, mem) in usage.items():
            core_used[slot, index] += sign * core
            mem_used[slot, index] += sign * mem
        self.cpu_used[slot] += sign * allocation.cpu_milli
        self.hostmem_used[slot] += sign * allocation.memory_bytes
        self.pods_used[slot] += sign * allocation.pod_slot
        tag = allocation.gpu_tag
        if tag is not None:
            column = self.tag_id(tag)  # may grow tag_counts, so resolve before indexing
            self.tag_counts[slot, column] += sign
        if sign > 0:
            self._records[allocation.pod_uid] = allocation
            self._usage[allocation.pod_uid] = usage
            self._by_node[slot].add(allocation.pod_uid)
        else:
            del self._records[allocation.pod_uid]
            del self._usage[allocation.pod_uid]
            self._by_node[slot].discard(allocation.pod_uid)
        self.version[slot] += 1
        self.refresh_derived(slot)

    # ------------------------------------------------------------------ integrity
    def _derived(self, slot: int) -> tuple[list[int], list[int], int, int, int]:
        core = [0] * self.max_gpus
        mem = [0] * self.max_gpus
        cpu = hostmem = pods = 0
        uids = self._by_node[slot]
        records, usages = self._records, self._usage
        for uid in uids:
            record = records[uid]
            for index, (c, m) in usages[uid].items():
                core[index] += c
                mem[index] += m
            cpu += record.cpu_milli
            hostmem += record.memory_bytes
            pods += record.pod_slot
        return core, mem, cpu, hostmem, pods

    def verify_node(self, name: str) -> list[str]:
        """Re-derive a node's totals from its records; returns the problems found (empty if consistent).

        A mismatch or a negative running total quarantines the node (it then admits no pod until
        :meth:`repair`). Over-commit by observed pods is reported but is not corruption.
        """
        slot = self.slot(name)
        core, mem, cpu, hostmem, pods = self._derived(slot)
        core_used, mem_used = self.core_used[slot].tolist(), self.mem_used[slot].tolist()
        problems = []
        if core != core_used or mem != mem_used:
            problems.append("per-GPU totals differ from the allocation records")
        if (cpu, hostmem, pods) != (int(self.cpu_used[slot]), int(self.hostmem_used[slot]), int(self.pods_used[slot])):
            problems.append("node totals differ from the allocation records")
        if min(core_used, default=0) < 0 or min(mem_used, default=0) < 0:
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
        self.refresh_derived(slot)
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
