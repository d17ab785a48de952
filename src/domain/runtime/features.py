"""Runtime versions and the feature table: which contract feature needs which minimum Runtime version.

A Runtime reports a semantic version and a capability list through ``GetVersion``. Components call it at start
and refuse, with a clear error, any feature they need that the Runtime lacks: either its version is
below the feature's minimum in :data:`RUNTIME_FEATURES`, or it does not advertise the feature. A new feature gets
a row here with the first Runtime version that serves it; rows are never removed or lowered (the same "only add,
never change" policy as the protos).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType

import attrs

from domain.errors import InvalidRequestError
from domain.runtime.errors import UnknownFeatureError, UnsupportedFeatureError

_SEMVER = re.compile(
    r"^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)


@attrs.frozen(order=False)
class SemVer:
    """A semantic version ``MAJOR.MINOR.PATCH[-PRERELEASE]`` (build metadata is dropped, as SemVer 2.0.0 §10
    says it has no precedence). A pre-release sorts before its release; pre-release identifiers compare as
    strings (enough for ``rc1`` < ``rc2``; not the full §11 rules)."""

    major: int
    minor: int
    patch: int
    prerelease: str = ""

    @classmethod
    def parse(cls, text: str) -> SemVer:
        """``"1.2.3"``, ``"v1.2.3"`` or ``"1.2.3-rc.1+build"``. Raises :class:`InvalidRequestError` (field
        ``runtime.version``) for anything else."""
        match = _SEMVER.match(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise InvalidRequestError("runtime.version", text, "must be a semantic version MAJOR.MINOR.PATCH")
        return cls(int(match.group(1)), int(match.group(2)), int(match.group(3)), match.group(4) or "")

    def _key(self) -> tuple[int, int, int, int, str]:
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, self.prerelease)

    def __lt__(self, other: SemVer) -> bool:
        return self._key() < other._key()

    def __le__(self, other: SemVer) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: SemVer) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: SemVer) -> bool:
        return self._key() >= other._key()

    def __str__(self) -> str:
        core = f"{self.major}.{self.minor}.{self.patch}"
        return f"{core}-{self.prerelease}" if self.prerelease else core


@attrs.frozen
class Feature:
    """One contract feature: ``name`` (the capability string), ``minimum`` Runtime version, ``summary``."""

    name: str
    minimum: SemVer
    summary: str


def _table(*features: Feature) -> Mapping[str, Feature]:
    return MappingProxyType({f.name: f for f in features})


V1_0 = SemVer(1, 0, 0)
V1_1 = SemVer(1, 1, 0)
V1_2 = SemVer(1, 2, 0)

RUNTIME_FEATURES: Mapping[str, Feature] = _table(
    Feature("inventory", V1_0, "ListDevices: GPU inventory with health"),
    Feature("health-watch", V1_0, "WatchHealth: snapshot then health changes as a server stream"),
    Feature("allocate", V1_0, "Allocate: one container, idempotent per pod UID + container"),
    Feature("release", V1_0, "Release: forget a pod's (or one container's) allocation records"),
    Feature("exporter-data", V1_0, "ExporterGetDataList: per-GPU and per-container raw data"),
    Feature("config-service", V1_0, "ConfigService: Enable, Disable, GetStatus, persisted across restarts"),
    Feature("hami-core-env", V1_0, "Allocate returns CUDA_DEVICE_MEMORY_LIMIT_<i> and CUDA_DEVICE_SM_LIMIT"),
    Feature("mig-partitions", V1_1, "MIG partitions served: the 1.0 plan's umbrella name, advertised together with "
            "mig-inventory and mig-allocate"),
    Feature("mig-inventory", V1_1, "ListDevices reports each MIG GPU's instances: GPU/compute instance ids, profile, "
            "placement start and size, memory, MIG UUID, owner"),
    Feature("mig-allocate", V1_1, "Allocate hands out existing MIG instances (NVIDIA_VISIBLE_DEVICES=MIG-<uuid>)"),
    Feature("mig-dynamic", V1_1, "Allocate creates MIG instances at a placement and Release destroys them "
            "(Runtime started with --mig-strategy dynamic)"),
    Feature("mig-exporter-data", V1_1, "ExporterGetDataList reports one row per MIG instance (profile, ids, memory, "
            "owner)"),
    Feature("share-enforcement-none", V1_1, "a share is accounting only: no library enforces its limits"),
    Feature("share-enforcement-hami-core", V1_1, "HAMi-core, preloaded into each container, enforces a share"),
    Feature("share-enforcement-mps", V1_1, "the CUDA MPS control daemon enforces a share"),
    Feature("share-enforcement-mig", V1_1, "every GPU is in MIG mode: grants are hardware-isolated instances"),
    Feature("gpu-topology", V1_2, "ListDevices reports each GPU's NUMA node, PCIe root and NVLink peers "
            "(Device.topology)"),
)
"""Feature name → :class:`Feature`; read-only."""

CONTRACT_VERSION: SemVer = max(feature.minimum for feature in RUNTIME_FEATURES.values())
"""The Runtime contract version this build speaks: the newest Runtime version in :data:`RUNTIME_FEATURES` (1.2.0),
which is the Runtime version this release of the components follows (``ljrk --version`` prints it)."""

OLDEST_RUNTIME: SemVer = min(feature.minimum for feature in RUNTIME_FEATURES.values())
"""The oldest node Runtime the components work with (1.0.0); features added later need the version that added
them, checked at start with :meth:`RuntimeInfo.require`."""


def _feature(name: str) -> Feature:
    try:
        return RUNTIME_FEATURES[name]
    except KeyError:
        known = ", ".join(sorted(RUNTIME_FEATURES))
        raise UnknownFeatureError(f"feature {name!r} is not in RUNTIME_FEATURES; known: {known}") from None


def require_feature(version: SemVer | str, feature: str) -> None:
    """Raise :class:`UnsupportedFeatureError` when a Runtime at ``version`` is older than ``feature``'s minimum.

    ``version`` is a :class:`SemVer` or its text. Raises :class:`UnknownFeatureError` for a name that is not in
    :data:`RUNTIME_FEATURES` and :class:`InvalidRequestError` for an unparsable version.
    """
    spec = _feature(feature)
    current = version if isinstance(version, SemVer) else SemVer.parse(version)
    if current < spec.minimum:
        raise UnsupportedFeatureError(
            f"node Runtime {current} lacks feature {feature!r} ({spec.summary}): it needs Runtime >= {spec.minimum}; "
            "upgrade the node Runtime or turn the feature off"
        )


@attrs.frozen
class RuntimeInfo:
    """What ``GetVersion`` reports: ``name`` (implementation), ``version``, ``capabilities`` (feature names it
    serves) and ``backend`` (``nvml``, ``simulated``, …)."""

    name: str
    version: SemVer
    capabilities: frozenset[str]
    backend: str = ""

    def supports(self, feature: str) -> bool:
        """True when the version is new enough and the feature is advertised. Raises UnknownFeatureError."""
        try:
            self.require(feature)
        except UnsupportedFeatureError:
            return False
        return True

    def require(self, *features: str) -> None:
        """Raise :class:`UnsupportedFeatureError` naming every feature in ``features`` this Runtime lacks, by
        version or because it does not advertise it. Raises :class:`UnknownFeatureError` for unknown names."""
        missing: list[str] = []
        for feature in features:
            try:
                require_feature(self.version, feature)
            except UnsupportedFeatureError as error:
                missing.append(str(error))
                continue
            if feature not in self.capabilities:
                missing.append(
                    f"node Runtime {self.name} {self.version} does not advertise feature {feature!r} "
                    f"({RUNTIME_FEATURES[feature].summary}); it advertises: {', '.join(sorted(self.capabilities))}"
                )
        if missing:
            raise UnsupportedFeatureError("; ".join(missing))


GPU_TOPOLOGY = "gpu-topology"
"""The topology feature: a client reads ``DeviceInfo.topology`` only from a Runtime that serves it (older ones leave
it absent, which reads as unknown)."""

MIG_INVENTORY, MIG_ALLOCATE, MIG_DYNAMIC, MIG_EXPORTER_DATA = (
    "mig-inventory", "mig-allocate", "mig-dynamic", "mig-exporter-data")
"""MIG feature names; ``mig-dynamic`` is advertised only by a Runtime that creates and destroys instances."""


def mig_features(*, dynamic: bool = False, exporter: bool = False) -> tuple[str, ...]:
    """The features a MIG component requires of the node Runtime (pass them to :meth:`RuntimeInfo.require` after
    ``GetVersion``): listing and allocating instances; plus :data:`MIG_DYNAMIC` when it plans instances to be
    created (dynamic placement), plus ``mig-exporter-data`` for an exporter labelling MIG series."""
    wanted = [MIG_INVENTORY, MIG_ALLOCATE]
    if dynamic:
        wanted.append(MIG_DYNAMIC)
    if exporter:
        wanted.append(MIG_EXPORTER_DATA)
    return tuple(wanted)


def features_at(version: SemVer, *, exclude: Iterable[str] = ()) -> frozenset[str]:
    """Names of every feature whose minimum is at most ``version``, less ``exclude`` (what a Runtime at that
    version advertises by default)."""
    skip = set(exclude)
    return frozenset(name for name, f in RUNTIME_FEATURES.items() if f.minimum <= version and name not in skip)
