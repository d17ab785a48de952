"""The device plugin's logic (port ``ports.device_plugin.DevicePluginHandler``): device lists with live health,
preferred allocations, and Allocate mapped onto the scheduler's plan and one Runtime Allocate per container.

* Health: :meth:`DevicePluginService.follow_health` applies the Runtime's WatchHealth stream (snapshot, then
  changes; reconnecting after a failure), bumping a generation that ListAndWatch streams wait on.
* Inventory changes: each time the stream (re)opens — a Runtime restart, say after a GPU was replaced — and
  whenever it names a GPU we do not know, :meth:`DevicePluginService.resync_inventory` re-reads ListDevices;
  added GPUs get device IDs, removed ones lose theirs, and ListAndWatch sends the new full list.
* Allocate: lists the node's pods (``spec.nodeName=<node>``), builds candidates
  (:mod:`domain.deviceplugin.pods`) and picks the container by the rule of :mod:`domain.deviceplugin.matching`
  — device IDs only give the count, never the placement (B17). The first resource call of a container makes the
  one Runtime Allocate (idempotent key: pod UID + container) from the plan; later resource calls of the same
  container return the cached response (kubelet merges the responses of a container's resources; identical
  envs, mounts and device specs merge cleanly). A plan naming an unhealthy GPU is refused (B14).
* Inventory: :meth:`DevicePluginService.publish_inventory` writes the node GPU inventory annotation (with
  heartbeat and protocol fingerprint) and the protocol fingerprint annotation.

Thread-safe: Allocate and preferred calls are serialised (kubelet serialises admission anyway).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

import attrs

from domain.deviceplugin.devices import PluginDevice, ResourceKind, device_list, preferred_ids
from domain.deviceplugin.matching import (
    Candidate,
    ContainerKey,
    DevicePluginError,
    UnhealthyPlanError,
    select_container,
)
from domain.deviceplugin.pods import node_candidates
from domain.gpu import Gpu, GpuUuid, Health
from domain.kube.annotations import encode_inventory
from domain.kube.protocol import ProtocolConstants
from domain.runtime.types import ContainerAllocationRequest, ContainerAllocationResponse, PlannedGpu
from ports.cluster import ClusterApi
from ports.runtime import HealthStream, NodeRuntime, NodeRuntimeError

log = logging.getLogger(__name__)

HEALTH_RETRY_S = 1.0
"""Pause before re-opening a failed WatchHealth stream, s."""


REQUIRED_FEATURES = ("inventory", "health-watch", "allocate")
"""Runtime features (``domain.runtime.features.RUNTIME_FEATURES``) the device plugin uses; checked at start."""


class DevicePluginService:
    """Implements ``ports.device_plugin.DevicePluginHandler`` for node ``node`` (module docstring).

    ``memory_unit_bytes`` overrides the protocol's memory unit (None = the protocol's; percent mode follows the
    protocol). Construction calls the Runtime's ListDevices: raises ``ports.runtime.NodeRuntimeError`` (or
    ``RuntimeUnavailableError``) when the Runtime cannot be read. ``clock`` gives epoch seconds.
    """

    def __init__(
        self, *, node: str, runtime: NodeRuntime, cluster: ClusterApi, protocol: ProtocolConstants,
        memory_unit_bytes: int | None = None, clock: Callable[[], float] = time.time,
    ) -> None:
        self.node = node
        self._runtime = runtime
        self._cluster = cluster
        self.protocol = protocol
        self._memory_unit = None if protocol.percent_mode else (memory_unit_bytes or protocol.memory_unit_bytes)
        self._clock = clock
        self._changed = threading.Condition()
        self._generation = 0
        runtime.get_version().require(*REQUIRED_FEATURES)  # refuse a Runtime too old for what we call
        self._gpus: dict[GpuUuid, Gpu] = {d.gpu.uuid: d.gpu for d in runtime.list_devices()}
        self._health_stream: HealthStream | None = None
        self._alloc_lock = threading.Lock()
        self._served: dict[ContainerKey, set[ResourceKind]] = {}
        self._responses: dict[ContainerKey, ContainerAllocationResponse] = {}
        self.runtime_allocate_calls = 0
        """Runtime Allocate calls made (for tests and the benchmark)."""

    # ------------------------------------------------------------------ devices and health
    def gpus(self) -> tuple[Gpu, ...]:
        """The node's GPUs with current health, in index order."""
        with self._changed:
            return tuple(sorted(self._gpus.values(), key=lambda g: g.index))

    def devices(self, kind: ResourceKind) -> tuple[int, tuple[PluginDevice, ...]]:
        """``(generation, complete list of kind)``."""
        with self._changed:
            generation, gpus = self._generation, list(self._gpus.values())
        return generation, device_list(kind, gpus, memory_unit_bytes=self._memory_unit)

    def wait_change(self, generation: int, timeout_s: float) -> int:
        """Block up to ``timeout_s`` s for a generation other than ``generation``; returns the current one."""
        with self._changed:
            self._changed.wait_for(lambda: self._generation != generation, timeout=timeout_s)
            return self._generation

    def set_health(self, uuid: GpuUuid, health: Health) -> bool:
        """Record a GPU's health; True (and a new generation) when it changed. Unknown UUIDs are ignored."""
        with self._changed:
            gpu = self._gpus.get(uuid)
            if gpu is None or gpu.health is health:
                return False
            self._gpus[uuid] = attrs.evolve(gpu, health=health)
            self._generation += 1
            self._changed.notify_all()
        log.info("GPU %s is now %s", uuid, health.value)
        return True

    def resync_inventory(self) -> bool:
        """Re-read the Runtime's ListDevices and adopt it when the set of GPUs or any GPU's index, model, memory
        or MIG mode changed (health alone is the stream's business); True (and a new generation) when adopted.
        Raises ``ports.runtime.NodeRuntimeError`` when the Runtime cannot be read."""
        fresh = {d.gpu.uuid: d.gpu for d in self._runtime.list_devices()}

        def shape(gpus: dict[GpuUuid, Gpu]) -> set[tuple[object, ...]]:
            return {(g.uuid, g.index, g.model, g.memory_bytes, g.mig_mode) for g in gpus.values()}

        with self._changed:
            if shape(fresh) == shape(self._gpus):
                return False
            added, removed = sorted(fresh.keys() - self._gpus), sorted(self._gpus.keys() - fresh)
            self._gpus = fresh
            self._generation += 1
            self._changed.notify_all()
        log.warning("GPU inventory changed: added %s, removed %s; device lists re-sent", added or "none",
                    removed or "none")
        return True

    def follow_health(self, stop: threading.Event, on_change: Callable[[], None] = lambda: None) -> None:
        """Apply the Runtime's health stream until ``stop`` is set and :meth:`close_health` is called, re-opening
        it after failures (the snapshot on each re-open resynchronises health, and :meth:`resync_inventory` the
        GPU set). ``on_change`` runs after each effective change. Never raises."""
        while not stop.is_set():
            try:
                stream = self._runtime.watch_health()
                with self._changed:
                    self._health_stream = stream
                if stop.is_set():
                    break
                if self.resync_inventory():
                    on_change()
                for change in stream:
                    with self._changed:
                        unknown = change.uuid not in self._gpus
                    if (unknown and self.resync_inventory()) or self.set_health(change.uuid, change.health):
                        on_change()
            except NodeRuntimeError as error:
                log.warning("Runtime health stream failed: %s; retrying in %.0f s", error, HEALTH_RETRY_S)
            finally:
                self.close_health()
            stop.wait(HEALTH_RETRY_S)

    def close_health(self) -> None:
        """Close the open health stream, if any (ends :meth:`follow_health`'s current iteration)."""
        with self._changed:
            stream, self._health_stream = self._health_stream, None
        if stream is not None:
            stream.close()

    def publish_inventory(self) -> None:
        """Write the inventory annotation (now as heartbeat) and the protocol fingerprint on the node. Raises
        ``ports.cluster.ClusterError`` (NotFoundError when the node is missing)."""
        fingerprint = self.protocol.fingerprint()
        keys = self.protocol.annotations
        text = encode_inventory(self.gpus(), heartbeat=self._clock(), protocol=fingerprint)
        self._cluster.patch_node_metadata(self.node, annotations={keys.node_inventory: text,
                                                                  keys.node_protocol: fingerprint})

    # ------------------------------------------------------------------ allocation
    def _select(self, kind: ResourceKind, count: int) -> tuple[Candidate, tuple[Gpu, ...]]:
        pods = self._cluster.list_pods(field_selector=f"spec.nodeName={self.node}").items
        live = {p.uid for p in pods}
        for key in [k for k in self._served if k[0] not in live]:
            self._served.pop(key, None)
            self._responses.pop(key, None)
        gpus = self.gpus()
        candidates = node_candidates(pods, node=self.node, node_gpus=gpus, protocol=self.protocol)
        return select_container(kind, count, candidates, self._served), gpus

    def preferred(
        self, kind: ResourceKind, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> tuple[str, ...]:
        """IDs of the planned GPUs first (``domain.deviceplugin.devices.preferred_ids``); without an identified
        plan, must-include then available IDs. Never raises (a preference is advisory)."""
        planned: list[GpuUuid] = []
        try:
            with self._alloc_lock:
                chosen, gpus = self._select(kind, size)
            by_index = {g.index: g for g in gpus}
            if chosen.grant is not None:
                planned = [by_index[g.gpu_index].uuid for g in chosen.grant.grants if g.gpu_index in by_index]
        except Exception as error:  # advisory: log and fall back to kubelet's own order
            log.info("no preferred allocation for %d x %s: %s", size, kind.value, error)
        return preferred_ids(available, must_include, size, planned)

    def allocate(self, kind: ResourceKind, device_ids: Sequence[str]) -> ContainerAllocationResponse:
        """The response for the container kubelet is admitting (module docstring). Raises
        ``DevicePluginError`` subclasses, Runtime contract errors, ``ClusterError``."""
        with self._alloc_lock:
            chosen, gpus = self._select(kind, len(device_ids))
            response = self._responses.get(chosen.key)
            if response is None:
                response = self._runtime.allocate(self._request(chosen, gpus))
                self.runtime_allocate_calls += 1
                self._responses[chosen.key] = response
            self._served.setdefault(chosen.key, set()).add(kind)
        log.info("allocated %d x %s for %s (plan, not IDs)", len(device_ids), kind.value, chosen.label)
        return response

    @staticmethod
    def _request(chosen: Candidate, gpus: Sequence[Gpu]) -> ContainerAllocationRequest:
        assert chosen.grant is not None  # select_container raises UntrustedPlanError otherwise
        by_index = {g.index: g for g in gpus}
        planned = []
        for grant in chosen.grant.grants:
            gpu = by_index.get(grant.gpu_index)
            if gpu is None:
                raise DevicePluginError(f"{chosen.label}: planned GPU index {grant.gpu_index} is not on this node")
            if gpu.health is not Health.HEALTHY:
                raise UnhealthyPlanError(f"{chosen.label}: planned GPU {gpu.index} ({gpu.uuid}) is unhealthy")
            planned.append(PlannedGpu(gpu.index, gpu.uuid, core_milli=grant.core_milli,
                                      memory_bytes=grant.memory_bytes))
        return ContainerAllocationRequest(chosen.pod_uid, chosen.namespace, chosen.pod_name, chosen.container,
                                          tuple(planned), init=chosen.init)
