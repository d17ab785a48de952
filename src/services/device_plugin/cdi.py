"""The node's CDI spec, kept in step with the GPU inventory (:mod:`domain.device_plugin.cdi` for the names and the
spec; ``ports.cdi`` for where it goes).

:meth:`CdiPublisher.refresh` builds the spec from the GPUs the device plugin knows and the host driver's facts and
writes it when it differs from the spec last written (a new or removed GPU, a changed index; health never changes
the spec). The device plugin app refreshes before it serves kubelet, after every inventory change and at every
poll; Allocate returns only the names :meth:`CdiPublisher.resolvable` gives (the spec last written), so a spec that
could not be written never makes containerd fail a container. The spec stays when the plugin stops: kubelet keeps
the names of running pods in its checkpoint and hands them to containerd again when a container restarts (during a
rollout, or with no plugin at all); :meth:`CdiPublisher.remove` is for an uninstall. A store failure is logged and
retried at the next refresh (kubelet's Allocate never waits on it); the host is re-scanned on each refresh that
sees a new GPU set.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterable

from domain.device_plugin.cdi import CdiSpec, build_spec, container_devices
from domain.errors import InvalidRequestError
from domain.gpu import Gpu
from domain.runtime.types import ContainerAllocationRequest
from ports.cdi import CdiSpecError, CdiSpecStore, HostGpuDevices

log = logging.getLogger(__name__)


def resolvable_names(request: ContainerAllocationRequest, resolvable: Collection[str]) -> tuple[str, ...]:
    """The plan's CDI names that the node's spec resolves (``resolvable``); a name it does not (the spec not written
    yet, or its folder not writable) is left out and logged, so containerd never fails the container on it: the
    grant still reaches it through the environment. Raises InvalidRequestError for a malformed GPU UUID."""
    names = container_devices(request)
    missing = [n for n in names if n not in resolvable]
    if missing:
        log.warning("CDI spec names no %s: the container gets its devices through the environment only",
                    ", ".join(missing))
    return tuple(n for n in names if n in resolvable)


class CdiPublisher:
    """Writes and removes the node's CDI spec (module docstring). Thread-safe (calls are serialised)."""

    def __init__(self, store: CdiSpecStore, host: HostGpuDevices) -> None:
        self._lock = threading.Lock()
        self._store = store
        self._host = host
        self._written: CdiSpec | None = None
        self._gpu_set: frozenset[tuple[int, str]] | None = None
        self._host_nodes = host.scan()
        self._last_error = ""

    @property
    def written(self) -> CdiSpec | None:
        """The spec last written successfully (None before the first write or after :meth:`remove`)."""
        return self._written

    def resolvable(self) -> frozenset[str]:
        """The fully-qualified CDI names the written spec resolves (empty before the first successful write)."""
        written = self._written
        return frozenset(written.qualified_names()) if written is not None else frozenset()

    def refresh(self, gpus: Iterable[Gpu]) -> bool:
        """Write the spec for ``gpus`` when it changed; True when written. Never raises (failures logged)."""
        with self._lock:
            return self._refresh(tuple(gpus))

    def _refresh(self, listed: tuple[Gpu, ...]) -> bool:
        gpu_set = frozenset((g.index, g.uuid) for g in listed)
        if gpu_set != self._gpu_set and self._gpu_set is not None:
            self._host_nodes = self._host.scan()
        try:
            spec = build_spec(listed, self._host_nodes)
        except InvalidRequestError as error:
            log.error("cannot build the CDI spec: %s", error)
            return False
        self._gpu_set = gpu_set
        if spec == self._written:
            return False
        try:
            self._store.write(spec)
        except CdiSpecError as error:
            if str(error) != self._last_error:  # once per distinct error, not at every poll
                log.warning("%s; retrying at every refresh", error)
            self._last_error = str(error)
            return False
        self._last_error = ""
        self._written = spec
        log.info("CDI spec written: %d device(s) of %s", len(spec.devices), spec.kind)
        return True

    def remove(self) -> None:
        """Delete the spec (an uninstall; never at shutdown, module docstring). Never raises (failures logged)."""
        with self._lock:
            try:
                self._store.remove()
            except CdiSpecError as error:
                log.warning("%s", error)
            self._written = None
            self._gpu_set = None
