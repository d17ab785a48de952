"""Protocol constants every component must agree on (the content of the ``protocol.yaml`` ConfigMap).

Resource names, the memory unit, the node label key, annotation keys, the scheduler name and the DRA driver's
names (:class:`DraNames`: driver and DeviceClasses). Components load
one :class:`ProtocolConstants` at start and publish its :meth:`fingerprint`, so disagreeing components are
detected (a node whose device plugin runs another protocol gets no GPU pods).

``memory_unit`` is a Kubernetes quantity: ``1Gi`` (default) means one unit of the memory resource is 1 GiB;
``1%`` selects percentage mode, where the memory resource counts percent of one GPU's memory and its name must
end in ``.percentage``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re

import attrs

from domain.errors import InvalidRequestError

PROTOCOL_VERSION = 1
"""Version of the protocol schema (keys and meaning); bump only with a compatible migration."""

_QUANTITY = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
MAX_QUANTITY_DIGITS = 40
"""Most digits a quantity's number may have (both parsers). Longer numbers name no real resource, and Python refuses
to convert more than 4300 digits to an int (a raw ``ValueError``), so they are refused with the field named."""
_FACTORS = {
    None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
}


def parse_quantity(field: str, text: str) -> int:
    """Parse an integer Kubernetes quantity (``16Gi``, ``500M``, ``100``) to an int (bytes or count).

    Only integral values are accepted: fractions (``0.5``) and milli (``500m``) are rejected — extended resources must
    be integers (Kubernetes docs, "Extended resources"). Raises :class:`InvalidRequestError` naming ``field`` (also for
    more than :data:`MAX_QUANTITY_DIGITS` digits).
    """
    value = _integer_quantity(text) if isinstance(text, str) else None
    if value is not None:
        return value
    match = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise InvalidRequestError(field, text, "must be a non-negative integer quantity such as 8, 16Gi or 500M")
    if len(match.group(1)) > MAX_QUANTITY_DIGITS:
        raise InvalidRequestError(field, text, f"more than {MAX_QUANTITY_DIGITS} digits: no resource is that large")
    return int(match.group(1)) * _FACTORS[match.group(2)]


@functools.lru_cache(maxsize=4096)
def _integer_quantity(text: str) -> int | None:
    """:func:`parse_quantity` of a valid ``text`` (memoised: pods repeat a few amounts), None when invalid (the
    caller parses again to raise the error naming its field)."""
    match = _QUANTITY.match(text.strip())
    if match is None or len(match.group(1)) > MAX_QUANTITY_DIGITS:
        return None
    return int(match.group(1)) * _FACTORS[match.group(2)]


@attrs.frozen
class ResourceNames:
    """Extended resource names: whole GPUs, core percent, memory (in ``memory_unit`` units)."""

    gpu: str = "alibabacloud.com/gpu"
    core: str = "alibabacloud.com/gpu-core.percentage"
    memory: str = "alibabacloud.com/gpu-memory"


@attrs.frozen
class AnnotationKeys:
    """Annotation keys. ``node_*`` live on Nodes, ``pod_*`` on Pods.

    ``node_protocol`` and ``node_exporter_protocol`` hold the :meth:`ProtocolConstants.fingerprint` the node's
    device plugin and exporter loaded (the scheduler keeps GPU pods off a node where either differs from its own).
    ``pod_allocated`` is written by the device plugin once every container of a pod got its devices (epoch
    seconds); until then the scheduler binds no second pod with an identical GPU request to that node, because
    kubelet's Allocate could not tell the two apart (:mod:`domain.device_plugin.matching`).
    ``node_state`` holds the node's Runtime toggle state written by the controller (``disabled``, ``enabling``,
    ``enabled``, ``disabling``, ``failed``; :mod:`domain.toggle`); the scheduler gives GPU pods only to nodes
    without it or in ``enabled`` with the enable label ``true``. ``node_toggle`` holds the controller's detail
    for that state (JSON: target, tries, Job generation, last error), so a restarted controller resumes.
    ``pod_gpu_topology`` on a pod asking for whole GPUs requires a connected set: ``nvlink``, ``pcie-root`` or
    ``numa`` (the least :class:`domain.topology.Tier` its GPUs may have; ``system`` is no requirement).
    """

    node_inventory: str = "lj-runtimekit.io/gpu-inventory"
    node_protocol: str = "lj-runtimekit.io/protocol-fingerprint"
    node_exporter_protocol: str = "lj-runtimekit.io/exporter-protocol-fingerprint"
    node_state: str = "lj-runtimekit.io/runtime-state"
    node_toggle: str = "lj-runtimekit.io/runtime-toggle"
    pod_plan: str = "lj-runtimekit.io/gpu-plan"
    pod_allocated: str = "lj-runtimekit.io/gpu-allocated"
    pod_policy: str = "lj-runtimekit.io/scheduling-policy"
    pod_gpu_models: str = "lj-runtimekit.io/gpu-models"
    pod_gpu_uuids: str = "lj-runtimekit.io/gpu-uuids"
    pod_gpu_uuids_exclude: str = "lj-runtimekit.io/gpu-uuids-exclude"
    pod_gpu_topology: str = "lj-runtimekit.io/gpu-topology"


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
PROFILE_PLACEHOLDER = "{profile}"
"""What :attr:`DraNames.device_class_mig` holds in place of a MIG profile (:func:`mig_device_class`)."""


@attrs.frozen
class DraNames:
    """Names of the Dynamic Resource Allocation driver (``resource.k8s.io/v1``) every component agrees on.

    ``driver``: the DRA driver name (``ResourceSlice.spec.driver``, a DNS subdomain, at most 63 characters as
    the API requires). ``device_class_gpu``: the DeviceClass of a whole GPU; ``device_class_share``: the
    DeviceClass of a share of one GPU (consumable capacity ``cores`` and ``memory``); ``device_class_mig``: the
    pattern of the per-profile MIG DeviceClasses, with :data:`PROFILE_PLACEHOLDER` where the profile goes in its
    DNS form (:func:`mig_device_class`). Every class name is a DNS subdomain of at most 253 characters.
    ``claim_quota_cores`` and ``claim_quota_memory``: the Namespace label keys that limit what the namespace's
    claims of the driver consume (``docs/quota.md``, :mod:`domain.dra.quota`): cores in percent of one GPU, memory
    as a quantity; each a qualified label key (``prefix/name``: a DNS subdomain, ``/``, at most 63 characters).
    ``claim_migrate``: the Namespace label key opting a namespace into the claim-migrate webhook (value
    ``enabled``; ``docs/migrate.md``, :mod:`domain.dra.migrate`), a qualified label key too.
    Raises :class:`InvalidRequestError` naming ``dra.<field>`` for a name that is not one, a MIG pattern without
    exactly one placeholder, two classes of the same name, a quota key that is no label key, and two equal keys.
    """

    driver: str = "gpu.lj-runtimekit.io"
    device_class_gpu: str = "gpu.lj-runtimekit.io"
    device_class_share: str = "gpu-share.lj-runtimekit.io"
    device_class_mig: str = "mig-{profile}.lj-runtimekit.io"
    claim_quota_cores: str = "lj-runtimekit.io/claim-quota-cores"
    claim_quota_memory: str = "lj-runtimekit.io/claim-quota-memory"
    claim_migrate: str = "lj-runtimekit.io/dra-migrate"

    def __attrs_post_init__(self) -> None:
        if self.device_class_mig.count(PROFILE_PLACEHOLDER) != 1:
            raise InvalidRequestError("dra.device_class_mig", self.device_class_mig,
                                      f"must hold {PROFILE_PLACEHOLDER} exactly once")
        checks = (("driver", self.driver, 63), ("device_class_gpu", self.device_class_gpu, 253),
                  ("device_class_share", self.device_class_share, 253),
                  ("device_class_mig", self.device_class_mig.replace(PROFILE_PLACEHOLDER, "1g-10gb"), 253))
        for field, value, limit in checks:
            if not isinstance(value, str) or len(value) > limit or not _DNS_SUBDOMAIN.match(value):
                raise InvalidRequestError(f"dra.{field}", value,
                                          f"must be a lower-case DNS subdomain of at most {limit} characters")
        if self.device_class_gpu == self.device_class_share:
            raise InvalidRequestError("dra.device_class_share", self.device_class_share,
                                      "same name as dra.device-class-gpu; each must differ")
        for field, value in (("claim_quota_cores", self.claim_quota_cores),
                             ("claim_quota_memory", self.claim_quota_memory), ("claim_migrate", self.claim_migrate)):
            if not is_label_key(value):
                raise InvalidRequestError(f"dra.{field}", value, "must be a qualified label key: a DNS subdomain "
                                          "prefix, '/', and a name of at most 63 characters")
        if self.claim_quota_cores == self.claim_quota_memory:
            raise InvalidRequestError("dra.claim_quota_memory", self.claim_quota_memory,
                                      "same key as dra.claim-quota-cores; each must differ")
        if self.claim_migrate in (self.claim_quota_cores, self.claim_quota_memory):
            raise InvalidRequestError("dra.claim_migrate", self.claim_migrate,
                                      "same key as a dra.claim-quota-* key; each must differ")


_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def is_label_key(key: object) -> bool:
    """True for a qualified Kubernetes label key ``prefix/name``: the prefix a lower-case DNS subdomain of at
    most 253 characters, the name at most 63 alphanumerics, ``-``, ``_`` or ``.``, starting and ending
    alphanumeric. The prefix is required: unprefixed keys belong to users."""
    if not isinstance(key, str):
        return False
    prefix, slash, name = key.rpartition("/")
    return (bool(slash) and 0 < len(prefix) <= 253 and _DNS_SUBDOMAIN.match(prefix) is not None
            and len(name) <= 63 and _LABEL_NAME.match(name) is not None)


def mig_device_class(names: DraNames, profile: str) -> str:
    """The DeviceClass of MIG ``profile`` (canonical name such as ``1g.10gb`` or ``1g.10gb+me``): the pattern
    with the profile's DNS form (``.`` and ``+`` become ``-``: ``mig-1g-10gb-me.lj-runtimekit.io``)."""
    return names.device_class_mig.replace(PROFILE_PLACEHOLDER, dns_profile(profile))


def dns_profile(profile: str) -> str:
    """A MIG profile name as a DNS label part: lower case, ``.`` and ``+`` as ``-`` (``1g.10gb+me`` →
    ``1g-10gb-me``)."""
    return profile.lower().replace(".", "-").replace("+", "-")


@attrs.frozen(cache_hash=True)  # a memo key on every pod (MIG stem, MIG table, fingerprint): hashed once
class ProtocolConstants:
    """All shared constants. Raises :class:`InvalidRequestError` (field dotted, e.g. ``resources.gpu``) for a
    bad memory unit, a percentage unit whose memory resource name does not end in ``.percentage``, an empty name
    or one with whitespace, and two resources (or two annotations) sharing a name."""

    version: int = PROTOCOL_VERSION
    resources: ResourceNames = ResourceNames()
    memory_unit: str = "1Gi"
    node_label: str = "lj_runtimekit_enable"
    scheduler_name: str = "lj-runtimekit-scheduler"
    annotations: AnnotationKeys = AnnotationKeys()
    enforcement_label: str = "lj-runtimekit.io/share-enforcement"
    inventory_stale_seconds: int = 60
    dra: DraNames = DraNames()

    def __attrs_post_init__(self) -> None:
        if self.version != PROTOCOL_VERSION:
            raise InvalidRequestError("version", self.version, f"this build speaks protocol {PROTOCOL_VERSION}")
        names = {"node_label": self.node_label, "scheduler_name": self.scheduler_name,
                 "enforcement_label": self.enforcement_label}
        for group, values in (("resources", self.resources), ("annotations", self.annotations)):
            seen: dict[str, str] = {}
            for field in attrs.fields(type(values)):
                name, value = f"{group}.{field.name}", getattr(values, field.name)
                if value in seen:
                    raise InvalidRequestError(name, value, f"same name as {seen[value]}; each must differ")
                seen[value] = name.replace("_", "-")  # as protocol.yaml spells it
                names[name] = value
        for name, value in names.items():
            if not value or any(char.isspace() for char in value):
                raise InvalidRequestError(name, value, "must be a non-empty name without whitespace")
        if self.percent_mode:
            if not self.resources.memory.endswith(".percentage"):
                raise InvalidRequestError(
                    "resources.memory", self.resources.memory, "memory-unit 1% needs a name ending in .percentage"
                )
        elif parse_quantity("memory_unit", self.memory_unit) <= 0:
            raise InvalidRequestError("memory_unit", self.memory_unit, "must be > 0")
        if self.inventory_stale_seconds <= 0:
            raise InvalidRequestError("inventory_stale_seconds", self.inventory_stale_seconds, "must be > 0")

    @property
    def percent_mode(self) -> bool:
        """True when the memory resource counts percent of one GPU's memory (``memory_unit: 1%``)."""
        return self.memory_unit.strip() == "1%"

    @property
    def memory_unit_bytes(self) -> int | None:
        """Bytes per memory unit, or None in percent mode."""
        return None if self.percent_mode else parse_quantity("memory_unit", self.memory_unit)

    def fingerprint(self) -> str:
        """First 16 hex digits of SHA-256 over the canonical JSON of every constant (stable across runs)."""
        return _fingerprint(self)


@functools.lru_cache(maxsize=8)
def _fingerprint(protocol: ProtocolConstants) -> str:
    """:meth:`ProtocolConstants.fingerprint`, computed once per (frozen, hashable) set of constants."""
    canonical = json.dumps(attrs.asdict(protocol), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
