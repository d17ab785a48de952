"""Versioned JSON codecs for the two annotations the components exchange through the API server.

The node GPU inventory (published by the device plugin) and the pod GPU plan (written by the scheduler before it
binds); their layouts, versions and field meanings are in ``docs/annotations.md``. Invariants: decoding an encoded
value gives it back (container order kept, failure case B04); ``coreMilli`` is authoritative and ``corePercent`` must
equal ``ceil(coreMilli / 10)``; a plan names its pod's UID and writer, and version 1 plans are refused; a decoded GPU
UUID must be in the node's current inventory, whose index wins. A plan is pod-written data (failure case B07): it is
trusted only on a bound pod or during this scheduler's own reservation, and :mod:`domain.kube.translate` checks it.

Errors: :class:`InvalidRequestError` whose field is ``<annotation key>.<json path>``, for unknown versions, malformed
JSON, missing fields and wrong types, and from encoders for a GPU index the node lacks.

Parts: :mod:`.records`, :mod:`.fields`, :mod:`.inventory`, :mod:`.plan`; this package re-exports their public
names.
"""

from domain.kube.annotations.inventory import decode_inventory, encode_inventory
from domain.kube.annotations.plan import (
    MigContainerPlan,
    PlannedInstance,
    core_percent,
    decode_mig_plan,
    decode_plan,
    encode_plan,
    plan_gpu_uuids,
    plan_node,
    plan_owner,
)
from domain.kube.annotations.records import (
    INVENTORY_VERSION,
    INVENTORY_VERSIONS_READ,
    MAX_ANNOTATION_BYTES,
    MIG_STRATEGIES,
    PLAN_VERSION,
    PLAN_WRITER,
    InventoryRecord,
    MigInstanceRecord,
    MigLayout,
)

__all__ = [
    "INVENTORY_VERSION",
    "INVENTORY_VERSIONS_READ",
    "MAX_ANNOTATION_BYTES",
    "MIG_STRATEGIES",
    "PLAN_VERSION",
    "PLAN_WRITER",
    "InventoryRecord",
    "MigContainerPlan",
    "MigInstanceRecord",
    "MigLayout",
    "PlannedInstance",
    "core_percent",
    "decode_inventory",
    "decode_mig_plan",
    "decode_plan",
    "encode_inventory",
    "encode_plan",
    "plan_gpu_uuids",
    "plan_node",
    "plan_owner",
]
