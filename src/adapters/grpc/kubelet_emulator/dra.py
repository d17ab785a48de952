"""Kubelet's DRA manager for one node: DRA driver discovery over the plugin watcher and claim preparation during
pod admission (kubelet ``pkg/kubelet/pluginmanager`` and ``pkg/kubelet/cm/dra``).

Discovery, as the plugin watcher does it: :class:`DraManager` polls ``registry_dir`` every ``poll_s`` seconds for
sockets; on each new one (a path, or a path re-created with a new inode) it calls pluginregistration v1
``Registration.GetInfo``, accepts type ``DRAPlugin`` with a non-empty name and a supported version
(:data:`SUPPORTED_VERSIONS`: the first of the plugin's list that kubelet knows picks the service), dials the
endpoint (the registration socket itself when empty) and answers ``NotifyRegistrationStatus(plugin_registered=True)``;
a refused plugin is told ``False`` with the error. A socket that disappears unregisters its driver. A socket whose
GetInfo fails is tried again at the next poll. The same driver registered again replaces the old connection.

Preparation (:meth:`DraManager.prepare_pod`, called by the device manager after the device-plugin allocation): every
``spec.resourceClaims`` entry is resolved to its ResourceClaim name (``PodClaim.resolved``; "" = none needed,
skipped), read through the claims port and must exist, be allocated and list the pod's UID in ``reservedFor``; each
driver of its allocation results must be registered (admission waits up to ``registration_wait_s`` seconds for one
that is not, as ``NodeKubelet``'s device-plugin wait does). Claims not prepared yet are sent to
``NodePrepareResources`` of each of their drivers (grouped per driver, one call each); an entry missing from the
answer or with an ``error`` fails the pod. Every check failure is reason :data:`FAILED_PREPARE_REASON` with a
message naming the claim; CDI names the runtime cannot resolve in ``cdi_dir`` are ``CreateContainerError``. A failed
admission gives back what it took: the pod is dropped from its claims and claims left without pods are unprepared.

A prepared claim is kept (kubelet's claim-info cache and checkpoint) with the UIDs of the admitted pods using it:
a second pod's admission does not prepare it again; :meth:`DraManager.release_pod` drops the pod and, for the last
one, calls ``NodeUnprepareResources`` (an unregistered driver or a failed call is retried at every poll).
:meth:`DraManager.restart` forgets the registrations (rediscovered) and keeps the prepared claims.

Not emulated: the per-claim ``resources.claims`` of containers (the pod model lacks it: every claim goes to every
app container), CDI device injection through claim ``config``, health (``NodeWatchResources``), kubelet's retry of a
failed preparation (the pod is rejected instead), the on-disk checkpoint (state lives in this object).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs
import grpc

from domain.dra.claims import ClaimAllocation
from domain.kube.objects import PodObject
from ports.resource_claims import ResourceClaimsApi, ResourceClaimsError

from .._pb.kubelet.dra.v1 import api_pb2 as dra
from .._pb.kubelet.pluginregistration.v1 import api_pb2 as reg
from .._pb.kubelet.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from ..client import unix_channel
from .admission import ClaimDevice, ContainerClaim
from .cdi import UnresolvableCdiDevicesError, resolve
from .endpoint import go_status

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
"""``PluginInfo.type`` of a DRA driver."""

SUPPORTED_VERSIONS = {"v1.DRAPlugin": "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
                      "v1beta1.DRAPlugin": "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"}
"""The DRA versions kubelet speaks → their gRPC service (both use the v1 messages)."""

FAILED_PREPARE_REASON = "FailedPrepareDynamicResources"
"""Rejection reason when a pod's claims cannot be prepared (kubelet's event ``FailedPrepareDynamicResources``)."""

CDI_REASON = "CreateContainerError"
"""Rejection reason when a claim's CDI names do not resolve (as for device-plugin CDI names)."""


@attrs.frozen
class DraOutcome:
    """The DRA part of one admission: the pod's prepared ``claims`` and the CDI ``env`` edits, or a ``reason`` and
    ``message`` when rejected (then nothing is held for the pod)."""

    claims: tuple[ContainerClaim, ...] = ()
    env: dict[str, str] = attrs.field(factory=dict)
    reason: str = ""
    message: str = ""


class _Driver:
    """A registered DRA driver: its registration socket (path, inode) and a channel to its DRA endpoint."""

    def __init__(self, name: str, socket: Path, inode: int, endpoint: Path, service: str) -> None:
        self.name, self.socket, self.inode = name, socket, inode
        self.channel = unix_channel(endpoint)
        self._prepare = self.channel.unary_unary(
            f"/{service}/NodePrepareResources", request_serializer=dra.NodePrepareResourcesRequest.SerializeToString,
            response_deserializer=dra.NodePrepareResourcesResponse.FromString)
        self._unprepare = self.channel.unary_unary(
            f"/{service}/NodeUnprepareResources",
            request_serializer=dra.NodeUnprepareResourcesRequest.SerializeToString,
            response_deserializer=dra.NodeUnprepareResourcesResponse.FromString)

    def prepare(self, claims: Iterable[dra.Claim], timeout_s: float) -> Any:
        return self._prepare(dra.NodePrepareResourcesRequest(claims=list(claims)), timeout=timeout_s)

    def unprepare(self, claims: Iterable[dra.Claim], timeout_s: float) -> Any:
        return self._unprepare(dra.NodeUnprepareResourcesRequest(claims=list(claims)), timeout=timeout_s)


@attrs.define
class _Claim:
    namespace: str
    name: str
    uid: str
    drivers: tuple[str, ...]
    pods: set[str] = attrs.field(factory=set)
    devices: tuple[ClaimDevice, ...] = ()
    prepared: bool = False

    def ref(self) -> dra.Claim:
        return dra.Claim(namespace=self.namespace, uid=self.uid, name=self.name)

    def view(self) -> ContainerClaim:
        return ContainerClaim(self.namespace, self.name, self.uid, self.devices)


class _RefusedError(Exception):
    """A pod's claims cannot be prepared; the message names the claim."""


class DraManager:
    """Kubelet's DRA manager of ``node`` (module docstring): drivers registered through ``registry_dir``, claims
    read from ``claims``, CDI names resolved in ``cdi_dir`` (None: recorded only), each driver RPC bounded by
    ``rpc_timeout_s`` s, the directory polled every ``poll_s`` s; admission waits up to ``registration_wait_s`` s
    for a claim's driver to register. Thread-safe."""

    def __init__(self, *, node: str, registry_dir: Path, claims: ResourceClaimsApi, cdi_dir: Path | None = None,
                 rpc_timeout_s: float = 10.0, poll_s: float = 0.1, registration_wait_s: float = 0.0) -> None:
        self.node = node
        self.registry_dir = registry_dir
        self.cdi_dir = cdi_dir
        self._claims_api = claims
        self._rpc_timeout_s = rpc_timeout_s
        self._poll_s = poll_s
        self.registration_wait_s = registration_wait_s
        self._cond = threading.Condition()
        self._serial = threading.RLock()  # preparations, releases and retried unprepares, one at a time
        self._drivers: dict[str, _Driver] = {}
        self._claims: dict[str, _Claim] = {}  # by claim UID; kept across restarts (kubelet's checkpoint)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.registrations: list[str] = []
        """Driver names of every accepted registration, oldest first."""
        self.refusals: list[str] = []
        """Registrations refused (the error told to the plugin), oldest first."""

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start watching ``registry_dir`` (made when missing); a no-op while watching."""
        with self._cond:
            if self._thread is not None:
                return
            self.registry_dir.mkdir(parents=True, exist_ok=True)
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._watch, args=(self._stop,), daemon=True,
                                            name=f"kubelet-emu-dra-{self.node}")
            self._thread.start()

    def stop(self) -> None:
        """Stop watching and forget every registration (channels closed); prepared claims are kept. Idempotent."""
        with self._cond:
            thread, self._thread = self._thread, None
            self._stop.set()
        if thread is not None:
            thread.join(timeout=self._rpc_timeout_s + 5)
        with self._cond:
            drivers, self._drivers = list(self._drivers.values()), {}
            self._cond.notify_all()
        for driver in drivers:
            driver.channel.close()

    def restart(self) -> None:
        """A kubelet restart: registrations forgotten and rediscovered, prepared claims kept."""
        self.stop()
        self.start()

    # ------------------------------------------------------------------ queries
    def registered(self) -> frozenset[str]:
        """The names of the registered drivers."""
        with self._cond:
            return frozenset(self._drivers)

    def wait_registered(self, driver: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` s until ``driver`` is registered; returns whether it is."""
        with self._cond:
            return self._cond.wait_for(lambda: driver in self._drivers, timeout=timeout_s)

    def prepared(self) -> dict[str, frozenset[str]]:
        """Prepared claims: claim UID → UIDs of the admitted pods using it (empty while its unprepare is owed)."""
        with self._cond:
            return {uid: frozenset(c.pods) for uid, c in self._claims.items() if c.prepared}

    def pod_claims(self, pod_uid: str) -> tuple[ContainerClaim, ...]:
        """The prepared claims pod ``pod_uid`` uses."""
        with self._cond:
            return tuple(c.view() for c in self._claims.values() if c.prepared and pod_uid in c.pods)

    # ------------------------------------------------------------------ discovery
    def _watch(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self._scan(stop)
                self._retry_unprepare()
            except Exception:  # the watcher must survive anything a plugin answers
                log.exception("node %s: DRA plugin watcher failed; retrying", self.node)
            stop.wait(self._poll_s)

    def _scan(self, stop: threading.Event) -> None:
        seen: dict[Path, int] = {}
        for path in sorted(self.registry_dir.iterdir()):
            try:
                if path.is_socket():
                    seen[path] = path.stat().st_ino
            except OSError:
                continue
        with self._cond:
            gone = [d for d in self._drivers.values() if seen.get(d.socket) != d.inode]
            for driver in gone:
                del self._drivers[driver.name]
            known = {(d.socket, d.inode) for d in self._drivers.values()}
            self._cond.notify_all()
        for driver in gone:
            log.info("node %s: DRA driver %s unregistered (%s gone)", self.node, driver.name, driver.socket)
            driver.channel.close()
        for path, inode in seen.items():
            if (path, inode) not in known and not stop.is_set():
                self._register(path, inode, stop)

    def _register(self, path: Path, inode: int, stop: threading.Event) -> None:
        with unix_channel(path) as channel:
            stub = reg_grpc.RegistrationStub(channel)
            try:
                info = stub.GetInfo(reg.InfoRequest(), timeout=self._rpc_timeout_s)
            except grpc.RpcError as error:
                log.debug("node %s: GetInfo on %s failed: %s", self.node, path, go_status(error))
                return
            if info.type != PLUGIN_TYPE:
                return  # another handler's plugin (CSI, device plugin): not ours
            version = next((v for v in info.supported_versions if v in SUPPORTED_VERSIONS), None)
            error_text = ("" if info.name else "DRA plugin name is empty") or (
                "" if version is not None else f"none of the versions supported by the plugin "
                f"{list(info.supported_versions)} are supported by kubelet {list(SUPPORTED_VERSIONS)}")
            driver = None
            if not error_text and version is not None:
                driver = _Driver(info.name, path, inode, Path(info.endpoint or path), SUPPORTED_VERSIONS[version])
                with self._cond:
                    stored = not stop.is_set()  # stopping: not kept, so not registered
                    old = self._drivers.pop(info.name, None) if stored else None
                    if stored:
                        self._drivers[info.name] = driver
                        self.registrations.append(info.name)
                    self._cond.notify_all()
                for closed in (c for c in (old, None if stored else driver) if c is not None):
                    closed.channel.close()
                driver, error_text = (driver, "") if stored else (None, "kubelet is stopping")
                if stored:
                    log.info("node %s: DRA driver %s registered (%s, %s)", self.node, info.name, info.endpoint,
                             version)
            else:
                self.refusals.append(error_text)
                log.error("node %s: DRA plugin %s refused: %s", self.node, path, error_text)
            try:
                stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=driver is not None,
                                                                     error=error_text), timeout=self._rpc_timeout_s)
            except grpc.RpcError as error:
                log.warning("node %s: NotifyRegistrationStatus to %s failed: %s", self.node, path, go_status(error))

    def _driver(self, name: str) -> _Driver | None:
        with self._cond:
            return self._drivers.get(name)

    # ------------------------------------------------------------------ preparation
    def prepare_pod(self, pod: PodObject) -> DraOutcome:
        """Prepare ``pod``'s claims (module docstring); never raises for claim, driver or CDI failures."""
        try:
            wanted = self._check(pod)  # outside the serial lock: it may wait for a driver the watcher registers
        except _RefusedError as error:
            return DraOutcome(reason=FAILED_PREPARE_REASON, message=str(error))
        with self._serial:
            with self._cond:
                records = []
                for claim, drivers in wanted:
                    record = self._claims.setdefault(claim.uid, _Claim(claim.namespace, claim.name, claim.uid,
                                                                      drivers))
                    record.pods.add(pod.uid)
                    records.append(record)
            try:
                self._prepare([r for r in records if not r.prepared])
                env = self._resolve([i for r in records for d in r.devices for i in d.cdi_ids])
            except _RefusedError as error:
                self.release_pod(pod.uid)
                return DraOutcome(reason=FAILED_PREPARE_REASON, message=str(error))
            except UnresolvableCdiDevicesError as error:
                self.release_pod(pod.uid)
                return DraOutcome(reason=CDI_REASON, message=f"failed to inject CDI devices of the pod's claims: "
                                                             f"{error}")
            return DraOutcome(claims=tuple(r.view() for r in records), env=env)

    def _check(self, pod: PodObject) -> list[tuple[ClaimAllocation, tuple[str, ...]]]:
        """Each claim of the pod with its drivers, or :class:`_RefusedError` naming the first claim at fault."""
        out = []
        for entry in pod.resource_claims:
            name = entry.resolved
            if name == "":
                continue
            label = f"claim {pod.namespace}/{name or entry.name}"
            if name is None:
                raise _RefusedError(f"pod claim {entry.name!r}: its ResourceClaim has not been created yet")
            try:
                claim = self._claims_api.get(pod.namespace, name)
            except ResourceClaimsError as error:
                raise _RefusedError(f"{label}: cannot read the ResourceClaim: {error}") from None
            if claim is None:
                raise _RefusedError(f"{label}: the ResourceClaim does not exist")
            if not (claim.allocated or claim.results):
                raise _RefusedError(f"{label}: the ResourceClaim is not allocated")
            if pod.uid not in claim.reserved_for:
                raise _RefusedError(f"{label}: the ResourceClaim is not reserved for pod {pod.key} ({pod.uid})")
            drivers = tuple(dict.fromkeys(r.driver for r in claim.results))
            missing = [d for d in drivers if not self.wait_registered(d, self.registration_wait_s)]
            if missing:
                raise _RefusedError(f"{label}: DRA driver {missing[0]} is not registered")
            out.append((claim, drivers))
        return out

    def _prepare(self, records: list[_Claim]) -> None:
        """NodePrepareResources per driver for ``records``; marks them prepared or raises :class:`_RefusedError`."""
        devices: dict[str, list[ClaimDevice]] = {r.uid: [] for r in records}
        for name in dict.fromkeys(d for r in records for d in r.drivers):
            mine = [r for r in records if name in r.drivers]
            driver = self._driver(name)
            if driver is None:
                raise _RefusedError(f"claim {mine[0].namespace}/{mine[0].name}: DRA driver {name} is not registered")
            try:
                reply = driver.prepare([r.ref() for r in mine], self._rpc_timeout_s)
            except grpc.RpcError as error:
                raise _RefusedError(f"claim {mine[0].namespace}/{mine[0].name}: NodePrepareResources of {name} "
                               f"failed: {go_status(error)}") from None
            for record in mine:
                label = f"claim {record.namespace}/{record.name}"
                if record.uid not in reply.claims:
                    raise _RefusedError(f"{label}: NodePrepareResources of {name} skipped it")
                entry = reply.claims[record.uid]
                if entry.error:
                    raise _RefusedError(f"{label}: NodePrepareResources of {name}: {entry.error}")
                devices[record.uid] += [ClaimDevice(name, d.pool_name, d.device_name, tuple(d.cdi_device_ids),
                                                    d.share_id if d.HasField("share_id") else None)
                                        for d in entry.devices]
        with self._cond:
            for record in records:
                record.devices, record.prepared = tuple(devices[record.uid]), True

    def _resolve(self, names: list[str]) -> dict[str, str]:
        return {} if self.cdi_dir is None else resolve(list(dict.fromkeys(names)), self.cdi_dir)

    # ------------------------------------------------------------------ release
    def release_pod(self, pod_uid: str) -> None:
        """Drop pod ``pod_uid`` from its claims and unprepare those left without pods (module docstring)."""
        with self._serial:
            with self._cond:
                for record in self._claims.values():
                    record.pods.discard(pod_uid)
            self._retry_unprepare()

    def _retry_unprepare(self) -> None:
        with self._serial:
            with self._cond:
                owed = [r for r in self._claims.values() if not r.pods]
            for record in owed:
                if self._unprepare(record):
                    with self._cond:
                        if not record.pods:
                            self._claims.pop(record.uid, None)
                            self._cond.notify_all()

    def _unprepare(self, record: _Claim) -> bool:
        """NodeUnprepareResources of ``record`` on each of its drivers; True when every one succeeded."""
        done = True
        for name in record.drivers:
            driver = self._driver(name)
            if driver is None:
                done = False
                continue
            try:
                reply = driver.unprepare([record.ref()], self._rpc_timeout_s)
                error = reply.claims[record.uid].error if record.uid in reply.claims else "no answer for the claim"
            except grpc.RpcError as failure:
                error = go_status(failure)
            if error:
                log.warning("node %s: unprepare claim %s/%s on %s failed: %s; retrying", self.node,
                            record.namespace, record.name, name, error)
                done = False
        if done:
            log.info("node %s: unprepared claim %s/%s", self.node, record.namespace, record.name)
        return done

