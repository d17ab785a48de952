"""Kubelet's device manager for one node: pod admission over the plugins of :class:`~.registration.PluginRegistry`
(kubelet ``pkg/kubelet/cm/devicemanager/manager.go``).

:meth:`DeviceManager.admit_pod` admits one pod at a time (kubelet's admit handlers run serially): per container
(init containers first, then app containers) and per registered resource in its limits it picks IDs
(:func:`~.admission.pick_devices`: IDs lent by finished init containers, then GetPreferredAllocation when the plugin
offers it, then any free healthy ID), reserves them, calls Allocate with one ContainerAllocateRequest, records the
IDs and the response (kubelet's ``podDevices``) and merges the container's responses; PreStartContainer follows for
plugins that ask for it. IDs stay allocated until :meth:`DeviceManager.release_pod` (the pod ended, was deleted or
was rejected). Allocations survive :meth:`~.registration.PluginRegistry.restart`, as kubelet restores them from its
checkpoint, so running pods keep their devices across a kubelet restart.

Deliberately not emulated: topology (NUMA) alignment, the 5-minute grace after which a lost resource is dropped,
node status capacity/allocatable updates, the on-disk checkpoint (state lives in memory: across restarts of the
same object, not across processes), restartable init containers (sidecars).

CDI: each container's CDI device names (``ContainerAllocateResponse.cdi_devices``, merged per container) are kept in
its admission. With ``cdi_dir`` (a CDI-enabled container runtime, as containerd 2) a newly admitted pod's names must
resolve against the spec files there (:mod:`.cdi`), else the pod is rejected with :data:`CREATE_CONTAINER_ERROR` (on a
real node the container fails to be created); the env edits they inject are recorded as the container's
``cdi_env``. Without ``cdi_dir`` (containerd 1.x without CDI) the names are recorded and otherwise ignored.

DRA: with a :class:`~.dra.DraManager` (``dra``), a pod with ``spec.resourceClaims`` has its claims prepared after
the device-plugin allocation (:meth:`~.dra.DraManager.prepare_pod`); a failure rejects the pod and frees its
devices. The claims and their CDI env edits go to every app container's admission. :meth:`DeviceManager.start`,
``stop`` and ``restart`` start, stop and restart the DRA manager with the Registration server;
:meth:`DeviceManager.release_pod` releases the pod's claims too.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import attrs
import grpc

from domain.device_plugin.pods import admission_order
from domain.kube.objects import ContainerSpec, PodObject
from domain.runtime.types import ContainerAllocationResponse

from .admission import (
    HEALTHY,
    UNEXPECTED_ADMISSION_ERROR,
    AdmissionError,
    AdmissionResult,
    ContainerAdmission,
    ContainerClaim,
    PodAdmission,
    container_requests,
    merge_responses,
    out_of_reason,
    pick_devices,
    unexpected_message,
)
from .cdi import UnresolvableCdiDevicesError, resolve
from .dra import DraManager
from .endpoint import PluginEndpoint, go_status
from .registration import DIAL_TIMEOUT_S, RPC_TIMEOUT_S, PluginRegistry, response_from_pb

PRE_START_TIMEOUT_S = 30.0
"""``KubeletPreStartContainerRPCTimeoutInSecs``."""

CREATE_CONTAINER_ERROR = "CreateContainerError"
"""Reason used when a container's CDI devices do not resolve (the runtime cannot create it; the emulator fails
the pod)."""

RUN_CONTAINER_ERROR = "RunContainerError"
"""Reason used when PreStartContainer fails (kubelet fails the container start; the emulator fails the pod)."""


@attrs.define
class _ContainerRecord:
    init: bool
    devices: dict[str, list[str]] = attrs.field(factory=dict)
    responses: dict[str, ContainerAllocationResponse] = attrs.field(factory=dict)
    cdi_env: dict[str, str] = attrs.field(factory=dict)


@attrs.define
class _PodRecord:
    namespace: str
    name: str
    containers: dict[str, _ContainerRecord] = attrs.field(factory=dict)  # admission order
    admitted: bool = False
    claims: tuple[ContainerClaim, ...] = ()  # prepared DRA claims, given to every app container


class DeviceManager(PluginRegistry):
    """Kubelet's device manager on ``plugin_dir``: Registration and device lists (:class:`PluginRegistry`) plus pod
    admission (module docstring; ``cdi_dir``: the CDI spec directory of a CDI-enabled runtime, or None; ``dra``: the
    DRA manager, or None for device plugins only; assignable after construction). Thread-safe. Times in seconds as
    in :class:`PluginRegistry`."""

    def __init__(self, plugin_dir: Path, *, dial_timeout_s: float = DIAL_TIMEOUT_S,
                 rpc_timeout_s: float = RPC_TIMEOUT_S, max_workers: int = 4, cdi_dir: Path | None = None,
                 dra: DraManager | None = None) -> None:
        super().__init__(plugin_dir, dial_timeout_s=dial_timeout_s, rpc_timeout_s=rpc_timeout_s,
                         max_workers=max_workers)
        self.cdi_dir = cdi_dir
        self.dra = dra
        self._admission = threading.Lock()  # kubelet admits one pod at a time
        self._pods: dict[str, _PodRecord] = {}

    def allocated_devices(self) -> dict[str, frozenset[str]]:
        """Device IDs held by admitted (or being admitted) pods per resource (kubelet's ``allocatedDevices``)."""
        with self._lock:
            out: dict[str, set[str]] = {}
            for record in self._pods.values():
                for container in record.containers.values():
                    for resource, ids in container.devices.items():
                        out.setdefault(resource, set()).update(ids)
            return {resource: frozenset(ids) for resource, ids in out.items()}

    def start(self) -> None:
        """Serve Registration (:meth:`PluginRegistry.start`) and start the DRA manager, if any."""
        super().start()
        if self.dra is not None:
            self.dra.start()

    def stop(self, *, remove_socket: bool = True) -> None:
        """Stop the DRA manager, if any (registrations forgotten, claims kept), then :meth:`PluginRegistry.stop`."""
        if self.dra is not None:
            self.dra.stop()
        super().stop(remove_socket=remove_socket)

    # ------------------------------------------------------------------ admission
    def admit_pod(self, pod: PodObject) -> AdmissionResult:
        """Admit ``pod`` (bound to this node; module docstring). Containers already holding devices (a pod admitted
        before a restart) keep them without a new Allocate, and PreStartContainer is not repeated for them. Returns
        the admission, or kubelet's reason and message when rejected (the pod then holds nothing). Never raises for
        pod content or plugin failures."""
        with self._admission:
            try:
                plan = [(spec, container_requests(spec)) for spec in admission_order(pod)]
            except AdmissionError as error:
                return AdmissionResult(None, UNEXPECTED_ADMISSION_ERROR, unexpected_message(str(error)))
            missing = self._unregistered(plan)
            if missing is not None:
                return missing
            with self._lock:
                record = self._pods.get(pod.uid)
                fresh = record is None
                if record is None:
                    record = self._pods[pod.uid] = _PodRecord(pod.namespace, pod.name)
            try:
                reuse: dict[str, list[str]] = {}
                for spec, amounts in plan:
                    self._allocate_container(pod.uid, record, spec, amounts, reuse)
            except AdmissionError as error:
                self.release_pod(pod.uid)  # a rejected pod is not active: kubelet frees what it got
                return AdmissionResult(None, UNEXPECTED_ADMISSION_ERROR, unexpected_message(str(error)))
            failure = self._pre_start(record) if fresh else None
            if failure is not None:
                self.release_pod(pod.uid)
                return AdmissionResult(None, RUN_CONTAINER_ERROR, failure)
            failure = self._inject_cdi(record) if fresh else None
            if failure is not None:
                self.release_pod(pod.uid)
                return AdmissionResult(None, CREATE_CONTAINER_ERROR, failure)
            outcome = self.dra.prepare_pod(pod) if self.dra is not None and pod.resource_claims else None
            if outcome is not None and outcome.reason:
                self.release_pod(pod.uid)
                return AdmissionResult(None, outcome.reason, outcome.message)
            with self._lock:
                if outcome is not None:
                    record.claims = outcome.claims
                    for container in record.containers.values():
                        container.cdi_env = container.cdi_env if container.init else {**container.cdi_env,
                                                                                       **outcome.env}
                record.admitted = True
                self._lock.notify_all()
                return AdmissionResult(self._snapshot(pod.uid, record))

    def _unregistered(self, plan: Sequence[tuple[ContainerSpec, dict[str, int]]]) -> AdmissionResult | None:
        """The predicate admit handler's verdict for extended resources no plugin ever registered (capacity 0)."""
        known = self.known_resources
        for _, amounts in plan:
            for resource in amounts:
                if resource in known:
                    continue
                apps = sum(a.get(resource, 0) for s, a in plan if not s.init)
                inits = max((a.get(resource, 0) for s, a in plan if s.init), default=0)
                return AdmissionResult(None, out_of_reason(resource),
                                       f"Node didn't have enough resource: {resource}, requested: "
                                       f"{max(apps, inits)}, used: 0, capacity: 0")
        return None

    def _allocate_container(self, uid: str, record: _PodRecord, spec: ContainerSpec, amounts: dict[str, int],
                            reuse: dict[str, list[str]]) -> None:
        with self._lock:
            container = record.containers.setdefault(spec.name, _ContainerRecord(init=spec.init))
        for resource, required in amounts.items():
            ids = self._devices_to_allocate(uid, spec.name, container, resource, required, reuse.get(resource, []))
            if ids is None:
                continue
            endpoint = self._endpoints_get(resource)
            try:
                if endpoint is None:
                    raise AdmissionError(f"unknown Device Plugin {resource}")
                reply = endpoint.allocate(ids)
                if not reply.container_responses:
                    raise AdmissionError(f"no containers return in allocation response {reply}")
            except grpc.RpcError as error:
                with self._lock:
                    container.devices.pop(resource, None)
                raise AdmissionError(go_status(error)) from None
            except AdmissionError:
                with self._lock:
                    container.devices.pop(resource, None)
                raise
            response = response_from_pb(reply.container_responses[0])
            with self._lock:
                container.responses[resource] = response
        for resource, ids in container.devices.items():  # init containers lend, app containers take
            if spec.init:
                reuse[resource] = [*reuse.get(resource, []), *(i for i in ids if i not in reuse.get(resource, []))]
            else:
                reuse[resource] = [i for i in reuse.get(resource, []) if i not in ids]

    def _endpoints_get(self, resource: str) -> PluginEndpoint | None:
        with self._lock:
            return self._endpoints.get(resource)

    def _devices_to_allocate(self, uid: str, name: str, container: _ContainerRecord, resource: str, required: int,
                             reusable: list[str]) -> list[str] | None:
        """Kubelet's ``devicesToAllocate``: None when the container already holds the IDs; otherwise the chosen IDs,
        reserved in ``container`` before the Allocate call. Raises AdmissionError with kubelet's messages."""
        with self._lock:
            held = container.devices.get(resource)
            if held is not None:
                if len(held) != required:
                    raise AdmissionError(f"pod {uid!r} container {name!r} changed request for resource {resource!r} "
                                         f"from {len(held)} to {required}")
                return None
            listed = self._devices.get(resource, {})
            healthy = [i for i, h in listed.items() if h == HEALTHY]
            if not healthy:
                raise AdmissionError(f"no healthy devices present; cannot allocate unhealthy devices {resource}")
            in_use = {i for r in self._pods.values() for c in r.containers.values()
                      for i in c.devices.get(resource, ())}
            available = [i for i in healthy if i not in in_use]
            endpoint = self._endpoints.get(resource)
        preferred = None
        if endpoint is not None and endpoint.options.get_preferred_allocation_available:
            def preferred(avail: Sequence[str], must: Sequence[str], size: int) -> list[str]:
                return endpoint.preferred(list(avail), list(must), size)
        try:
            ids = pick_devices(resource=resource, required=required, reusable=reusable, available=available,
                               preferred=preferred)
        except grpc.RpcError as error:
            raise AdmissionError(go_status(error)) from None
        with self._lock:
            container.devices[resource] = ids
        return ids

    def _pre_start(self, record: _PodRecord) -> str | None:
        """PreStartContainer for every container and resource whose plugin asks for it; the failure text or None."""
        for name, container in record.containers.items():
            for resource, ids in container.devices.items():
                endpoint = self._endpoints_get(resource)
                if endpoint is None or not endpoint.options.pre_start_required:
                    continue
                try:
                    endpoint.pre_start(ids, PRE_START_TIMEOUT_S)
                except grpc.RpcError as error:
                    return f"container {name!r}: PreStartContainer {resource}: {go_status(error)}"
        return None

    def _inject_cdi(self, record: _PodRecord) -> str | None:
        """Resolve every container's CDI names in :attr:`cdi_dir` and record their env (module docstring); the
        failure text or None."""
        if self.cdi_dir is None:
            return None
        for name, container in record.containers.items():
            merged = merge_responses(container.responses.values(), container=name)
            try:
                env = resolve(merged.cdi_devices, self.cdi_dir)
            except UnresolvableCdiDevicesError as error:
                return f"container {name!r}: failed to inject CDI devices: {error}"
            with self._lock:
                container.cdi_env = env
        return None

    def release_pod(self, uid: str) -> bool:
        """Free every device and DRA claim of pod ``uid`` (it ended, was deleted or rejected); True when it held a
        record."""
        with self._lock:
            record = self._pods.pop(uid, None)
            self._lock.notify_all()
        if self.dra is not None:
            self.dra.release_pod(uid)
        return record is not None

    def admission(self, uid: str) -> PodAdmission | None:
        """The admission of pod ``uid``, or None when it is not admitted."""
        with self._lock:
            record = self._pods.get(uid)
            return self._snapshot(uid, record) if record is not None and record.admitted else None

    def admitted(self) -> tuple[PodAdmission, ...]:
        """Every admitted pod (what pod-resources ``List`` reports), in admission order."""
        with self._lock:
            return tuple(self._snapshot(uid, r) for uid, r in self._pods.items() if r.admitted)

    @staticmethod
    def _snapshot(uid: str, record: _PodRecord) -> PodAdmission:
        containers = []
        for name, container in record.containers.items():
            responses = dict(container.responses)
            containers.append(ContainerAdmission(
                name=name, init=container.init,
                devices={resource: tuple(ids) for resource, ids in container.devices.items()},
                responses=responses, runtime=merge_responses(responses.values(), container=name),
                cdi_env=dict(container.cdi_env), claims=() if container.init else record.claims,
            ))
        return PodAdmission(uid, record.namespace, record.name, tuple(containers))
