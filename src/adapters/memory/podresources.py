"""In-memory kubelet pod-resources (``ports.pod_resources.PodResourcesLister``): the containers a test or a
dry run says kubelet runs; :meth:`InMemoryPodResources.fail` makes ``list_containers`` raise."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from domain.exporter.attribution import PodContainerDevices
from ports.pod_resources import PodResourcesError


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
        """Make ``list_containers`` raise ``PodResourcesError(message)`` (empty message: stop failing)."""
        with self._lock:
            self._error = message

    def list_containers(self) -> tuple[PodContainerDevices, ...]:
        """The listed containers; raises :class:`PodResourcesError` after :meth:`fail`."""
        with self._lock:
            if self._error:
                raise PodResourcesError(self._error)
            return self._containers
