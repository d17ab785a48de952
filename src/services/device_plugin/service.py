"""The device plugin's logic (port ``ports.device_plugin.DevicePluginHandler``): device lists with live health,
preferred allocations, and Allocate mapped onto the scheduler's plan and one Runtime Allocate per container.

* Health: :meth:`DevicePluginService.follow_health` applies the Runtime's WatchHealth stream (snapshot, then
  changes; reconnecting after a failure), bumping a generation that ListAndWatch streams wait on.
* Inventory changes: each time the stream (re)opens — a Runtime restart, say after a GPU was replaced — and
  whenever it names a GPU we do not know, :meth:`DevicePluginService.resync_inventory` re-reads ListDevices;
  added GPUs get device IDs, removed ones lose theirs, and ListAndWatch sends the new full list.
* Allocate: lists the node's pods (``spec.nodeName=<node>``), builds candidates
  (:mod:`domain.device_plugin.pods`) and picks the container by the rule of :mod:`domain.device_plugin.matching`
  — device IDs only give the count, never the placement (B17). The first resource call of a container makes the
  one Runtime Allocate (idempotent key: pod UID + container) from the plan; later resource calls of the same
  container return the cached response (kubelet merges the responses of a container's resources; identical
  envs, mounts and device specs merge cleanly). A plan naming an unhealthy GPU is refused (B14). :mod:`.responses`
  makes kubelet's response: the Runtime's answer passes an allow-list (:mod:`domain.device_plugin.response_guard`),
  anything else fails the call, logged and counted, never cached; then the device-list strategy (``envvar``,
  ``volume-mounts``, ``cdi-cri``: :mod:`domain.device_plugin.device_list`) shapes the device env, mounts, CDI names.
* Allocated mark: the Allocate call that completes a pod (every resource kind of every container that asks for our
  resources, init containers included: :func:`domain.device_plugin.matching.pod_fully_served`) queues the pod on
  :attr:`DevicePluginService.marker` (:mod:`.marks`), whose worker writes ``protocol.annotations.pod_allocated`` off
  the Allocate path; kubelet never waits on the API server for it.
* Inventory: :meth:`DevicePluginService.publish_inventory` writes the node GPU inventory annotation (with
  heartbeat and protocol fingerprint) and the protocol fingerprint annotation.
* MIG: on a node with GPUs in MIG mode the Runtime must serve ``mig-inventory`` and ``mig-allocate`` (checked at
  start; a node without MIG GPUs needs neither, so a 1.0 Runtime keeps working there). The MIG strategy is the
  Runtime's: ``dynamic`` when it advertises ``mig-dynamic``, else ``static``; it is published in the inventory so
  the scheduler can refuse a mismatch. :meth:`DevicePluginService.mig_resources` says which
  ``<prefix>/mig-<profile>`` resources the node serves, with names from the shared table
  (:func:`domain.device_plugin.pods.mig_resource_names`, the scheduler's table): static, the profiles of the usable
  listed instances, one device ID per instance (``<gpu uuid>::mig-<profile>::<gpu instance id>``); dynamic, every
  profile of the MIG GPUs' models, ``max_instances`` device IDs per GPU, so kubelet's count never blocks a pod (the
  scheduler's MIG books are the real constraint; :mod:`domain.device_plugin.devices`). Publishing the inventory
  re-reads ListDevices on MIG nodes, so the annotation's "free" flags and the static device lists follow the
  Runtime. Allocate of a MIG resource sends the container's planned instances (profile, placement start, create)
  as ``PlannedMig``; kubelet's IDs never choose the instance (B17). GetPreferredAllocation prefers the planned
  instances' own IDs (static) or IDs of their GPUs (dynamic).
* Topology (Runtime >= 1.2.0): the GPUs' NUMA nodes, PCIe roots and NVLink peers go into the inventory annotation;
  GetPreferredAllocation of whole GPUs without a plan prefers the best-connected set.

Thread-safe: Allocate and preferred calls are serialised (kubelet serialises admission anyway).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

import attrs

from domain.device_plugin.device_list import DeviceListStrategies
from domain.device_plugin.devices import (
    MigResource,
    MigSlot,
    PluginDevice,
    ResourceKey,
    device_list,
    mig_device_list,
    preferred_ids,
)
from domain.device_plugin.matching import (
    Candidate,
    ContainerKey,
    planned_gpus,
    planned_instance_ids,
    pod_fully_served,
    runtime_request,
    select_container,
)
from domain.device_plugin.pods import mig_resource_names, node_candidates
from domain.device_plugin.response_guard import ResponseAllowList
from domain.device_plugin.topology import connected_gpus
from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.kube.annotations import MigInstanceRecord, encode_inventory
from domain.kube.protocol import ProtocolConstants
from domain.runtime.enforcement import advertised_enforcement
from domain.runtime.features import MIG_ALLOCATE, MIG_DYNAMIC, MIG_INVENTORY, mig_features
from domain.runtime.mig import mig_table
from domain.runtime.types import (
    ContainerAllocationResponse,
    DeviceInfo,
    MigInstanceInfo,
)
from domain.topology import node_topology, numa_nodes
from ports.cluster import NodesApi, PodsApi
from ports.runtime import CapacityExceededError, HealthStream, NodeRuntime, NodeRuntimeError

from .marks import AllocatedMarker, PodRef
from .reconciler import release_ended_now
from .responses import ResponseShaper

log = logging.getLogger(__name__)

HEALTH_RETRY_S = 1.0
"""Pause before re-opening a failed WatchHealth stream, s."""


REQUIRED_FEATURES = ("inventory", "health-watch", "allocate", "release", "exporter-data")
"""Runtime features (``domain.runtime.features.RUNTIME_FEATURES``) the device plugin uses; checked at start."""


class DevicePluginCluster(NodesApi, PodsApi, Protocol):
    """The cluster roles the device plugin uses: annotate its Node (inventory), list and annotate its pods."""


class DevicePluginService:
    """Implements ``ports.device_plugin.DevicePluginHandler`` for node ``node`` (module docstring).

    ``memory_unit_bytes`` overrides the protocol's memory unit (None = the protocol's; percent mode follows the
    protocol). Construction calls the Runtime's ListDevices: raises ``ports.runtime.NodeRuntimeError`` (or
    ``RuntimeUnavailableError``) when the Runtime cannot be read, and
    ``domain.runtime.errors.UnsupportedFeatureError`` when it lacks a feature the node needs (MIG features only on
    a node with GPUs in MIG mode). ``clock`` gives epoch seconds (also the allocated mark's value). ``cdi`` (the CDI
    names the node's spec resolves now, ``CdiPublisher.resolvable``), ``allowed``, ``device_list``: :mod:`.responses`.
    """

    def __init__(
        self, *, node: str, runtime: NodeRuntime, cluster: DevicePluginCluster, protocol: ProtocolConstants,
        memory_unit_bytes: int | None = None, clock: Callable[[], float] = time.time,
        cdi: Callable[[], Collection[str]] | None = None, allowed: ResponseAllowList | None = None,
        device_list: DeviceListStrategies | None = None,
    ) -> None:
        self.node = node
        self.responses = ResponseShaper(allowed=allowed, cdi=cdi, strategies=device_list)
        """Kubelet's responses from the Runtime's answers: allow-list, CDI names, strategy (:mod:`.responses`)."""
        self._runtime = runtime
        self._cluster = cluster
        self.protocol = protocol
        self._memory_unit = None if protocol.percent_mode else (memory_unit_bytes or protocol.memory_unit_bytes)
        self._clock = clock
        self._changed = threading.Condition()
        self._generation = 0
        info = runtime.get_version()
        info.require(*REQUIRED_FEATURES)  # refuse a Runtime too old for what we call
        listed = runtime.list_devices()
        if any(d.gpu.mig_mode is MigMode.ENABLED for d in listed):
            info.require(*mig_features())  # MIG only where the node has MIG GPUs: a 1.0 Runtime serves the rest
        self._mig_ok = info.supports(MIG_INVENTORY) and info.supports(MIG_ALLOCATE)
        self.mig_dynamic = info.supports(MIG_DYNAMIC)
        """True when the Runtime creates MIG instances (strategy ``dynamic``), else ``static``."""
        self.enforcement = advertised_enforcement(info.capabilities)
        """What enforces a share on this node, as the Runtime announced it at start (``domain.runtime.enforcement``);
        published as the protocol's ``enforcement_label``."""
        self._mig_names = mig_resource_names(protocol)
        self._gpus: dict[GpuUuid, Gpu] = {d.gpu.uuid: d.gpu for d in listed}
        self.topology = node_topology((d.gpu.index, d.topology) for d in listed)
        """The GPUs' NUMA nodes, PCIe roots and NVLink peers (Runtime >= 1.2.0; None when it reports none)."""
        self._mig: dict[GpuUuid, tuple[MigInstanceInfo, ...]] = self._mig_listing(listed)
        self._health_stream: HealthStream | None = None
        self._alloc_lock = threading.Lock()
        self._served: dict[ContainerKey, set[ResourceKey]] = {}
        self._responses: dict[ContainerKey, ContainerAllocationResponse] = {}
        self.runtime_allocate_calls = 0
        """Runtime Allocate calls made (for tests and the benchmark)."""
        self.preferred_calls = 0
        """GetPreferredAllocation container requests answered since start (kubelet asks before Allocate)."""
        self.marker = AllocatedMarker(cluster, node=node, key=protocol.annotations.pod_allocated, clock=clock)
        """Writes the allocated mark of completed pods (module docstring); its worker is run by the app."""

    # ------------------------------------------------------------------ devices and health
    def gpus(self) -> tuple[Gpu, ...]:
        """The node's GPUs with current health, in index order."""
        with self._changed:
            return tuple(sorted(self._gpus.values(), key=lambda g: g.index))

    def devices(self, kind: ResourceKey) -> tuple[int, tuple[PluginDevice, ...]]:
        """``(generation, complete list of kind)``; a MIG resource's list follows the module docstring."""
        with self._changed:
            generation, gpus = self._generation, list(self._gpus.values())
            slots = self._mig_slots(kind) if isinstance(kind, MigResource) else ()
        if isinstance(kind, MigResource):
            return generation, mig_device_list(kind, slots)
        return generation, device_list(kind, gpus, memory_unit_bytes=self._memory_unit, numa=numa_nodes(self.topology))

    # ------------------------------------------------------------------ MIG
    @property
    def mig_strategy(self) -> str:
        """``dynamic`` when the Runtime creates MIG instances, else ``static``."""
        return "dynamic" if self.mig_dynamic else "static"

    def _mig_listing(self, devices: Sequence[DeviceInfo]) -> dict[GpuUuid, tuple[MigInstanceInfo, ...]]:
        return {d.gpu.uuid: tuple(d.mig_instances) for d in devices if d.gpu.mig_mode is MigMode.ENABLED}

    def _mig_gpus(self) -> list[Gpu]:
        """GPUs in MIG mode, by index (none when the Runtime cannot serve MIG). Caller holds ``_changed``."""
        if not self._mig_ok:
            return []
        return sorted((g for g in self._gpus.values() if g.mig_mode is MigMode.ENABLED), key=lambda g: g.index)

    def _mig_profiles(self) -> set[str]:
        """Canonical profiles the node serves now (module docstring). Caller holds ``_changed``."""
        profiles: set[str] = set()
        for gpu in self._mig_gpus():
            if self.mig_dynamic:
                table = mig_table(gpu)
                profiles.update(table.names if table is not None else ())
            else:
                profiles.update(i.profile for i in self._mig.get(gpu.uuid, ()) if i.usable)
        return profiles

    def _mig_slots(self, resource: MigResource) -> list[MigSlot]:
        """The device IDs' sources of one MIG resource (module docstring). Caller holds ``_changed``."""
        slots: list[MigSlot] = []
        for gpu in self._mig_gpus():
            if self.mig_dynamic:
                table = mig_table(gpu)
                profile = None if table is None else table.lookup(resource.profile)
                if profile is not None and profile.name == resource.profile:
                    slots.extend(MigSlot(gpu, n) for n in range(profile.max_instances))
            else:
                slots.extend(MigSlot(gpu, i.gpu_instance_id) for i in self._mig.get(gpu.uuid, ())
                             if i.usable and i.profile == resource.profile)
        return slots

    def mig_resources(self) -> dict[MigResource, str]:
        """The MIG resources the node serves now and their extended resource names (module docstring); only
        names of the shared table, so exactly what the scheduler's MIG plugin schedules."""
        with self._changed:
            profiles = self._mig_profiles()
        wanted = {MigResource(p) for p in profiles}
        return {resource: name for resource, name in self._mig_names.items() if resource in wanted}

    def _mig_records(self) -> dict[int, tuple[MigInstanceRecord, ...]]:
        """The MIG layout for the inventory annotation, by GPU index. Caller holds ``_changed``."""
        out: dict[int, tuple[MigInstanceRecord, ...]] = {}
        for gpu in self._mig_gpus():
            out[gpu.index] = tuple(
                MigInstanceRecord(i.gpu_instance_id, i.compute_instance_id, i.profile, i.start, i.uuid,
                                  i.owner is None)
                for i in self._mig.get(gpu.uuid, ()))
        return out

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
        """Re-read the Runtime's ListDevices and adopt it when the set of GPUs or any GPU's index, model, memory,
        MIG mode or MIG instances (ids, profile, start, UUID) changed (health alone is the stream's business); True
        (and a new generation) when adopted. The MIG instances' owners are always taken (inventory "free" flags).
        Raises ``ports.runtime.NodeRuntimeError`` when the Runtime cannot be read."""
        listed = self._runtime.list_devices()
        fresh = {d.gpu.uuid: d.gpu for d in listed}
        mig = self._mig_listing(listed)

        def shape(gpus: dict[GpuUuid, Gpu], layout: dict[GpuUuid, tuple[MigInstanceInfo, ...]]
                  ) -> set[tuple[object, ...]]:
            return {(g.uuid, g.index, g.model, g.memory_bytes, g.mig_mode,
                     tuple((i.gpu_instance_id, i.compute_instance_id, i.profile, i.start, i.uuid)
                           for i in layout.get(g.uuid, ())))
                    for g in gpus.values()}

        with self._changed:
            same = shape(fresh, mig) == shape(self._gpus, self._mig)
            self.topology = node_topology((d.gpu.index, d.topology) for d in listed)
            self._mig = mig  # owners ("free") always follow the Runtime, for the inventory annotation
            if same:
                return False
            added, removed = sorted(fresh.keys() - self._gpus), sorted(self._gpus.keys() - fresh)
            self._gpus = fresh
            self._generation += 1
            self._changed.notify_all()
        if not self._mig_ok and any(g.mig_mode is MigMode.ENABLED for g in fresh.values()):
            log.warning("GPUs in MIG mode but the Runtime lacks %s: no MIG resource is served",
                        " and ".join(mig_features()))
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

    def publish_inventory(self, *, kubelet_registered: bool = True) -> None:
        """Write the inventory annotation (now as heartbeat; on a MIG node with the MIG layout, re-read from the
        Runtime first, and the MIG strategy; ``kubelet_registered``: whether kubelet would take GPU pods now) and
        the protocol fingerprint on the node, and the share enforcement label. A Runtime that cannot be
        read leaves the last listing in the annotation (logged). Raises ``ports.cluster.ClusterError``
        (NotFoundError when the node is missing)."""
        fingerprint = self.protocol.fingerprint()
        keys = self.protocol.annotations
        with self._changed:
            has_mig = bool(self._mig_gpus())
        if has_mig:
            try:
                self.resync_inventory()
            except NodeRuntimeError as error:
                log.warning("cannot re-read the MIG layout from the Runtime: %s; publishing the last one", error)
        with self._changed:
            mig = self._mig_records()
        text = encode_inventory(self.gpus(), heartbeat=self._clock(), protocol=fingerprint, mig=mig,
                                mig_strategy=self.mig_strategy if mig else "", kubelet_registered=kubelet_registered,
                                topology=self.topology)
        self._cluster.patch_node_metadata(self.node, labels={self.protocol.enforcement_label: self.enforcement.value},
                                          annotations={keys.node_inventory: text, keys.node_protocol: fingerprint})

    # ------------------------------------------------------------------ allocation
    def _select(self, kind: ResourceKey, count: int) -> tuple[Candidate, tuple[Gpu, ...], list[Candidate]]:
        pods = self._cluster.list_pods(field_selector=f"spec.nodeName={self.node}").items
        live = {p.uid for p in pods}
        for key in [k for k in self._served if k[0] not in live]:
            self._served.pop(key, None)
            self._responses.pop(key, None)
        gpus = self.gpus()
        candidates = node_candidates(pods, node=self.node, node_gpus=gpus, protocol=self.protocol)
        return select_container(kind, count, candidates, self._served), gpus, candidates

    def preferred(
        self, kind: ResourceKey, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> tuple[str, ...]:
        """IDs of the planned GPUs first (``domain.device_plugin.devices.preferred_ids``; for a MIG resource the
        planned instances' own IDs first, static strategy); without an identified plan, must-include then available
        IDs; whole GPUs without a plan: the best-connected set where the Runtime reports a topology. Never raises (a
        preference is advisory)."""
        planned: list[GpuUuid] = []
        exact: list[str] = []
        try:
            with self._alloc_lock:
                self.preferred_calls += 1
                chosen, gpus, _ = self._select(kind, size)
            planned = planned_gpus(chosen, gpus)
            if isinstance(kind, MigResource) and not self.mig_dynamic:
                with self._changed:
                    listed = {(i.gpu_uuid, i.start): i.gpu_instance_id for items in self._mig.values() for i in items}
                exact = planned_instance_ids(chosen, kind, listed)
        except Exception as error:  # advisory: log and fall back to kubelet's own order
            log.info("no preferred allocation for %d x %s: %s", size, kind.value, error)
        if not planned and not exact:  # no plan: the best-connected whole GPUs (domain.device_plugin.topology)
            planned = list(connected_gpus(kind, available, must_include, size, self.gpus(), self.topology))
        return preferred_ids(available, must_include, size, planned, exact=exact)

    def allocate(self, kind: ResourceKey, device_ids: Sequence[str]) -> ContainerAllocationResponse:
        """The response for the container kubelet is admitting (module docstring; a MIG container gets its
        planned instances); the call that completes the pod queues its allocated mark (never fails the call). Raises
        ``DevicePluginError`` subclasses, Runtime contract errors, ``ClusterError``."""
        with self._alloc_lock:
            chosen, gpus, candidates = self._select(kind, len(device_ids))
            response = self._responses.get(chosen.key)
            if response is None:
                request = runtime_request(chosen, gpus)
                names = self.responses.names(request)  # first: a bad name or strategy allocates nothing
                try:
                    answer = self._runtime.allocate(request)
                except CapacityExceededError:  # an ended pod's records may still hold the GPU: release, retry once
                    if not release_ended_now(node=self.node, runtime=self._runtime, cluster=self._cluster):
                        raise
                    answer = self._runtime.allocate(request)
                self.runtime_allocate_calls += 1
                response = self.responses.finish(answer, names=names, label=chosen.label)
                self._responses[chosen.key] = response
            self._served.setdefault(chosen.key, set()).add(kind)  # never served before: select_container's rule 1
            completes = pod_fully_served(chosen.pod_uid, candidates, self._served)  # so true on one call only
        log.info("allocated %d x %s for %s (plan, not IDs)", len(device_ids), kind.value, chosen.label)
        if completes:
            self.marker.submit(PodRef(chosen.pod_uid, chosen.namespace, chosen.pod_name))
        return response
