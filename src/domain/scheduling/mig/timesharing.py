"""A time-sharing request on a node whose GPUs are in MIG mode: refused with a reason that names MIG and the
profiles that would hold it.

A GPU in MIG mode takes MIG instances only (``<prefix>/mig-<profile>``, :mod:`domain.kube.migresources`); a pod asking
for time-sharing resources (whole GPUs, core, memory) finds no schedulable GPU there. The request is *not* mapped to
a MIG profile: kubelet hands a container the devices of the resource it asked for, and a ``gpu-memory`` device is no
MIG instance, so a mapping would need the device plugin to serve a MIG instance for a time-sharing resource, and the
Runtime to limit it as one. The pod is told instead which profiles would hold its request on the node's GPU models,
so its author can ask for one.

Fit of a profile (nominal sizes of :mod:`domain.mig.profiles`): memory ``≥`` the asked bytes (inclusive: a request
equal to a profile's memory fits it); a relative memory share (percentage mode) or a core share, as a fraction of
the GPU, at most the profile's share of memory or compute slices; a whole GPU, only the profile that spans the
GPU. A pod with several GPU containers needs a profile that holds each of them. ``+me`` profiles are never offered.
"""

from __future__ import annotations

import numpy as np

from domain.errors import DomainError
from domain.gpu import Gpu, MigMode
from domain.ledger import ClusterLedger
from domain.mig.profiles import MigGpuModel, MigProfile, mig_model
from domain.request import ContainerRequest, GpuKind, PodRequest
from domain.scheduling.framework.cycle import BoolArray, CycleState
from domain.scheduling.framework.planner import eligible_nodes
from domain.units import MILLI_PER_GPU


def _holds(profile: MigProfile, table: MigGpuModel, container: ContainerRequest) -> bool:
    if profile.media_extensions:
        return False
    if container.kind is GpuKind.WHOLE:
        return (profile.compute_slices, profile.memory_slices) == (table.compute_slots, table.memory_slots)
    if container.memory_bytes is not None and profile.memory_bytes < container.memory_bytes:
        return False
    if container.memory_milli is not None and profile.memory_slices * MILLI_PER_GPU < (
            container.memory_milli * table.memory_slots):
        return False
    return container.core_milli is None or profile.compute_slices * MILLI_PER_GPU >= (
        container.core_milli * table.compute_slots)


def fitting_profiles(table: MigGpuModel, pod: PodRequest) -> tuple[MigProfile, ...]:
    """The profiles of ``table`` that hold every time-sharing GPU container of ``pod`` (module docstring), in
    table order (small to large)."""
    return tuple(p for p in table.profiles if all(_holds(p, table, c) for c in pod.gpu_containers))


def _model_line(gpu: Gpu, pod: PodRequest) -> str:
    try:
        table = mig_model(gpu.model, memory_bytes=gpu.memory_bytes)
    except DomainError:
        return f"{gpu.model}: no MIG profile table"
    fitting = fitting_profiles(table, pod)
    return f"{table.key}: {', '.join(p.name for p in fitting) if fitting else 'none'}"


class MigModeGpus:
    """Removes the nodes where a time-sharing GPU pod finds no schedulable GPU because the GPUs its selector
    allows are in MIG mode, with a reason naming MIG and the profiles that would hold the pod (module docstring).
    Runs before :class:`~domain.scheduling.framework.filters.GpuModelMatch`, which gives every other such node its
    reason.

    ``stem``: ``<prefix>/mig-`` of the protocol's MIG resource names (None: named generically).
    """

    name = "MigModeGpus"
    reason = "its GPUs are in MIG mode and take MIG instances only"

    def __init__(self, stem: str | None = None) -> None:
        self.stem = stem

    def filter(self, pod: PodRequest, ledger: ClusterLedger, state: CycleState, candidates: BoolArray) -> BoolArray:
        """Candidates minus the MIG-mode nodes described above; CPU-only and MIG pods pass unchanged."""
        if not pod.wants_gpu:
            return candidates
        passed = candidates.copy()
        lines: dict[str, None] = {}
        for slot in np.flatnonzero(candidates & ~eligible_nodes(pod, ledger, state)):
            mig = [g for g in ledger.inventory(ledger.name(int(slot))).gpus
                   if g.mig_mode is MigMode.ENABLED and pod.selector.allows(g)]
            if mig:
                passed[slot] = False
                lines.update(dict.fromkeys(_model_line(g, pod) for g in mig))
        if lines:
            resource = f"{self.stem}<profile>" if self.stem else "a mig-<profile> resource"
            state.reasons[self.name] = (
                f"{self.reason}, not time-sharing requests (whole GPUs, core, memory): ask for {resource} instead; "
                f"profiles that hold this request: {'; '.join(sorted(lines))}")
        return passed
