"""Typical pods for FGD in a live cluster: the pods observed there, topped up by a reference workload.

FGD (Weng et al., ATC '23) scores a node by how placing a pod changes the fragmentation measured against the
*typical pods* of the workload (:mod:`domain.scheduling.policies.fgd.fragmentation`). The trace replay derives them
from the trace; a live scheduler only has the pods it has seen. :func:`blend_typical` uses the observed pods alone once
there are at least ``min_observed`` of them, and until then the observed pods *plus* the whole reference
workload (the embedded synthetic workload, in production), so a young cluster is scored against a realistic
mix rather than against its first few pods.

Class keys follow §3.1 of docs/trace-replay.md: ``(cpu milli-cores, per-GPU milli, GPU count, models)``;
memory is not part of the key. A share that asks only for memory has no core figure: its per-GPU milli is the
core the default rule (:func:`domain.request.resolve_share`) grants on a GPU of ``reference_gpu_memory`` bytes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from domain.request import GpuKind, PodRequest, resolve_share
from domain.scheduling.policies.fgd.fragmentation import PodClass, TypicalPods
from domain.units import MILLI_PER_GPU, GiB

REFERENCE_GPU_MEMORY = 16 * GiB
"""GPU size (bytes) used to turn a memory-only share into per-GPU milli for the class key."""


def pod_class(request: PodRequest, *, reference_gpu_memory: int = REFERENCE_GPU_MEMORY) -> PodClass:
    """The typical-pod key of ``request``: CPU-only, whole GPUs (1000 milli × count) or one share. A pod with
    several GPU containers is keyed by its first one. Raises nothing for a valid :class:`PodRequest`."""
    containers = request.gpu_containers
    models = "|".join(request.selector.models)
    if not containers:
        return PodClass(request.cpu_milli, 0, 0, models)
    first = containers[0]
    if first.kind is GpuKind.WHOLE:
        return PodClass(request.cpu_milli, MILLI_PER_GPU, first.gpus, models)
    core, _ = resolve_share(core_milli=first.core_milli, memory_bytes=first.memory_bytes,
                            memory_milli=first.memory_milli, gpu_memory_bytes=reference_gpu_memory)
    return PodClass(request.cpu_milli, core, 1, models)


SHARED_CLASSES = 4096
"""Most request contents :class:`PodClasses` keeps (emptied when full: a bound, not a cache policy)."""


class PodClasses:
    """:func:`pod_class` memoised per request content shared between pods: replicas of one template get requests
    whose ``containers`` tuple and ``selector`` are the very same objects (:class:`domain.kube.requests.PodRequests`
    shares them), so one identity look answers for all of them. The memo holds those objects, so their identities
    are never reused while an entry stands; any other request is computed (and kept). Answers exactly what
    :func:`pod_class` answers (with the default reference GPU memory). Not thread-safe."""

    def __init__(self) -> None:
        self._memo: dict[tuple[int, int, int], tuple[object, object, PodClass]] = {}

    def of(self, request: PodRequest) -> PodClass:
        """The typical-pod key of ``request`` (:func:`pod_class`). Raises nothing for a valid request."""
        containers, selector = request.containers, request.selector
        key = (id(containers), id(selector), request.cpu_milli)
        hit = self._memo.get(key)
        if hit is not None and hit[0] is containers and hit[1] is selector:
            return hit[2]
        value = pod_class(request)
        if len(self._memo) >= SHARED_CLASSES:
            self._memo.clear()
        self._memo[key] = (containers, selector, value)
        return value


def blend_typical(
    observed: Collection[PodClass], reference: Sequence[PodClass], *, min_observed: int
) -> TypicalPods:
    """Typical pods from ``observed`` alone when there are at least ``min_observed`` of them, else from
    ``observed`` plus all of ``reference`` (module docstring). Raises :class:`InvalidRequestError` when both
    are empty."""
    pods = list(observed) if len(observed) >= min_observed else [*observed, *reference]
    return TypicalPods.from_workload(pods)
