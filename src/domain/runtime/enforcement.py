"""What enforces a GPU share on a node: the answer each node publishes, so nobody mistakes accounting for isolation.

A time-shared grant (``gpu-core.percentage``, ``gpu-memory``) is a number in the books; whether a container is held
to it depends on what the node runs:

* ``none`` — nothing: the limits are environment variables no library reads, so a 10 % grant can use the whole
  GPU (accounting only; the default of the reference Runtime without ``--hami-core-library``);
* ``hami-core`` — HAMi-core's ``libvgpu.so`` is preloaded into each container and caps its memory and SM use;
* ``mps`` — the CUDA MPS control daemon caps each client's active-thread percentage and pinned memory;
* ``mig`` — every GPU of the node is in MIG mode: a grant is a MIG instance, isolated by the hardware.

The node Runtime advertises its mode as exactly one of the features ``share-enforcement-<mode>``
(:data:`ENFORCEMENT_FEATURES`) in ``GetVersion``; a Runtime that advertises none (older than the feature) reads as
``unknown``. The device plugin publishes it as a node label, the exporter as a metric.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable

from domain.gpu import Gpu, MigMode


class Enforcement(enum.Enum):
    """How a share is enforced on a node (module docstring); the value is the label value and metric label."""

    NONE = "none"
    HAMI_CORE = "hami-core"
    MPS = "mps"
    MIG = "mig"
    UNKNOWN = "unknown"


ENFORCEMENT_FEATURES: dict[Enforcement, str] = {
    mode: f"share-enforcement-{mode.value}" for mode in Enforcement if mode is not Enforcement.UNKNOWN
}
"""The ``GetVersion`` feature name that announces each mode."""


def node_enforcement(gpus: Iterable[Gpu], *, hami_core: bool, mps: bool = False) -> Enforcement:
    """The mode of a node whose Runtime sees ``gpus``, preloads HAMi-core (``hami_core``) or runs MPS (``mps``):
    ``mig`` when there is at least one GPU and every GPU is in MIG mode (no time-shared grant can land there),
    else MPS before HAMi-core before ``none``."""
    listed = list(gpus)
    if listed and all(gpu.mig_mode is MigMode.ENABLED for gpu in listed):
        return Enforcement.MIG
    if mps:
        return Enforcement.MPS
    return Enforcement.HAMI_CORE if hami_core else Enforcement.NONE


def advertised_enforcement(capabilities: Collection[str]) -> Enforcement:
    """The mode a Runtime's ``GetVersion`` capabilities announce; ``unknown`` when they name none or several."""
    named = [mode for mode, feature in ENFORCEMENT_FEATURES.items() if feature in capabilities]
    return named[0] if len(named) == 1 else Enforcement.UNKNOWN
