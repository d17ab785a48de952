"""ResourceSlice content (``resource.k8s.io/v1``) as immutable domain values; the Kubernetes adapter translates them.

Field names follow the v1 API (``kubernetes`` client 37 models ``V1ResourceSliceSpec``, ``V1Device``,
``V1DeviceCapacity``, ``V1CapacityRequestPolicy(Range)``, ``V1CounterSet``, ``V1DeviceCounterConsumption``,
``V1DeviceTaint``, ``V1ResourcePool``): ``spec.driver``, ``spec.nodeName``, ``spec.pool{name, generation,
resourceSliceCount}``, ``spec.devices[]{name, attributes, capacity{value, requestPolicy{default, validRange{min, max,
step}}}, allowMultipleAllocations, consumesCounters[]{counterSet, counters{value}}, taints[]{key, value, effect}}``,
``spec.sharedCounters[]{name, counters}``. Units: capacities and counters are integers (bytes for memory, percent
for cores); the adapter writes them as quantity strings. Invariants (API limits, checked here so a bad slice is
never sent): a slice holds devices or shared counters, never both; at most :data:`MAX_DEVICES` devices, or
:data:`MAX_DEVICES_TAINTED` when any device has taints or consumes counters; at most :data:`MAX_COUNTER_SETS`
counter sets.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from domain.errors import InvalidRequestError

MAX_DEVICES = 128
"""Devices per ResourceSlice (``spec.devices``: "Must not have more than 128 entries")."""
MAX_DEVICES_TAINTED = 64
"""Devices per ResourceSlice when any device has taints or consumes counters (same field's documentation)."""
MAX_COUNTER_SETS = 8
"""Counter sets per ResourceSlice (``spec.sharedCounters``: "The maximum number of counter sets is 8")."""

AttributeValue = str | int | bool
"""A device attribute's typed value: ``string``, ``int`` or ``bool`` of ``V1DeviceAttribute``."""


class TaintEffect(enum.Enum):
    """``V1DeviceTaint.effect`` (``PreferNoSchedule`` is not valid on devices)."""

    NONE = "None"
    NO_SCHEDULE = "NoSchedule"
    NO_EXECUTE = "NoExecute"


@attrs.frozen
class RequestPolicy:
    """``requestPolicy`` of a consumable capacity: ``default`` (what a request without an amount consumes) and the
    ``validRange`` ``[minimum, maximum]`` in steps of ``step`` (all in the capacity's unit). Raises
    :class:`InvalidRequestError` unless 0 ≤ minimum ≤ default ≤ maximum, step > 0 and maximum, default are
    minimum + a multiple of step."""

    default: int
    minimum: int
    maximum: int
    step: int

    def __attrs_post_init__(self) -> None:
        if not (0 <= self.minimum <= self.default <= self.maximum and self.step > 0):
            raise InvalidRequestError("requestPolicy", self, "needs 0 <= min <= default <= max and step > 0")
        if (self.maximum - self.minimum) % self.step or (self.default - self.minimum) % self.step:
            raise InvalidRequestError("requestPolicy", self, "max and default must be min + a multiple of step")


@attrs.frozen
class Capacity:
    """One capacity of a device: ``value`` (total) and its ``request_policy`` (None: a request takes it all)."""

    value: int
    request_policy: RequestPolicy | None = None


@attrs.frozen
class CounterConsumption:
    """``consumesCounters`` entry: what a device takes from counter set ``counter_set`` (name → amount)."""

    counter_set: str
    counters: Mapping[str, int]


@attrs.frozen
class CounterSet:
    """``sharedCounters`` entry: counter set ``name`` (one per MIG GPU) and its counters (name → amount)."""

    name: str
    counters: Mapping[str, int]


@attrs.frozen
class DeviceTaint:
    """A driver-defined device taint (``key``, ``value``, ``effect``); the server stamps ``timeAdded``, which the
    domain does not keep (content equality ignores it)."""

    key: str
    effect: TaintEffect = TaintEffect.NO_SCHEDULE
    value: str = ""


@attrs.frozen
class Device:
    """One device of a slice: ``name`` (DNS label, unique in the pool), typed ``attributes`` (unqualified names are
    in the driver's domain), ``capacity`` (name → :class:`Capacity`), ``allow_multiple_allocations`` (True: several
    claims share it, each consuming part of the capacity), ``consumes_counters`` and ``taints``."""

    name: str
    attributes: Mapping[str, AttributeValue] = attrs.field(factory=dict)
    capacity: Mapping[str, Capacity] = attrs.field(factory=dict)
    allow_multiple_allocations: bool = False
    consumes_counters: tuple[CounterConsumption, ...] = ()
    taints: tuple[DeviceTaint, ...] = ()

    @property
    def limited(self) -> bool:
        """True when the device makes its slice subject to :data:`MAX_DEVICES_TAINTED`."""
        return bool(self.taints or self.consumes_counters)


@attrs.frozen
class SliceContent:
    """What one slice carries, apart from its name, pool generation and count: ``devices`` or ``shared_counters``
    (exactly one of them non-empty, or both empty for a node without devices). Raises
    :class:`InvalidRequestError` when both are set or a limit of the module docstring is exceeded."""

    devices: tuple[Device, ...] = ()
    shared_counters: tuple[CounterSet, ...] = ()

    def __attrs_post_init__(self) -> None:
        if self.devices and self.shared_counters:
            raise InvalidRequestError("slice", "devices and sharedCounters", "a slice holds one or the other")
        limit = MAX_DEVICES_TAINTED if any(d.limited for d in self.devices) else MAX_DEVICES
        if len(self.devices) > limit:
            raise InvalidRequestError("slice.devices", len(self.devices), f"at most {limit} devices per slice")
        if len(self.shared_counters) > MAX_COUNTER_SETS:
            raise InvalidRequestError("slice.sharedCounters", len(self.shared_counters),
                                      f"at most {MAX_COUNTER_SETS} counter sets per slice")


@attrs.frozen
class NodeOwner:
    """The Node a slice belongs to (``ownerReferences``: the garbage collector deletes the slice with the Node)."""

    name: str
    uid: str


@attrs.frozen
class ResourceSlice:
    """A ResourceSlice of a node-local pool: ``name`` (cluster-scoped object name), ``driver``, ``node``
    (``spec.nodeName``; the pool is named after it), ``generation`` and ``slice_count`` (``spec.pool``), ``content``,
    ``owner``. ``resource_version`` is the server's (empty before create) and takes no part in equality."""

    name: str
    driver: str
    node: str
    generation: int
    slice_count: int
    content: SliceContent
    owner: NodeOwner | None = None
    resource_version: str = attrs.field(default="", eq=False)

    @property
    def pool(self) -> str:
        """The pool's name: the node's."""
        return self.node
