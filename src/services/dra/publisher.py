"""Publishes the node's GPUs as the DRA driver's ResourceSlices and keeps them current.

* **Source**: the node Runtime (``ports.runtime.NodeRuntime``), as for the device plugin: ``ListDevices`` gives
  the GPUs, MIG mode and instances; ``WatchHealth`` says when something changed (each event, and each re-open
  of the stream after a Runtime restart, triggers a fresh ``ListDevices``). The MIG strategy is the Runtime's
  (``mig-dynamic`` feature: every placement is offered; else its listed instances).
* **Content and generation**: :func:`domain.dra.build.desired_content` and :class:`domain.dra.pool.PoolState`;
  the pool resumes from the slices already stored (a restart with the same GPUs writes nothing and keeps the
  generation), and a change bumps the generation once.
* **Writes**: :func:`domain.dra.pool.plan_writes` against the stored slices, creates then updates then deletes;
  every slice has the Node as owner (read once from the API: its UID), so the garbage collector removes the
  slices with the Node. A write that conflicts (someone else wrote) re-reads and re-plans once per call.
* **Repair**: :meth:`SlicePublisher.resync` publishes again every few seconds, so slices deleted or edited by
  someone else come back: the kubelet deletes every ResourceSlice of its node when it starts, and a driver's
  slices when its plugin stays unregistered (``wipeResourceSlices`` in kubelet's ``DRAPluginManager``, 1.34+);
  a pass that finds the stored slices right writes nothing.
* **Leaving for good**: :meth:`SlicePublisher.withdraw` deletes the node's slices (``ljrk dra-driver --withdraw``).
  Stopping does not withdraw: a restarting driver keeps its devices visible.

Thread-safe: :meth:`publish` and :meth:`withdraw` are serialised.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

from domain.dra.build import GpuTopology, UnhealthyPolicy, desired_content
from domain.dra.pool import PoolState, SlicePlan, plan_writes
from domain.dra.slices import NodeOwner, ResourceSlice, SliceContent
from domain.errors import InvalidRequestError
from domain.gpu import GpuUuid
from domain.kube.protocol import ProtocolConstants
from domain.runtime.features import MIG_DYNAMIC
from ports.cluster import ClusterError, ConflictError, NodesApi
from ports.resource_slices import ResourceSlicesApi
from ports.runtime import HealthStream, NodeRuntime, NodeRuntimeError

log = logging.getLogger(__name__)

RETRY_S = 1.0
"""Pause before re-opening a failed health stream, s."""

REQUIRED_FEATURES = ("inventory", "health-watch")
"""Runtime features the publisher uses (``domain.runtime.features``); checked at start."""


class SlicePublisher:
    """The node's ResourceSlices (module docstring) for node ``node``. ``topology``: NUMA node and PCIe root per
    GPU, overriding what the Runtime reports (Runtime >= 1.2.0 reports them). Construction reads the Runtime's
    version: raises ``ports.runtime.NodeRuntimeError`` when it cannot be reached and ``UnsupportedFeatureError``
    when it lacks a feature of :data:`REQUIRED_FEATURES`."""

    def __init__(self, *, node: str, runtime: NodeRuntime, slices: ResourceSlicesApi, nodes: NodesApi,
                 protocol: ProtocolConstants, unhealthy: UnhealthyPolicy = UnhealthyPolicy.TAINT,
                 topology: Mapping[GpuUuid, GpuTopology] | None = None) -> None:
        self.node = node
        self._runtime = runtime
        self._slices = slices
        self._nodes = nodes
        self._protocol = protocol
        self._unhealthy = unhealthy
        self._topology = dict(topology or {})
        info = runtime.get_version()
        info.require(*REQUIRED_FEATURES)
        self._mig_dynamic = info.supports(MIG_DYNAMIC)
        self._lock = threading.Lock()
        self._pool: PoolState | None = None
        self._stream: HealthStream | None = None
        self._stream_lock = threading.Lock()  # apart from _lock: close() must not wait for a publication
        self.publications = 0
        """Passes that wrote something (for tests and logs)."""

    @property
    def driver(self) -> str:
        """The DRA driver name (``protocol.dra.driver``)."""
        return self._protocol.dra.driver

    @property
    def generation(self) -> int:
        """The pool generation last published (0: none yet)."""
        return 0 if self._pool is None else self._pool.generation

    def _resume(self, uid: str, stored: Sequence[ResourceSlice], content: Sequence[SliceContent]) -> PoolState:
        """A pool resumed from ``stored`` under the Node's ``uid`` and advanced to ``content``."""
        pool = PoolState(self.node, self.driver, owner=NodeOwner(self.node, uid) if uid else None)
        pool.resume(stored)
        pool.advance(content)
        return pool

    def publish(self) -> bool:
        """Read the Runtime's devices and make the stored slices match; True when something was written. The Node
        and the stored slices are read each time: a recreated Node (new UID), or a stored generation above this
        publisher's (another instance wrote meanwhile, e.g. during a rolling update), restarts the pool from what is
        stored, so the owner is current and the generation only grows. Raises ``ports.runtime.NodeRuntimeError``
        (Runtime unreadable) and ``ports.cluster.ClusterError`` (NotFoundError when the Node is missing)."""
        listed = self._runtime.list_devices()
        content = desired_content(listed, protocol=self._protocol, mig_dynamic=self._mig_dynamic,
                                  topology=self._topology, unhealthy=self._unhealthy)
        uid = self._nodes.get_node(self.node).uid
        with self._lock:
            stored = self._slices.list_resource_slices(driver=self.driver, node=self.node)
            pool, before = self._pool, self.generation
            owner = "" if pool is None or pool.owner is None else pool.owner.uid
            if pool is None or owner != uid or max((s.generation for s in stored), default=0) > pool.generation:
                pool = self._resume(uid, stored, content)
            else:
                pool.advance(content)
            self._pool = pool
            if pool.generation != before:
                log.info("node %s: pool generation %d (%d slices)", self.node, pool.generation, len(content))
            try:
                return self._apply(plan_writes(pool.slices(), stored))
            except ConflictError:  # written between our read and write: resume from what is stored now, once
                stored = self._slices.list_resource_slices(driver=self.driver, node=self.node)
                self._pool = pool = self._resume(uid, stored, content)
                return self._apply(plan_writes(pool.slices(), stored))

    def _apply(self, plan: SlicePlan) -> bool:
        for resource_slice in plan.create:
            self._slices.create_resource_slice(resource_slice)
        for resource_slice in plan.update:
            self._slices.update_resource_slice(resource_slice)
        for name in plan.delete:
            self._slices.delete_resource_slice(name)
        if not plan.empty:
            self.publications += 1
        return not plan.empty

    def withdraw(self) -> int:
        """Delete every slice of this driver on this node (the driver leaves for good); returns how many. Raises
        ``ports.cluster.ClusterError``."""
        with self._lock:
            self._pool = None
            return withdraw_node(self._slices, driver=self.driver, node=self.node)

    def follow(self, stop: threading.Event) -> None:
        """Publish, then re-publish on every Runtime health event and stream re-open, until ``stop`` is set and
        :meth:`close` is called; failures are logged and retried after :data:`RETRY_S`. Never raises."""
        while not stop.is_set():
            try:
                stream = self._runtime.watch_health()
                with self._stream_lock:
                    self._stream = stream
                if stop.is_set():
                    break
                self.publish()
                for _change in stream:
                    self.publish()
            except (NodeRuntimeError, ClusterError, InvalidRequestError) as error:  # a daemon: log, retry
                log.warning("node %s: publishing ResourceSlices failed: %s; retrying in %.0f s", self.node, error,
                            RETRY_S)
            except Exception:  # anything else: the thread must survive it too
                log.exception("node %s: publishing ResourceSlices failed; retrying in %.0f s", self.node, RETRY_S)
            finally:
                self.close()
            stop.wait(RETRY_S)

    def resync(self, stop: threading.Event, interval_s: float) -> None:
        """Every ``interval_s`` seconds until ``stop`` is set, :meth:`publish` (module docstring, "Repair");
        failures are logged and tried again at the next pass. Never raises."""
        while not stop.wait(interval_s):
            try:
                if self.publish():
                    log.info("node %s: ResourceSlices repaired (stored ones were missing or changed)", self.node)
            except (NodeRuntimeError, ClusterError, InvalidRequestError) as error:  # a daemon: log, retry
                log.warning("node %s: re-publishing ResourceSlices failed: %s", self.node, error)
            except Exception:  # anything else: the thread must survive it too
                log.exception("node %s: re-publishing ResourceSlices failed", self.node)

    def close(self) -> None:
        """Close the open health stream, if any (ends :meth:`follow`'s current pass)."""
        with self._stream_lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()


def withdraw_node(slices: ResourceSlicesApi, *, driver: str, node: str) -> int:
    """Delete every slice of ``driver`` on ``node`` (no Runtime needed: the driver leaves for good); returns how
    many. Raises ``ports.cluster.ClusterError``."""
    stored = slices.list_resource_slices(driver=driver, node=node)
    for resource_slice in stored:
        slices.delete_resource_slice(resource_slice.name)
    log.info("node %s: withdrew %d ResourceSlices of %s", node, len(stored), driver)
    return len(stored)
