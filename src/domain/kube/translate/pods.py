"""A pod's request in the ledger's terms (:func:`pod_request`), and the MIG resource table it reads.

Reads our extended resources per container (limits, falling back to requests; both set must be equal, as the
API server enforces for extended resources) plus node-level ``cpu`` and ``memory`` by Kubernetes' effective-request
rule ``max(Σ app, max init)``, and the GPU selector annotations. Units: core in percent of one GPU → milli-GPU;
memory in ``memory_unit`` units → bytes, or in percentage mode a relative share resolved per GPU
(:mod:`domain.request`). Invariant: bad values raise :class:`InvalidRequestError` naming pod, container, resource
and value (B12); a ``<prefix>/mig-*`` name the shared table does not know is refused with "unknown profile" (B30).
Sources: Kubernetes docs "Extended resources", "Resource sharing within containers"; ``docs/failure-cases.md``.
"""


from __future__ import annotations

import functools

import attrs

from domain.errors import InvalidRequestError
from domain.kube.migresources import RESOURCE_STEM, MigResourceTable, mig_resource_table, resource_prefix
from domain.kube.objects import ContainerSpec, PodObject
from domain.kube.protocol import ProtocolConstants, parse_quantity
from domain.kube.quantity import parse_bytes, parse_cpu_milli
from domain.mig.errors import UnknownMigProfileError
from domain.request import ContainerRequest, GpuSelector, PodRequest
from domain.topology import Tier
from domain.units import MAX_GPU_MEMORY_BYTES, MAX_NODE_QUANTITY, MILLI_PER_PERCENT, PERCENT_PER_GPU


@functools.lru_cache(maxsize=8)
def mig_table(protocol: ProtocolConstants) -> MigResourceTable:
    """The shared MIG resource table of ``protocol`` (every known GPU model; cached): the names pods may ask for
    and the device plugin registers. Raises :class:`InvalidRequestError` when the GPU resource has no prefix."""
    return mig_resource_table(protocol)


@functools.lru_cache(maxsize=8)
def mig_stem(protocol: ProtocolConstants) -> str | None:
    """``<prefix>/mig-``, the stem of every MIG resource name, or None when the GPU resource has no prefix."""
    try:
        return f"{resource_prefix(protocol)}/{RESOURCE_STEM}"
    except InvalidRequestError:
        return None


def _extended(pod: PodObject, spec: ContainerSpec, resource: str) -> int | None:
    """One extended resource of one container: limit (else request) as an integer, or None when absent."""
    field = f"pod[{pod.key}].container[{spec.name}].{resource}"
    limit, request = spec.limits.get(resource), spec.requests.get(resource)
    if None not in (limit, request) and parse_quantity(field, str(limit)) != parse_quantity(field, str(request)):
        raise InvalidRequestError(field, {"requests": request, "limits": limit}, "requests must equal limits")
    text = limit if limit is not None else request
    return None if text is None else parse_quantity(field, text)


def _percent(field: str, value: int | None, *, whole: str) -> int | None:
    """``value`` when it is None or 1..100 (percent of one GPU); ``whole``: the whole-GPU resource, named in the
    reason for more than 100 %. Raises :class:`InvalidRequestError` naming ``field``."""
    if value is not None and value < 1:
        raise InvalidRequestError(field, value, "must be an integer 1..100 (% of one GPU); 0 is not a request")
    if value is not None and value > PERCENT_PER_GPU:
        raise InvalidRequestError(field, value, f"must be an integer 1..100 (% of one GPU): a share cannot exceed "
                                  f"one GPU; ask for whole GPUs with {whole} instead")
    return value


def _mig_ask(pod: PodObject, spec: ContainerSpec, protocol: ProtocolConstants) -> tuple[str | None, int]:
    """The container's MIG ask ``(canonical profile, count)``, ``(None, 0)`` without one (module docstring)."""
    stem = mig_stem(protocol)
    if stem is None:
        return None, 0
    prefix = f"pod[{pod.key}].container[{spec.name}]"
    asks: dict[str, tuple[str, int]] = {}
    for resource in dict.fromkeys([*spec.limits, *spec.requests]):
        if not resource.startswith(stem):
            continue
        try:
            profile = mig_table(protocol).parse(resource)
        except UnknownMigProfileError as error:
            raise InvalidRequestError(f"{prefix}.{resource}", resource, str(error)) from None
        count = _extended(pod, spec, resource) or 0
        if profile is not None and count > 0:
            asks[resource] = (profile, count)
    if len(asks) > 1:
        raise InvalidRequestError(f"{prefix}.mig", sorted(asks),
                                  "a container asks for one MIG profile; split the profiles into containers")
    return next(iter(asks.values()), (None, 0))


def _container(pod: PodObject, spec: ContainerSpec, protocol: ProtocolConstants) -> ContainerRequest:
    names = protocol.resources
    prefix = f"pod[{pod.key}].container[{spec.name}]"
    mig_profile, mig_count = _mig_ask(pod, spec, protocol)
    gpus = _extended(pod, spec, names.gpu) or 0
    core = _percent(f"{prefix}.{names.core}", _extended(pod, spec, names.core), whole=names.gpu)
    memory = _extended(pod, spec, names.memory)
    memory_bytes: int | None = None
    memory_milli: int | None = None
    if memory is not None:
        unit = protocol.memory_unit_bytes
        if unit is None:
            memory_milli = _percent(f"{prefix}.{names.memory}", memory, whole=names.gpu)
            memory_milli = None if memory_milli is None else memory_milli * MILLI_PER_PERCENT
        elif memory < 1:
            raise InvalidRequestError(f"{prefix}.{names.memory}", memory, "must be at least 1; 0 is not a request")
        elif memory * unit > MAX_GPU_MEMORY_BYTES:
            raise InvalidRequestError(
                f"{prefix}.{names.memory}", memory,
                f"must be at most {MAX_GPU_MEMORY_BYTES // unit} (1 PiB in units of {unit} bytes): no GPU has that "
                "much memory")
        else:
            memory_bytes = memory * unit
    if gpus > 0 and (core is not None or memory is not None):
        raise InvalidRequestError(
            f"{prefix}.{names.gpu}", gpus,
            f"whole GPUs cannot be combined with {names.core}/{names.memory}: a whole GPU already grants 100 % core "
            "and all of its memory",
        )
    if mig_profile is not None and (gpus > 0 or core is not None or memory is not None):
        raise InvalidRequestError(
            f"{prefix}.mig", mig_profile,
            f"a container takes either MIG instances or {names.gpu}/{names.core}/{names.memory}, not both",
        )
    return ContainerRequest(
        spec.name,
        gpus=gpus,
        core_milli=None if core is None else core * MILLI_PER_PERCENT,
        memory_bytes=memory_bytes,
        init=spec.init,
        memory_milli=memory_milli,
        mig_profile=mig_profile,
        mig_count=mig_count,
    )


def node_requests(pod: PodObject) -> tuple[int, int]:
    """The pod's effective node-level ``(cpu milli-cores, memory bytes)``: per container the request (else the
    limit, which the API server copies into requests), then ``max(Σ app, max init)``. Raises
    :class:`InvalidRequestError` naming the container and resource for a malformed quantity or one above
    ``MAX_NODE_QUANTITY``."""
    app_cpu = app_mem = init_cpu = init_mem = 0
    for spec in pod.containers:
        values = []
        for resource, parse in (("cpu", parse_cpu_milli), ("memory", parse_bytes)):
            text = spec.requests.get(resource, spec.limits.get(resource))
            field = f"pod[{pod.key}].container[{spec.name}].{resource}"
            value = 0 if text is None else parse(field, text)
            if value > MAX_NODE_QUANTITY:
                unit = "milli-cores" if resource == "cpu" else "bytes"
                raise InvalidRequestError(field, text, f"must be at most {MAX_NODE_QUANTITY} {unit}: no node has "
                                          "that much")
            values.append(value)
        cpu, mem = values
        if spec.init:
            init_cpu, init_mem = max(init_cpu, cpu), max(init_mem, mem)
        else:
            app_cpu, app_mem = app_cpu + cpu, app_mem + mem
    return max(app_cpu, init_cpu), max(app_mem, init_mem)


def _csv(text: str | None) -> tuple[str, ...]:
    items = [part.strip() for part in (text or "").split(",")]
    return tuple(dict.fromkeys(item for item in items if item))


def pod_selector(pod: PodObject, protocol: ProtocolConstants) -> GpuSelector:
    """GPU selector from the pod's annotations: models (comma-separated allow-list), GPU UUIDs to use, GPU UUIDs
    to avoid. Blank entries are ignored."""
    keys = protocol.annotations
    return GpuSelector(
        models=_csv(pod.annotations.get(keys.pod_gpu_models)),
        include_uuids=frozenset(_csv(pod.annotations.get(keys.pod_gpu_uuids))),
        exclude_uuids=frozenset(_csv(pod.annotations.get(keys.pod_gpu_uuids_exclude))),
    )


def pod_gpu_topology(pod: PodObject, protocol: ProtocolConstants) -> Tier:
    """The connection the pod's whole GPUs must have, from its ``pod_gpu_topology`` annotation (``nvlink``,
    ``pcie-root``, ``numa`` or ``system``; absent or blank: ``system``, no requirement). Raises
    :class:`InvalidRequestError` naming the pod and the annotation for another value."""
    key = protocol.annotations.pod_gpu_topology
    text = (pod.annotations.get(key) or "").strip()
    return Tier.parse(f"pod[{pod.key}].annotations[{key}]", text) if text else Tier.SYSTEM


def _unserved(spec: ContainerSpec, served: tuple[tuple[str, str], ...]) -> ContainerSpec:
    """``spec`` without the extended resources a claim serves (``PodObject.claim_served``): the claim kube-scheduler
    made for them is booked as a claim, so the container's own ask would count them twice."""
    gone = {resource for container, resource in served if container == spec.name}
    if not gone:
        return spec
    return attrs.evolve(spec, requests={k: v for k, v in spec.requests.items() if k not in gone},
                        limits={k: v for k, v in spec.limits.items() if k not in gone})


def pod_request(pod: PodObject, protocol: ProtocolConstants) -> PodRequest:
    """The :class:`PodRequest` of ``pod`` (module docstring).

    Raises :class:`InvalidRequestError` naming pod, container, resource and value for: non-integer extended
    quantities (``50.5``, ``500m``), negative values, core 0 or > 100, memory 0 or above 1 PiB (in percentage
    mode: 0 or > 100), cpu or memory above ``MAX_NODE_QUANTITY``, requests ≠ limits, whole GPUs combined with
    core/memory, malformed cpu/memory quantities, an empty UID or duplicate container names; and for MIG: a
    ``<prefix>/mig-*`` name the shared table does not know (reason: the table's "unknown profile" message, with
    the canonical name when an alias was spelled; B30), two MIG profiles in one container, MIG combined with our
    time-sharing resources in one container or one pod; an unknown ``pod_gpu_topology`` value.
    ``gpu=0`` next to core/memory is a plain share; a MIG amount 0 is no ask. Resources a claim serves
    (``PodObject.claim_served``) are left out: the claim is booked as one.
    """
    containers = tuple(_container(pod, _unserved(spec, pod.claim_served), protocol) for spec in pod.containers)
    cpu, memory = node_requests(pod)
    return PodRequest(
        uid=pod.uid,
        containers=containers,
        namespace=pod.namespace,
        name=pod.name,
        cpu_milli=cpu,
        memory_bytes=memory,
        selector=pod_selector(pod, protocol),
        gpu_topology=pod_gpu_topology(pod, protocol),
    )
