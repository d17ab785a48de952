"""GetPreferredAllocation by topology: the whole GPUs to prefer when no plan names them.

kubelet asks the device plugin which ``size`` of the offered device IDs it prefers. With the scheduler's plan
identified, the planned GPUs come first (:func:`domain.device_plugin.devices.preferred_ids`); without one (a pod
bound by another scheduler, a plan not yet readable) and for the whole-GPU resource, :func:`connected_gpus` gives
the GPUs of the best-connected set among the offered ones (:func:`domain.topology.best_connected`, the scheduler's
rule), which ``preferred_ids`` then puts first. Shares (core, memory) and MIG keep kubelet's order: several IDs
of one GPU are no multi-GPU choice. With ``must_include`` IDs the preference is left to the plan too (kubelet's
must-include set may not be connected, and the choice would have to be built around it).
"""

from __future__ import annotations

from collections.abc import Sequence

from domain.device_plugin.devices import ResourceKey, ResourceKind, parse_device_id
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid
from domain.topology import NodeTopology, best_connected


def connected_gpus(
    kind: ResourceKey, available: Sequence[str], must_include: Sequence[str], size: int, gpus: Sequence[Gpu],
    topology: NodeTopology | None,
) -> tuple[GpuUuid, ...]:
    """UUIDs of the best-connected ``size`` GPUs among those ``available`` IDs name (module docstring); empty when
    not applicable: another resource than whole GPUs, ``must_include`` IDs, no topology, or fewer offered GPUs
    than ``size``. Malformed IDs are skipped, never raised."""
    if kind is not ResourceKind.GPU or must_include or topology is None or size < 1:
        return ()
    index_of = {gpu.uuid: gpu.index for gpu in gpus}
    offered: dict[int, GpuUuid] = {}
    for ident in available:
        try:
            uuid = parse_device_id(ident).uuid
        except InvalidRequestError:
            continue
        if uuid in index_of:
            offered[index_of[uuid]] = uuid
    choice = best_connected(topology, offered, size) if len(offered) >= size else None
    return () if choice is None else tuple(offered[i] for i in choice.indexes)
