"""Trace-replay inputs: nodes and pods as the Alibaba GPU cluster trace describes them.

Units (trace README, docs/trace-replay.md §1): ``cpu_milli`` 1/1000 core; ``memory_mib`` MiB; ``gpu_milli``
1/1000 of one GPU *per GPU* (a pod's total is ``num_gpu × gpu_milli``); ``gpu_spec`` an allow-list of GPU
models (empty = any). GPU memory per model is not in the trace; the simulator's table below (MiB) is used only
to give simulated GPUs a size — scheduling in the published experiment never uses GPU memory, and the default
rule (memory proportional to core) keeps it that way here.
"""

from __future__ import annotations

import attrs

from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, NodeInventory, NodeName
from domain.request import ContainerRequest, GpuSelector, PodRequest
from domain.scheduling.policies.fgd.fragmentation import PodClass
from domain.units import MAX_GPUS_PER_NODE, MAX_NODE_QUANTITY, MILLI_PER_GPU, MiB

TRACE_GPU_MEMORY_MIB: dict[str, int] = {
    "P100": 16280, "T4": 15109, "V100M16": 16160, "V100M32": 32510, "A10": 22731,
    "G1": 10000, "G2": 20000, "G3": 30000,
}
"""GPU memory per trace model, MiB (the published simulator's table); unknown models get 16 GiB."""

TRACE_MAX_PODS = 1001
"""Pod slots per node in the published experiment (``pods=1001`` in its node YAML)."""


def _check_sizes(cpu_milli: int, memory_mib: int, *, gpu_field: str, gpus: int) -> None:
    """Quantities a node can hold: CPU and memory at most ``MAX_NODE_QUANTITY`` (milli-cores, bytes), GPUs at most
    ``MAX_GPUS_PER_NODE``; all ≥ 0. Raises :class:`InvalidRequestError` naming the field (the trace column)."""
    for name, value, most in (("cpu_milli", cpu_milli, MAX_NODE_QUANTITY), ("memory_mib", memory_mib,
                              MAX_NODE_QUANTITY // MiB), (gpu_field, gpus, MAX_GPUS_PER_NODE)):
        if not 0 <= value <= most:
            raise InvalidRequestError(name, value, f"must be 0..{most}: no node has more")


@attrs.frozen
class TraceNode:
    """One trace node: ``name``, ``cpu_milli``, ``memory_mib``, ``gpus`` (count), ``model``.

    Raises :class:`InvalidRequestError` for CPU or memory beyond ``MAX_NODE_QUANTITY`` or more than
    ``MAX_GPUS_PER_NODE`` GPUs (field ``gpu``, the trace column), a negative value, or GPUs without a ``model``.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str

    def __attrs_post_init__(self) -> None:
        _check_sizes(self.cpu_milli, self.memory_mib, gpu_field="gpu", gpus=self.gpus)
        if self.gpus and not self.model.strip():
            raise InvalidRequestError("model", self.model, f"must name the GPU model of a node with {self.gpus} GPU(s)")

    def inventory(self) -> NodeInventory:
        """The node as the ledger sees it (simulated GPUs ``<name>-gpu<i>``)."""
        memory = TRACE_GPU_MEMORY_MIB.get(self.model, 16384) * MiB
        gpus = tuple(Gpu(i, GpuUuid(f"{self.name}-gpu{i}"), self.model, memory) for i in range(self.gpus))
        return NodeInventory(
            NodeName(self.name), gpus, cpu_milli=self.cpu_milli, memory_bytes=self.memory_mib * MiB,
            max_pods=TRACE_MAX_PODS,
        )


@attrs.frozen
class TracePod:
    """One trace pod: ``name``, ``cpu_milli``, ``memory_mib``, ``num_gpu``, ``gpu_milli`` (per GPU), ``gpu_spec``.

    Raises :class:`InvalidRequestError` when ``num_gpu > 1`` with ``gpu_milli < 1000`` (a share is of one GPU),
    ``gpu_milli`` is outside 0..1000, or ``num_gpu`` and ``gpu_milli`` disagree on whether the pod uses a GPU, and
    for CPU or memory beyond ``MAX_NODE_QUANTITY``, more than ``MAX_GPUS_PER_NODE`` GPUs or a negative value.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        _check_sizes(self.cpu_milli, self.memory_mib, gpu_field="num_gpu", gpus=self.num_gpu)
        if not 0 <= self.gpu_milli <= MILLI_PER_GPU:
            raise InvalidRequestError("gpu_milli", self.gpu_milli, "must be 0..1000")
        if self.num_gpu == 0 and self.gpu_milli > 0:
            raise InvalidRequestError("gpu_milli", self.gpu_milli, "a CPU-only pod (num_gpu=0) must have gpu_milli=0")
        if self.num_gpu > 0 and self.gpu_milli == 0:
            raise InvalidRequestError("gpu_milli", 0, f"num_gpu={self.num_gpu} needs gpu_milli ≥ 1")
        if self.num_gpu > 1 and 0 < self.gpu_milli < MILLI_PER_GPU:
            raise InvalidRequestError(
                "gpu_milli", self.gpu_milli, f"num_gpu={self.num_gpu} needs gpu_milli=1000 (shares are of one GPU)"
            )

    @property
    def total_gpu_milli(self) -> int:
        """``num_gpu × gpu_milli`` (0 for CPU-only pods)."""
        return self.num_gpu * self.gpu_milli if self.num_gpu > 0 else 0

    @property
    def per_gpu_milli(self) -> int:
        """``gpu_milli`` of GPU pods, 0 for CPU-only pods."""
        return self.gpu_milli if self.num_gpu > 0 else 0

    @property
    def pod_class(self) -> PodClass:
        """Typical-pod key (§3.1): CPU, per-GPU milli, GPU count, model list — memory excluded."""
        return PodClass(self.cpu_milli, self.per_gpu_milli, self.num_gpu, "|".join(self.gpu_spec))

    def request(self, uid: str) -> PodRequest:
        """The pod as the scheduler sees it: one container ``main``; whole GPUs when ``gpu_milli = 1000``."""
        if self.num_gpu == 0 or self.gpu_milli == 0:
            container = ContainerRequest("main")
        elif self.gpu_milli == MILLI_PER_GPU:
            container = ContainerRequest("main", gpus=self.num_gpu)
        else:
            container = ContainerRequest("main", core_milli=self.gpu_milli)
        return PodRequest(
            uid=uid, containers=(container,), name=self.name, cpu_milli=self.cpu_milli,
            memory_bytes=self.memory_mib * MiB, selector=GpuSelector(models=self.gpu_spec),
        )
