"""In-memory CDI ports (``ports.cdi``): :class:`InMemoryCdiSpecStore` keeps the last spec written (tests, ``ljrk up``
without a spec directory) and :class:`StaticHostGpuDevices` answers fixed driver facts (none by default: simulated
GPUs). :meth:`InMemoryCdiSpecStore.fail` makes every call raise."""

from __future__ import annotations

import threading

from domain.device_plugin.cdi import CdiSpec, HostGpuNodes
from ports.cdi import CdiSpecError


class InMemoryCdiSpecStore:
    """Holds one spec (thread-safe); ``writes`` counts successful writes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spec: CdiSpec | None = None
        self._error = ""
        self.writes = 0

    def fail(self, message: str = "") -> None:
        """Make every call raise ``CdiSpecError(message)`` (empty message: stop failing)."""
        with self._lock:
            self._error = message

    def _check(self) -> None:
        if self._error:
            raise CdiSpecError(self._error)

    def write(self, spec: CdiSpec) -> None:
        """Replace the spec. Raises :class:`CdiSpecError` after :meth:`fail`."""
        with self._lock:
            self._check()
            self._spec = spec
            self.writes += 1

    def read(self) -> CdiSpec | None:
        """The spec last written, or None. Raises :class:`CdiSpecError` after :meth:`fail`."""
        with self._lock:
            self._check()
            return self._spec

    def remove(self) -> None:
        """Forget the spec. Raises :class:`CdiSpecError` after :meth:`fail`."""
        with self._lock:
            self._check()
            self._spec = None


class StaticHostGpuDevices:
    """``HostGpuDevices`` answering ``nodes`` (default: no driver)."""

    def __init__(self, nodes: HostGpuNodes | None = None) -> None:
        self._nodes = nodes if nodes is not None else HostGpuNodes()

    def scan(self) -> HostGpuNodes:
        """The fixed facts."""
        return self._nodes
