"""The kubelet pod-resources port: which containers hold which devices right now (the exporter's attribution).

Speaks domain types only (``domain.exporter.attribution``); the wire form is kubelet's
``k8s.io/kubelet/pkg/apis/podresources/v1`` ``List`` and ``Get`` (kubelet 1.27+, on by default from 1.34), spoken by
``adapters.grpc.podresources``, which falls back to ``List`` when kubelet answers ``Get`` with UNIMPLEMENTED.
"""

from __future__ import annotations

from typing import Protocol

from domain.exporter.attribution import PodContainerDevices

__all__ = ["PodNotFoundError", "PodResourcesError", "PodResourcesLister"]


class PodResourcesError(Exception):
    """Kubelet's pod-resources API could not be read (socket missing, deadline passed, kubelet error)."""


class PodNotFoundError(PodResourcesError):
    """Kubelet does not know the pod asked for (``Get``: "pod … not found"; ``List``: the pod is not active)."""


class PodResourcesLister(Protocol):
    """Kubelet's pod-resources ``List`` and ``Get``."""

    def list_containers(self) -> tuple[PodContainerDevices, ...]:
        """Every container of every pod kubelet runs, with its device IDs. Raises :class:`PodResourcesError`."""
        ...

    def pod_containers(self, namespace: str, pod: str) -> tuple[PodContainerDevices, ...]:
        """The containers of one pod with their device IDs (the rows :meth:`list_containers` has for it). Raises
        :class:`PodNotFoundError` when kubelet does not know the pod, :class:`PodResourcesError` otherwise."""
        ...
