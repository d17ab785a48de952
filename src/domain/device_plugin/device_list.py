"""How a container's granted devices reach the container runtime: the device plugin's device-list strategy, the
values of NVIDIA k8s-device-plugin's ``--device-list-strategy`` (``envvar``, ``volume-mounts``, ``cdi-cri``; its
``cdi-annotations`` is not offered).

Why it matters: kubelet puts the device plugin's environment first and the pod's own ``env`` after it, so a pod
that sets ``NVIDIA_VISIBLE_DEVICES=all`` overrides the device list an ``envvar`` plugin gave. The NVIDIA container
toolkit takes a container's device list from the first of (nvidia-container-toolkit, ``internal/config/image``,
``CUDA.VisibleDevices``): CDI annotations; with ``accept-nvidia-visible-devices-as-volume-mounts = true``, the mounts
of host ``/dev/null`` under :data:`VOLUME_MOUNTS_ROOT`; then ``NVIDIA_VISIBLE_DEVICES``, which for an unprivileged
container counts only with ``accept-nvidia-visible-devices-envvar-when-unprivileged = true``. A CDI-enabled
runtime (containerd 2) injects the ``cdi_devices`` names itself, whatever the env says.

What :func:`container_response` makes of the node Runtime's answer (its ``NVIDIA_VISIBLE_DEVICES``: the granted
GPU or MIG UUIDs in plan order, ``domain.runtime.limits``), per strategy:

* ``envvar``: that ``NVIDIA_VISIBLE_DEVICES`` as the Runtime answered it.
* ``volume-mounts``: per device ID of that list, host ``/dev/null`` mounted read-only at
  ``/var/run/nvidia-container-devices/<id>`` (:data:`VOLUME_MOUNTS_HOST`), and ``NVIDIA_VISIBLE_DEVICES`` set to
  :data:`VOLUME_MOUNTS_ROOT`, as NVIDIA's plugin does: a path, no device ID. It wins over ``envvar``'s env when
  both are chosen (NVIDIA's order).
* ``cdi-cri``: the plan's CDI names (``domain.device_plugin.cdi``) in ``cdi_devices``. Chosen alone,
  ``NVIDIA_VISIBLE_DEVICES`` is :data:`VOID` (the toolkit's "no device", also what ``nvidia-ctk cdi generate``
  specs set), which replaces the ``NVIDIA_VISIBLE_DEVICES=all`` CUDA images bake into their ``ENV``.

Every other variable of the answer stays (HAMi-core's ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` and ``CUDA_DEVICE_SM_LIMIT``,
the ``LJRK_*`` ones), and so do its mounts and device nodes. The response allow-list
(``domain.device_plugin.response_guard``) judges the Runtime's answer before this; the ``/dev/null`` mounts added
here are the plugin's own. A device ID used as a path must be a plain name (letters, digits, ``_.:-``, alphanumeric
at both ends; not ``all``, ``none`` or ``void``): anything else fails the container with :class:`DeviceListError`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Iterable, Mapping

import attrs

from domain.device_plugin.cdi import container_devices
from domain.device_plugin.matching import DevicePluginError
from domain.errors import InvalidRequestError
from domain.runtime.limits import VISIBLE_DEVICES
from domain.runtime.types import ContainerAllocationRequest, ContainerAllocationResponse, Mount

VOLUME_MOUNTS_ROOT = "/var/run/nvidia-container-devices"
"""Container folder whose ``/dev/null`` mounts name the devices (the toolkit's ``DeviceListAsVolumeMountsRoot``)."""

VOLUME_MOUNTS_HOST = "/dev/null"
"""Host path of every device-list mount: the toolkit reads only mounts of exactly this path."""

VOID = "void"
"""``NVIDIA_VISIBLE_DEVICES`` value the toolkit reads as "inject nothing"."""

FIELD = "--device-list-strategy"
"""The setting's name in error messages (also read from ``$DEVICE_LIST_STRATEGY``)."""

_DEVICE_ID = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_RESERVED = frozenset({"all", "none", "void"})


class DeviceListError(DevicePluginError):
    """A container's devices cannot be passed with the chosen strategy (module docstring); nothing is forwarded."""


class DeviceListStrategy(enum.Enum):
    """One way of passing the device list (module docstring); values are NVIDIA's flag values."""

    ENVVAR = "envvar"
    VOLUME_MOUNTS = "volume-mounts"
    CDI_CRI = "cdi-cri"


_ORDER = tuple(DeviceListStrategy)


def _strategy_set(values: Iterable[DeviceListStrategy]) -> frozenset[DeviceListStrategy]:
    return frozenset(values)


@attrs.frozen
class DeviceListStrategies:
    """The chosen strategies, at least one (ValueError otherwise); ``str()`` is the canonical comma list."""

    chosen: frozenset[DeviceListStrategy] = attrs.field(converter=_strategy_set)

    def __attrs_post_init__(self) -> None:
        if not self.chosen:
            raise ValueError("a device list strategy set needs at least one strategy")

    def __str__(self) -> str:
        return ",".join(s.value for s in _ORDER if s in self.chosen)

    def includes(self, strategy: DeviceListStrategy) -> bool:
        """True when ``strategy`` is chosen."""
        return strategy in self.chosen

    @property
    def cdi_only(self) -> bool:
        """True when ``cdi-cri`` is the only strategy: the container runtime's CDI injection is the only path."""
        return self.chosen == {DeviceListStrategy.CDI_CRI}


def parse_strategies(values: Iterable[str]) -> DeviceListStrategies:
    """The strategies named by ``values``, each a name or a comma-separated list (``"envvar,cdi-cri"``;
    whitespace around names ignored, repeats allowed). Raises :class:`InvalidRequestError` on field
    :data:`FIELD` naming the value for an unknown or empty name, or when nothing is named."""
    given = list(values)
    names = [name.strip() for value in given for name in value.split(",")]
    known = {s.value: s for s in DeviceListStrategy}
    for name in names:
        if name not in known:
            hint = " (NVIDIA's cdi-annotations is not offered: use cdi-cri)" if name == "cdi-annotations" else ""
            raise InvalidRequestError(FIELD, ",".join(given), f"unknown strategy {name!r}{hint}; choose one or "
                                      f"more of {', '.join(known)}, comma-separated")
    if not names:
        raise InvalidRequestError(FIELD, "", f"choose one or more of {', '.join(known)}")
    return DeviceListStrategies(known[name] for name in names)


def default_strategies(*, cdi: bool) -> DeviceListStrategies:
    """The strategies when none are given: ``envvar``, plus ``cdi-cri`` when the plugin keeps a CDI spec."""
    chosen = [DeviceListStrategy.ENVVAR] + ([DeviceListStrategy.CDI_CRI] if cdi else [])
    return DeviceListStrategies(chosen)


def device_ids(envs: Mapping[str, str], *, label: str) -> tuple[str, ...]:
    """The device IDs of ``NVIDIA_VISIBLE_DEVICES`` in ``envs``, in order, each once. Raises
    :class:`DeviceListError` naming ``label`` (the container) when there is none or one is no plain name
    (module docstring)."""
    text = envs.get(VISIBLE_DEVICES, "")
    ids = [i.strip() for i in text.split(",") if i.strip()]
    if not ids:
        raise DeviceListError(f"{label}: the node Runtime's answer names no device in {VISIBLE_DEVICES} "
                              f"({text!r}), so the volume-mounts strategy has nothing to mount")
    for each in ids:
        if _DEVICE_ID.fullmatch(each) is None or each.lower() in _RESERVED:
            raise DeviceListError(f"{label}: device ID {each!r} of the node Runtime's {VISIBLE_DEVICES} is not a GPU "
                                  "or MIG UUID (letters, digits, _ . : -; not all, none or void): not forwarded")
    return tuple(dict.fromkeys(ids))


def volume_mounts(ids: Iterable[str]) -> tuple[Mount, ...]:
    """One read-only mount of :data:`VOLUME_MOUNTS_HOST` at ``<VOLUME_MOUNTS_ROOT>/<id>`` per ID, in order."""
    return tuple(Mount(f"{VOLUME_MOUNTS_ROOT}/{i}", VOLUME_MOUNTS_HOST, read_only=True) for i in ids)


def check_cdi_only(request: ContainerAllocationRequest, resolvable: Collection[str],
                   strategies: DeviceListStrategies) -> None:
    """With ``cdi-cri`` alone, refuse before the Runtime is asked what CDI cannot give: MIG instances (the
    node's spec has whole GPUs and no MIG capability nodes) and a planned GPU the written spec does not name yet
    (``resolvable``: the names it resolves), either of which would leave the container without its GPU. Raises
    :class:`DeviceListError` naming the container; with other strategies, does nothing."""
    if not strategies.cdi_only:
        return
    if request.mig:
        raise DeviceListError(f"{request.label}: MIG instances cannot be passed with device list strategy cdi-cri "
                              "alone (the CDI spec names whole GPUs only): add volume-mounts or envvar")
    missing = [n for n in container_devices(request) if n not in resolvable]
    if missing:
        raise DeviceListError(f"{request.label}: the node's CDI spec does not name {', '.join(missing)} (not "
                              "written yet, or its folder is not writable): with device list strategy cdi-cri "
                              "alone the container would get no GPU")


def container_response(answer: ContainerAllocationResponse, *, strategies: DeviceListStrategies,
                       cdi_names: Iterable[str], label: str) -> ContainerAllocationResponse:
    """The response kubelet gets for the Runtime's ``answer`` under ``strategies`` (module docstring);
    ``cdi_names``: the plan's CDI names the node's spec resolves (used with ``cdi-cri`` only); ``label``: the
    container, for messages. Raises :class:`DeviceListError` as :func:`device_ids` (``volume-mounts`` only)."""
    envs = dict(answer.envs)
    mounts = answer.mounts
    if strategies.includes(DeviceListStrategy.VOLUME_MOUNTS):
        mounts = (*mounts, *volume_mounts(device_ids(answer.envs, label=label)))
        envs[VISIBLE_DEVICES] = VOLUME_MOUNTS_ROOT
    elif strategies.cdi_only:
        envs[VISIBLE_DEVICES] = VOID
    names = tuple(cdi_names) if strategies.includes(DeviceListStrategy.CDI_CRI) else ()
    return attrs.evolve(answer, envs=envs, mounts=mounts, cdi_devices=names)
