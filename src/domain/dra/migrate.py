"""Classic GPU requests turned into DRA claims: the mapping behind the ``ljrk claim-migrate`` mutating webhook.

A pod written for the classic resources (``resources.core`` = ``gpu-core.percentage``, percent of one GPU;
``resources.memory`` = ``gpu-memory``, units of the protocol's memory unit; ``resources.gpu`` = whole GPUs) is
parsed once by the classic parser (:func:`domain.kube.translate.pod_request`, so it is refused exactly where the
classic path refuses it), then each container asking for GPUs gets one claim from a ResourceClaimTemplate of its
shape (:class:`ClaimShape`):

* a share ``P`` % / ``M`` units → DeviceClass ``dra.device-class-share``, one device, capacity requests
  ``cores: P`` and ``memory: M × unit`` bytes: the consumable capacity of one GPU (:mod:`domain.dra.build`), as the
  classic path books ``P × 10`` milli-GPU and ``M × unit`` bytes on one GPU;
* ``N`` whole GPUs → DeviceClass ``dra.device-class-gpu``, ``allocationMode: ExactCount``, ``count: N`` (no
  capacity request: each device is taken whole), as the classic path grants ``N`` whole GPUs of one node.

:func:`plan_migration` returns the templates to ensure and the JSONPatch operations (RFC 6902, as plain data) that
remove the classic resources from the container's ``requests``/``limits``, add the pod-level
``spec.resourceClaims`` entry ``{name, resourceClaimTemplateName}`` and the container's ``resources.claims``.

**Refused** (:class:`MigrationRefusedError`, one line naming the pod, container, field and value, and what to do) is
what no claim expresses the way the classic path places it: a request the classic parser refuses; a share with
core but no memory or memory but no core (the classic path sizes the missing half from the granted GPU, which a
capacity request cannot); memory in percent mode (``memory-unit: 1%``, relative to the granted GPU); a GPU ask in
an init container (a claim is held for the pod's life, the classic path books ``max(Σ app, max init)``); MIG
resources (a MIG DeviceClass claim is the way: the message names the class); the GPU selector and topology
annotations (the classic path filters GPUs by them, the claim would not); a GPU container that already has claims,
or a claim name the pod already uses. Invariant: the operations apply to the reviewed pod as given (paths exist, or
are added whole), and a pod asking no classic resource gets no operation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from domain.errors import DomainError, InvalidRequestError
from domain.kube.objects import ContainerSpec, PodObject
from domain.kube.protocol import ProtocolConstants, mig_device_class
from domain.kube.translate import pod_request
from domain.request import ContainerRequest, GpuKind, PodRequest
from domain.topology import Tier
from domain.units import MILLI_PER_PERCENT, GiB, MiB

TEMPLATE_PREFIX = "ljrk-migrate"
"""Prefix of every template name this mapping makes (``ljrk-migrate-share-30-4gi``, ``ljrk-migrate-gpu-2``)."""
REQUEST_NAME = "gpu"
"""The name of the one device request of every template."""
MANAGED_BY = "lj-runtimekit-claim-migrate"
"""``app.kubernetes.io/managed-by`` of the templates."""
MAX_NAME = 63
"""Longest pod claim name (``spec.resourceClaims[].name`` is a DNS label)."""
DOCS = "docs/migrate.md"


class MigrationRefusedError(DomainError):
    """The pod cannot be migrated; the message (one line) names pod, container, field and value and what to do."""


def quantity(value: int) -> str:
    """Bytes as a Kubernetes quantity: exact ``Gi``/``Mi`` when divisible, else the plain integer."""
    if value % GiB == 0:
        return f"{value // GiB}Gi"
    if value % MiB == 0:
        return f"{value // MiB}Mi"
    return str(value)


@attrs.frozen
class ClaimShape:
    """One claim's request: ``device_class``; ``count`` devices (whole GPUs; 1 for a share); a share's ``cores``
    (percent of one GPU, 1..100) and ``memory_bytes`` (bytes, ≥ 1), both or neither. Raises
    :class:`InvalidRequestError` naming the field for a count below 1, cores outside 1..100, memory below 1 byte,
    one half of a share without the other, or a share of more than one device."""

    device_class: str
    count: int = 1
    cores: int | None = None
    memory_bytes: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.count < 1:
            raise InvalidRequestError("claim.count", self.count, "must be at least 1")
        if (self.cores is None) != (self.memory_bytes is None):
            raise InvalidRequestError("claim.capacity", (self.cores, self.memory_bytes), "a share needs both")
        if self.cores is not None and not 1 <= self.cores <= 100:
            raise InvalidRequestError("claim.cores", self.cores, "must be 1..100 (% of one GPU)")
        if self.memory_bytes is not None and self.memory_bytes < 1:
            raise InvalidRequestError("claim.memory_bytes", self.memory_bytes, "must be at least 1 byte")
        if self.share and self.count != 1:
            raise InvalidRequestError("claim.count", self.count, "a share takes one device")

    @property
    def share(self) -> bool:
        """True for a share of one GPU (capacity requests), False for whole GPUs."""
        return self.cores is not None

    @property
    def template_name(self) -> str:
        """The template's name: a function of the shape only, so equal shapes share one template per namespace."""
        if self.share:
            assert self.memory_bytes is not None
            return f"{TEMPLATE_PREFIX}-share-{self.cores}-{quantity(self.memory_bytes).lower()}"
        return f"{TEMPLATE_PREFIX}-gpu-{self.count}"

    def template_spec(self) -> dict[str, Any]:
        """``ResourceClaimTemplate.spec`` (``resource.k8s.io/v1`` JSON): the claim's one device request."""
        exactly: dict[str, Any] = {"deviceClassName": self.device_class, "allocationMode": "ExactCount",
                                   "count": self.count}
        if self.share:
            assert self.memory_bytes is not None
            exactly["capacity"] = {"requests": {"cores": str(self.cores), "memory": quantity(self.memory_bytes)}}
        return {"metadata": {"labels": {"app.kubernetes.io/managed-by": MANAGED_BY}},
                "spec": {"devices": {"requests": [{"name": REQUEST_NAME, "exactly": exactly}]}}}


def describe(shape: ClaimShape) -> str:
    """``shape`` in words, for messages: ``class C, 1 device, cores 30, memory 4Gi`` or ``class C, 2 devices``."""
    text = f"class {shape.device_class}, {shape.count} device{'s' if shape.count != 1 else ''}"
    if shape.share:
        assert shape.memory_bytes is not None
        text += f", cores {shape.cores}, memory {quantity(shape.memory_bytes)}"
    return text


@attrs.frozen
class PodFacts:
    """What the mapping reads of a pod under review: ``pod`` (its containers, init ones flagged, in spec order:
    init first); ``label`` (how messages name it: ``namespace/name``, or the generateName); ``pod_claims``: the
    names in ``spec.resourceClaims``, None when the field is absent; ``claimed``: names of containers whose
    ``resources.claims`` is not empty."""

    pod: PodObject
    label: str
    pod_claims: tuple[str, ...] | None = None
    claimed: frozenset[str] = frozenset()


@attrs.frozen
class Migration:
    """The answer for one pod: ``templates`` to ensure in its namespace (distinct, in container order),
    ``patch`` (JSONPatch operations), ``claims``: container name → claim shape (what the docs call the mapping)."""

    templates: tuple[ClaimShape, ...] = ()
    patch: tuple[Mapping[str, Any], ...] = ()
    claims: Mapping[str, ClaimShape] = attrs.field(factory=dict)

    @property
    def changes(self) -> bool:
        """True when the pod is mutated."""
        return bool(self.patch)


def _pointer(*parts: str | int) -> str:
    """A JSON pointer (RFC 6901): ``~`` → ``~0``, ``/`` → ``~1`` in each part."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _refuse(facts: PodFacts, where: str, reason: str) -> MigrationRefusedError:
    return MigrationRefusedError(f"pod {facts.label}: {where}: {reason} (see {DOCS})")


def _selectors(facts: PodFacts, request: PodRequest, protocol: ProtocolConstants) -> None:
    """Refuse the GPU selector and topology annotations the classic parser read into ``request``."""
    keys = protocol.annotations
    selector = request.selector
    used = ((keys.pod_gpu_models, bool(selector.models)), (keys.pod_gpu_uuids, bool(selector.include_uuids)),
            (keys.pod_gpu_uuids_exclude, bool(selector.exclude_uuids)),
            (keys.pod_gpu_topology, request.gpu_topology is not Tier.SYSTEM))
    for key, set_ in used:
        if set_:
            raise _refuse(facts, f"annotation {key}={facts.pod.annotations.get(key, '')!r}",
                          "the classic path picks GPUs by it and a migrated claim would not; remove the annotation, "
                          "or write the ResourceClaim yourself with a CEL selector on the device's attributes")


def _shape(facts: PodFacts, request: ContainerRequest, spec: ContainerSpec,
           protocol: ProtocolConstants) -> ClaimShape:
    """The claim shape of one container asking GPUs (``request``, parsed from ``spec``), or the refusal of the module
    docstring. Raises :class:`MigrationRefusedError`."""
    names, dra = protocol.resources, protocol.dra
    where = f"container {request.name}"
    if request.wants_mig:
        assert request.mig_profile is not None
        asked = sorted(r for r in (*spec.limits, *spec.requests) if "/mig-" in r)
        return _raise(facts, f"{where}: {asked[0] if asked else 'mig'}={request.mig_count}",
                      f"MIG instances are not migrated; ask a ResourceClaim of DeviceClass "
                      f"{mig_device_class(dra, request.mig_profile)} (count {request.mig_count}) instead")
    if request.init:
        return _raise(facts, f"init {where}", "asks GPU resources, but a claim is held for the pod's whole life "
                      "while the classic path books max(sum of app containers, max of init containers); move the GPU "
                      "request to an app container")
    if request.name in facts.claimed:
        return _raise(facts, f"{where}: resources.claims", "already uses ResourceClaims next to classic GPU "
                      f"resources; ask the GPU through a claim too and drop {names.gpu}/{names.core}/{names.memory}")
    if request.kind is GpuKind.WHOLE:
        return ClaimShape(dra.device_class_gpu, count=request.gpus)
    if request.memory_milli is not None:
        return _raise(facts, f"{where}: {names.memory}={request.memory_milli // MILLI_PER_PERCENT}",
                      f"memory in percent of the granted GPU (memory-unit 1%) has no claim form; write a claim of "
                      f"DeviceClass {dra.device_class_share} with capacity requests in bytes")
    unit = protocol.memory_unit
    if request.core_milli is None:
        return _raise(facts, f"{where}: {names.memory}={spec.limits.get(names.memory, spec.requests.get(names.memory))}"
                      f" without {names.core}", f"the classic path derives the core share from the granted GPU's "
                      f"memory, which a claim cannot; add {names.core} (percent of one GPU, 1..100)")
    if request.memory_bytes is None:
        return _raise(facts, f"{where}: {names.core}={request.core_milli // MILLI_PER_PERCENT} without {names.memory}",
                      f"the classic path gives memory in proportion to the granted GPU's, which a claim cannot; add "
                      f"{names.memory} (units of {unit})")
    return ClaimShape(dra.device_class_share, cores=request.core_milli // MILLI_PER_PERCENT,
                      memory_bytes=request.memory_bytes)


def _raise(facts: PodFacts, where: str, reason: str) -> ClaimShape:
    """Raise the refusal (typed as a shape so :func:`_shape` returns it in one expression)."""
    raise _refuse(facts, where, reason)


def _claim_name(container: str, index: int) -> str:
    """``gpu-<container>``, or ``gpu-<index>`` (the container's index in ``spec.containers``) when that is longer
    than a DNS label."""
    name = f"gpu-{container}"
    return name if len(name) <= MAX_NAME else f"gpu-{index}"


def plan_migration(facts: PodFacts, protocol: ProtocolConstants) -> Migration:
    """The migration of ``facts.pod`` under ``protocol`` (module docstring). Raises :class:`MigrationRefusedError`."""
    try:
        request = pod_request(facts.pod, protocol)
    except InvalidRequestError as error:
        raise _refuse(facts, error.field, f"{error.value!r}: {error.reason}; fix the request") from error
    asking = [c for c in request.containers if c.kind is not GpuKind.NONE or c.wants_mig]
    if not asking:
        return Migration()
    _selectors(facts, request, protocol)
    specs = {spec.name: spec for spec in facts.pod.containers}
    shapes = {c.name: _shape(facts, c, specs[c.name], protocol) for c in asking}
    taken = set(facts.pod_claims or ())
    names = protocol.resources
    patch: list[Mapping[str, Any]] = []
    entries: list[dict[str, str]] = []
    apps = [spec for spec in facts.pod.containers if not spec.init]
    for index, spec in enumerate(apps):
        shape = shapes.get(spec.name)
        if shape is None:
            continue
        claim = _claim_name(spec.name, index)
        if claim in taken:
            raise _refuse(facts, f"spec.resourceClaims[{claim}]", "the pod already has a claim of the name this "
                          f"webhook gives container {spec.name}'s GPUs; rename that claim")
        taken.add(claim)
        for field, given in (("requests", spec.requests), ("limits", spec.limits)):
            patch.extend({"op": "remove", "path": _pointer("spec", "containers", index, "resources", field, r)}
                         for r in (names.gpu, names.core, names.memory) if r in given)
        patch.append({"op": "add", "path": _pointer("spec", "containers", index, "resources", "claims"),
                      "value": [{"name": claim}]})
        entries.append({"name": claim, "resourceClaimTemplateName": shape.template_name})
    if facts.pod_claims is None:
        patch.append({"op": "add", "path": "/spec/resourceClaims", "value": entries})
    else:
        patch.extend({"op": "add", "path": "/spec/resourceClaims/-", "value": entry} for entry in entries)
    templates = tuple({s.template_name: s for s in shapes.values()}.values())
    return Migration(templates=templates, patch=tuple(patch), claims=shapes)
