"""``resource.k8s.io/v1`` ResourceSlice models of the official client (37: ``V1ResourceSlice`` …) to and from
:mod:`domain.dra.slices`.

Quantities are written as plain integers (bytes, percent) and read with the protocol's quantity parser, so any
integral spelling reads back (kube-apiserver 1.37.2 returns ``42949672960`` as written; a client may write
``40Gi``). Attribute values are typed by Python type (``bool`` before ``int``); taints' ``timeAdded``, stamped by
the server, is dropped on read; the owner is the first ``ownerReferences`` entry of kind ``Node``. Raises
:class:`~domain.errors.InvalidRequestError` (field named) for a stored slice the domain cannot hold (an attribute of
no known type, a fractional quantity).
"""

from __future__ import annotations

from kubernetes import client

from domain.dra.slices import (
    AttributeValue,
    Capacity,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceTaint,
    NodeOwner,
    RequestPolicy,
    ResourceSlice,
    SliceContent,
    TaintEffect,
)
from domain.errors import InvalidRequestError
from domain.kube.protocol import parse_quantity


def _attribute(value: AttributeValue) -> client.V1DeviceAttribute:
    if isinstance(value, bool):
        return client.V1DeviceAttribute(bool=value)
    if isinstance(value, int):
        return client.V1DeviceAttribute(int=value)
    return client.V1DeviceAttribute(string=value)


def _policy(policy: RequestPolicy | None) -> client.V1CapacityRequestPolicy | None:
    if policy is None:
        return None
    return client.V1CapacityRequestPolicy(
        default=str(policy.default),
        valid_range=client.V1CapacityRequestPolicyRange(min=str(policy.minimum), max=str(policy.maximum),
                                                        step=str(policy.step)))


def _device(device: Device) -> client.V1Device:
    return client.V1Device(
        name=device.name,
        attributes={k: _attribute(v) for k, v in device.attributes.items()} or None,
        capacity={k: client.V1DeviceCapacity(value=str(c.value), request_policy=_policy(c.request_policy))
                  for k, c in device.capacity.items()} or None,
        allow_multiple_allocations=True if device.allow_multiple_allocations else None,
        consumes_counters=[client.V1DeviceCounterConsumption(
            counter_set=c.counter_set, counters={k: client.V1Counter(value=str(v)) for k, v in c.counters.items()})
            for c in device.consumes_counters] or None,
        taints=[client.V1DeviceTaint(key=t.key, value=t.value or None, effect=t.effect.value)
                for t in device.taints] or None,
    )


def slice_to_v1(resource_slice: ResourceSlice) -> client.V1ResourceSlice:
    """The client model of ``resource_slice`` (module docstring)."""
    owner = resource_slice.owner
    metadata = client.V1ObjectMeta(
        name=resource_slice.name, resource_version=resource_slice.resource_version or None,
        owner_references=None if owner is None else [
            client.V1OwnerReference(api_version="v1", kind="Node", name=owner.name, uid=owner.uid)])
    content = resource_slice.content
    spec = client.V1ResourceSliceSpec(
        driver=resource_slice.driver, node_name=resource_slice.node,
        pool=client.V1ResourcePool(name=resource_slice.pool, generation=resource_slice.generation,
                                   resource_slice_count=resource_slice.slice_count),
        devices=[_device(d) for d in content.devices] or None,
        shared_counters=[client.V1CounterSet(name=c.name, counters={
            k: client.V1Counter(value=str(v)) for k, v in c.counters.items()}) for c in content.shared_counters]
        or None,
    )
    return client.V1ResourceSlice(api_version="resource.k8s.io/v1", kind="ResourceSlice", metadata=metadata,
                                  spec=spec)


def _value(field: str, attribute: client.V1DeviceAttribute) -> AttributeValue:
    for value in (attribute.bool, attribute.int, attribute.string, attribute.version):
        if value is not None:
            return value
    raise InvalidRequestError(field, attribute, "no bool, int, string or version value")


def _quantity(field: str, text: str | None) -> int:
    return parse_quantity(field, text or "")


def _policy_from(field: str, policy: client.V1CapacityRequestPolicy | None) -> RequestPolicy | None:
    if policy is None or policy.valid_range is None:
        return None
    span = policy.valid_range
    return RequestPolicy(default=_quantity(f"{field}.default", policy.default),
                         minimum=_quantity(f"{field}.validRange.min", span.min),
                         maximum=_quantity(f"{field}.validRange.max", span.max),
                         step=_quantity(f"{field}.validRange.step", span.step))


def _device_from(device: client.V1Device) -> Device:
    field = f"devices[{device.name}]"
    return Device(
        name=device.name,
        attributes={k: _value(f"{field}.attributes.{k}", v) for k, v in (device.attributes or {}).items()},
        capacity={k: Capacity(_quantity(f"{field}.capacity.{k}", c.value),
                              _policy_from(f"{field}.capacity.{k}.requestPolicy", c.request_policy))
                  for k, c in (device.capacity or {}).items()},
        allow_multiple_allocations=bool(device.allow_multiple_allocations),
        consumes_counters=tuple(CounterConsumption(c.counter_set, {
            k: _quantity(f"{field}.consumesCounters.{k}", v.value) for k, v in c.counters.items()})
            for c in device.consumes_counters or ()),
        taints=tuple(DeviceTaint(t.key, TaintEffect(t.effect), t.value or "") for t in device.taints or ()),
    )


def slice_from_v1(model: client.V1ResourceSlice) -> ResourceSlice:
    """The domain value of a stored slice (module docstring). Raises InvalidRequestError."""
    metadata = model.metadata or client.V1ObjectMeta()
    spec = model.spec
    owner = next((NodeOwner(r.name, r.uid) for r in metadata.owner_references or () if r.kind == "Node"), None)
    content = SliceContent(
        devices=tuple(_device_from(d) for d in spec.devices or ()),
        shared_counters=tuple(CounterSet(c.name, {k: _quantity(f"sharedCounters[{c.name}].{k}", v.value)
                                                  for k, v in c.counters.items()}) for c in spec.shared_counters or ()),
    )
    return ResourceSlice(name=metadata.name or "", driver=spec.driver, node=spec.node_name or "",
                         generation=spec.pool.generation, slice_count=spec.pool.resource_slice_count, content=content,
                         owner=owner, resource_version=metadata.resource_version or "")
