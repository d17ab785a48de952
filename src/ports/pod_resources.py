"""The kubelet pod-resources port: which containers hold which devices right now (the exporter's attribution).

Speaks domain types only (``domain.exporter.attribution``); the wire form is kubelet's
``k8s.io/kubelet/pkg/apis/podresources/v1`` ``List``, spoken by ``adapters.grpc.podresources``.
"""

from __future__ import annotations

from typing import Protocol

from domain.exporter.attribution import PodContainerDevices

__all__ = ["PodResourcesError", "PodResourcesLister"]


class PodResourcesError(Exception):
    """Kubelet's pod-resources API could not be read (socket missing, deadline passed, kubelet error)."""


class PodResourcesLister(Protocol):
    """Kubelet's pod-resources ``List``."""

    def list_containers(self) -> tuple[PodContainerDevices, ...]:
        """Every container of every pod kubelet runs, with its device IDs. Raises :class:`PodResourcesError`."""
        ...
