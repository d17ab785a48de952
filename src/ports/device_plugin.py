"""The device plugin port: what the kubelet-facing gRPC servers need from the plugin's logic, in domain types.

``adapters.grpc.device_plugin`` serves ``v1beta1.DevicePlugin`` (k8s.io/kubelet ``pkg/apis/deviceplugin/v1beta1``) for
one :class:`~domain.device_plugin.devices.ResourceKey` over any :class:`DevicePluginHandler`;
``services.device_plugin.service.DevicePluginService`` implements it. Semantics:

* ``devices`` returns a generation number and the complete device list of a kind; the generation grows on every
  change of any GPU's health, and ``wait_change`` blocks until it passes a given one (ListAndWatch sends the full
  list each time, as kubelet replaces its state per message);
* ``preferred`` never raises for lack of a plan: a preference is advisory;
* ``allocate`` raises :class:`domain.device_plugin.matching.DevicePluginError` subclasses when the call cannot be
  tied to one planned container, the Runtime contract errors of ``ports.runtime`` when the Runtime refuses, and
  ``ports.cluster.ClusterError`` when the API server cannot be read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from domain.device_plugin.devices import PluginDevice, ResourceKey
from domain.runtime.types import ContainerAllocationResponse


class DevicePluginHandler(Protocol):
    """The plugin logic behind the per-resource servers (module docstring)."""

    def devices(self, kind: ResourceKey) -> tuple[int, tuple[PluginDevice, ...]]:
        """``(generation, complete device list of kind)``."""
        ...

    def wait_change(self, generation: int, timeout_s: float) -> int:
        """Block up to ``timeout_s`` seconds until the generation differs from ``generation``; returns the
        current generation."""
        ...

    def preferred(
        self, kind: ResourceKey, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> tuple[str, ...]:
        """Device IDs to suggest for one container (IDs of its planned GPUs when it can be identified)."""
        ...

    def allocate(self, kind: ResourceKey, device_ids: Sequence[str]) -> ContainerAllocationResponse:
        """Allocate for the container kubelet is admitting; ``device_ids`` only give the count (module
        docstring)."""
        ...
