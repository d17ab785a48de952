"""In-memory kubelet pod-resources (``ports.pod_resources.PodResourcesLister``): the containers a test or a
dry run says kubelet runs; :meth:`InMemoryPodResources.fail` makes every call raise."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from domain.exporter.attribution import PodContainerDevices
from ports.pod_resources import PodNotFoundError, PodResourcesError


class InMemoryPodResources:
    """Holds a container list (thread-safe)."""

    def __init__(self, containers: Iterable[PodContainerDevices] = ()) -> None:
        self._lock = threading.Lock()
        self._containers = tuple(containers)
        self._error = ""

    def set_containers(self, containers: Iterable[PodContainerDevices]) -> None:
        """Replace the listed containers."""
        with self._lock:
            self._containers = tuple(containers)

    def fail(self, message: str = "") -> None:
        """Make every call raise ``PodResourcesError(message)`` (empty message: stop failing)."""
        with self._lock:
            self._error = message

    def list_containers(self) -> tuple[PodContainerDevices, ...]:
        """The listed containers; raises :class:`PodResourcesError` after :meth:`fail`."""
        with self._lock:
            if self._error:
                raise PodResourcesError(self._error)
            return self._containers

    def pod_containers(self, namespace: str, pod: str) -> tuple[PodContainerDevices, ...]:
        """The listed containers of ``namespace/pod``; raises :class:`PodNotFoundError` when none is listed, and
        :class:`PodResourcesError` after :meth:`fail`."""
        rows = tuple(c for c in self.list_containers() if c.namespace == namespace and c.pod == pod)
        if not rows:
            raise PodNotFoundError(f"pod {pod} in namespace {namespace} not found")
        return rows
