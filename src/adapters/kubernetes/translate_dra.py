"""``resource.k8s.io/v1`` ResourceSlice models of the official client (37: ``V1ResourceSlice`` …) to and from
:mod:`domain.dra.slices`.

Quantities are written as plain integers (bytes, percent) and read with the protocol's quantity parser, so any
integral spelling reads back (kube-apiserver 1.37.2 returns ``42949672960`` as written; a client may write
``40Gi``). Attribute values are typed by Python type (``bool`` before ``int``); taints' ``timeAdded``, stamped by
the server, is dropped on read; the owner is the first ``ownerReferences`` entry of kind ``Node``. Raises
:class:`~domain.errors.InvalidRequestError` (field named) for a stored slice the domain cannot hold (an attribute of
no known type, a fractional quantity).

:func:`slice_from_json` reads the API server's JSON of a slice (the LIST and watch of all nodes' slices go raw,
:mod:`.rawjson`) into the same domain value as :func:`slice_from_v1` reads from the model, field for field
(``tests/contract/test_resource_slices_contract.py`` compares the two on a real server).
"""

from __future__ import annotations

from typing import Any

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


def _value_json(field: str, attribute: dict[str, Any]) -> AttributeValue:
    for key in ("bool", "int", "string", "version"):
        value = attribute.get(key)
        if value is not None:
            return bool(value) if key == "bool" else int(value) if key == "int" else str(value)
    raise InvalidRequestError(field, attribute, "no bool, int, string or version value")


def _policy_json(field: str, policy: dict[str, Any] | None) -> RequestPolicy | None:
    span = (policy or {}).get("validRange")
    if policy is None or span is None:
        return None
    return RequestPolicy(default=_quantity(f"{field}.default", policy.get("default")),
                         minimum=_quantity(f"{field}.validRange.min", span.get("min")),
                         maximum=_quantity(f"{field}.validRange.max", span.get("max")),
                         step=_quantity(f"{field}.validRange.step", span.get("step")))


def _counters_json(field: str, counters: dict[str, Any] | None) -> dict[str, int]:
    return {str(k): _quantity(f"{field}.{k}", (v or {}).get("value")) for k, v in (counters or {}).items()}


def _device_json(device: dict[str, Any]) -> Device:
    name = str(device.get("name") or "")
    field = f"devices[{name}]"
    return Device(
        name=name,
        attributes={str(k): _value_json(f"{field}.attributes.{k}", v)
                    for k, v in (device.get("attributes") or {}).items()},
        capacity={str(k): Capacity(_quantity(f"{field}.capacity.{k}", c.get("value")),
                                   _policy_json(f"{field}.capacity.{k}.requestPolicy", c.get("requestPolicy")))
                  for k, c in (device.get("capacity") or {}).items()},
        allow_multiple_allocations=bool(device.get("allowMultipleAllocations")),
        consumes_counters=tuple(CounterConsumption(str(c.get("counterSet") or ""), _counters_json(
            f"{field}.consumesCounters", c.get("counters"))) for c in device.get("consumesCounters") or ()),
        taints=tuple(DeviceTaint(str(t.get("key") or ""), TaintEffect(t.get("effect")), str(t.get("value") or ""))
                     for t in device.get("taints") or ()),
    )


def _integer(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequestError(field, value, "not an integer")
    return value


def slice_from_json(obj: dict[str, Any]) -> ResourceSlice:
    """The domain value of a stored slice's JSON (``resource.k8s.io/v1``), equal to :func:`slice_from_v1`'s of
    the same object (module docstring). Raises InvalidRequestError (a ValueError), and
    TypeError/AttributeError/ValueError for another shape."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    pool = spec.get("pool") or {}
    owner = next((NodeOwner(str(r.get("name")), str(r.get("uid"))) for r in metadata.get("ownerReferences") or ()
                  if r.get("kind") == "Node"), None)
    content = SliceContent(
        devices=tuple(_device_json(d) for d in spec.get("devices") or ()),
        shared_counters=tuple(
            CounterSet(str(c.get("name") or ""), _counters_json(f"sharedCounters[{c.get('name')}]", c.get("counters")))
            for c in spec.get("sharedCounters") or ()),
    )
    return ResourceSlice(name=str(metadata.get("name") or ""), driver=str(spec.get("driver") or ""),
                         node=str(spec.get("nodeName") or ""),
                         generation=_integer("pool.generation", pool.get("generation")),
                         slice_count=_integer("pool.resourceSliceCount", pool.get("resourceSliceCount")),
                         content=content, owner=owner, resource_version=str(metadata.get("resourceVersion") or ""))
