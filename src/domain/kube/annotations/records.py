"""The annotation schemas' versions and limits, and the decoded records (inventory, MIG instances).

Layouts and field meanings: ``docs/annotations.md``. Invariant: records are immutable values.
"""


from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from domain.gpu import Gpu
from domain.topology import NodeTopology

INVENTORY_VERSION = 2
"""Schema version of the node inventory annotation (2 added the MIG layout; written only for nodes with a GPU in
MIG mode, version 1 otherwise)."""

INVENTORY_VERSIONS_READ = (1, 2)
"""Inventory versions :func:`decode_inventory` accepts."""

MIG_STRATEGIES = ("static", "dynamic")
"""Values of the inventory's ``migStrategy`` (:class:`domain.mig.gpu.PlacementMode` values)."""

PLAN_VERSION = 2
"""Schema version of the pod plan annotation (2 added ``podUID`` and ``writer``; 1 is refused)."""

PLAN_WRITER = "lj-runtimekit-scheduler"
"""Default ``writer`` of :func:`encode_plan` (the scheduler's name in the default protocol)."""

MAX_ANNOTATION_BYTES = 256 * 1024
"""Kubernetes caps all annotations of an object at 256 KiB together; anything longer is not ours."""


@attrs.frozen
class MigInstanceRecord:
    """One MIG instance of the inventory annotation (module docstring): ``gpu_instance_id`` (NVML GI id),
    ``compute_instance_id`` (NVML CI id; None without compute instance), ``profile`` (canonical name), ``start``
    (memory slice), ``uuid`` (``MIG-…``; empty without compute instance), ``free`` (no container holds it)."""

    gpu_instance_id: int
    compute_instance_id: int | None
    profile: str
    start: int
    uuid: str
    free: bool

    @property
    def usable(self) -> bool:
        """True when the instance can be handed to a container (a compute instance and a MIG UUID)."""
        return self.compute_instance_id is not None and bool(self.uuid)


MigLayout = dict[int, tuple[MigInstanceRecord, ...]]
"""GPU index → the MIG instances a node's inventory lists on it, by start (GPUs without instances absent)."""


def _mig_map(value: Mapping[int, Sequence[MigInstanceRecord]]) -> MigLayout:
    return {index: tuple(sorted(items, key=lambda i: i.start)) for index, items in value.items() if items}


@attrs.frozen
class InventoryRecord:
    """A decoded inventory annotation: ``gpus`` (dense indexes 0..n-1, in index order), ``heartbeat`` (epoch
    seconds when the device plugin last wrote it), ``protocol`` (the writer's protocol fingerprint), ``mig`` (GPU
    index → its MIG instances by start; GPUs without instances absent) and ``mig_strategy`` (``static``,
    ``dynamic``, or empty when not published) and ``kubelet_registered`` (False: the device plugin said kubelet
    would refuse GPU pods now) and ``topology`` (the GPUs' NUMA nodes, PCIe roots and NVLink peers; None when the
    annotation carries none)."""

    gpus: tuple[Gpu, ...]
    heartbeat: float
    protocol: str
    mig: Mapping[int, tuple[MigInstanceRecord, ...]] = attrs.field(factory=dict, converter=_mig_map)
    mig_strategy: str = ""
    kubelet_registered: bool = True
    topology: NodeTopology | None = None
