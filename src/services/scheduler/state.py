"""The state of one scheduler replica that every part of :class:`~.service.SchedulerService` shares.

:class:`ServiceState` owns the books (:class:`~domain.scheduling.sync.LedgerSync`), the schedulers, the
reservations, the leadership terms and the one re-entrant lock that guards them, plus the read-only views of the
books. Invariant: every read or change of that state happens under the lock; listeners are called under it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from domain.dra.claims import ClaimAllocation
from domain.errors import UnknownNodeError
from domain.kube.objects import PodObject
from domain.kube.protocol import ProtocolConstants
from domain.ledger import ClusterLedger, GpuUsage
from domain.mig.gpu import PlacementMode
from domain.scheduling.sync import LedgerSync, Tombstone
from ports.claim_writes import ClaimWritesApi
from ports.cluster import EventsApi, NodesApi, PodsApi
from ports.disruption_budgets import DisruptionBudgetsApi
from ports.metrics import SchedulerMetrics
from ports.resource_claims import ResourceClaimsWatch
from ports.resource_slices import ResourceSlicesWatch

from .alerts import BookAlerts
from .leadership import Terms
from .listing import ListingFloor
from .nominations import Nominations
from .notices import Notices
from .policies import SchedulerSet, ServiceConfig
from .reservations import Reservations


class SchedulerCluster(NodesApi, PodsApi, EventsApi, Protocol):
    """The cluster roles the scheduler service uses: list nodes and pods, read a pod, record Events."""


class ServiceState:
    """The shared state and views of :class:`~.service.SchedulerService` (its docstring gives the arguments)."""

    def __init__(
        self,
        cluster: SchedulerCluster,
        protocol: ProtocolConstants,
        metrics: SchedulerMetrics,
        *,
        config: ServiceConfig | None = None,
        clock: Callable[[], float] = time.time,
        is_leader: Callable[[], bool] = lambda: True,
        commit_cluster: PodsApi | None = None,
        claims: ResourceClaimsWatch | None = None,
        budgets: DisruptionBudgetsApi | None = None,
        claim_writes: ClaimWritesApi | None = None,
        slices: ResourceSlicesWatch | None = None,
    ) -> None:
        self.cluster = cluster
        self.budgets = budgets
        """PodDisruptionBudgets, listed for preemptions (outside the lock; :mod:`.preempting`); None = none read
        (every victim set counts 0 violations in standalone mode, kube-scheduler's number in the extender's
        answer)."""
        self.claims = claims
        """ResourceClaims listed by resyncs (DRA claims in the books: :mod:`domain.scheduling.sync.claims`); None =
        none counted (no claim informer either)."""
        self.slices = slices
        """Our DRA driver's ResourceSlices listed by resyncs: the GPUs of nodes without a device plugin
        (:mod:`domain.scheduling.sync.draslices`); None = none read (no slice informer either)."""
        self.claim_writes = claim_writes
        """ResourceClaims read and allocated for pods of the standalone loop (:mod:`.claimcycle`); None = pods
        using claims are not scheduled here."""
        self.commit_cluster: PodsApi = cluster if commit_cluster is None else commit_cluster
        self.protocol = protocol
        self.metrics = metrics
        self.config = config or ServiceConfig()
        self.clock = clock
        self.is_leader = is_leader
        self._lock = threading.RLock()
        self.sync = LedgerSync(ClusterLedger(), protocol, clock=clock,
                               assumed_ttl_seconds=self.config.assumed_ttl_seconds,
                               mig_mode=PlacementMode(self.config.mig_strategy),
                               hold_window_seconds=self.config.admission_hold_seconds)
        self.pod_listeners: list[Callable[[PodObject], None]] = []
        self.deletion_listeners: list[Callable[[PodObject | Tombstone], None]] = []
        self.change_listeners: list[Callable[[], None]] = []
        self.room_listeners: list[Callable[[], None]] = []
        """Called (under the lock, must be quick) after each change that may make room without a wake."""
        self.claim_listeners: list[Callable[[str, str], None]] = []
        """Called (under the lock, must be quick) with a claim's namespace and name after each event or write of it:
        a pod using that claim may fit now (kube-scheduler requeues such pods too)."""
        self._room = 0
        self.schedulers = SchedulerSet(self.sync, protocol, self.config)
        self.listing = ListingFloor()
        """The adopted listing's resourceVersions; the app sets ``listing.watermarks`` (:mod:`.listing`)."""
        self._reservations = Reservations(self.sync, clock, released=self._changed)  # a reservation given back wakes
        self.nominations = Nominations()
        """Pods nominated (by standalone preemption, or read from their status) and the hold on their victims'
        capacity (:mod:`.nominations`)."""
        self._terms = Terms()
        self.notices = Notices(cluster, metrics, protocol, is_leader=is_leader)
        self.alerts = BookAlerts(metrics)
        metrics.watch_ledger(self._ledger_view)

    def _forget(self, uid: str) -> None:
        self.schedulers.forget(uid)
        self._reservations.forget(uid)

    def _changed(self) -> None:
        """Capacity may have appeared: wake waiting pods (the listeners)."""
        self._room += 1
        for listener in self.change_listeners:
            listener()

    def _may_have_room(self) -> None:
        """Something changed that may make room without being worth waking every waiting pod for (a node update,
        a booking that changed, a resync): pods retried on their own backoff are tried again, and those whose
        backoff ended meanwhile at once (the room listeners)."""
        self._room += 1
        for listener in self.room_listeners:
            listener()

    def _claim_changed(self, claim: ClaimAllocation) -> None:
        """Tell the claim listeners that ``claim`` was seen or written."""
        for listener in self.claim_listeners:
            listener(claim.namespace, claim.name)

    def _node_view(self, name: str) -> tuple[object, ...]:
        """What a fit reads of node ``name``, to compare before and after an update: its ledger row's version
        (inventory, health, bookings), the node table's version (labels, taints, unschedulable, watched
        annotations), its allocatable quantities, gate, quarantine, DRA-only mark and MIG layout. Equal when an
        update changed only the inventory's heartbeat or fields no fit reads. Empty for an unknown node."""
        sync = self.sync
        try:
            slot = sync.ledger.slot(name)
        except UnknownNodeError:
            return ()
        node = sync.nodes.get(slot)
        allocatable = () if node is None else tuple(sorted(node.allocatable.items()))
        return (int(sync.ledger.version[slot]), sync.nodes.version, allocatable, sync.gates.get(name),
                sync.ledger.quarantine.get(name), sync.claims_only.get(name), sync.books.last_layout(name))

    @property
    def room_version(self) -> int:
        """Counts the changes that may have made room (:meth:`room_unchanged_since`); read without the lock."""
        return self._room + self.nominations.ended

    def room_unchanged_since(self, version: int) -> bool:
        """True when nothing that may make room happened since :attr:`room_version` was ``version`` (no wake, node
        event, booking of a bound pod or claim changed, resync, gate lifted, reservation given back, nomination
        ended) and no nomination or admission hold exists now (those end by time or by decisions of their own).
        What it cannot see: a change counted after the caller's read (the room listeners cover it) and a claim
        of the pod allocated for another pod (the claim listeners). Reads without the lock (ints and two sizes), so
        a caller holding its own lock may ask."""
        idle = not len(self.nominations) and not len(self.sync.holds)  # read first: an end is counted before it goes
        return idle and self.room_version == version

    # ------------------------------------------------------------------ views
    @contextmanager
    def books(self) -> Iterator[LedgerSync]:
        """Read the books consistently: yields the :class:`LedgerSync` while holding the service's lock (events and
        cycles wait). For reading only and briefly; every change goes through the service's methods."""
        with self._lock:
            yield self.sync

    def knows_node(self, name: str) -> bool:
        """True when the ledger books node ``name``."""
        with self._lock:
            return self._known(name)

    def _known(self, name: str) -> bool:
        try:
            self.sync.ledger.slot(name)
        except UnknownNodeError:
            return False
        return True

    def gpus(self, node: str) -> list[GpuUsage]:
        """Per-GPU books of ``node`` (core milli-GPU, memory bytes). Raises UnknownNodeError."""
        with self._lock:
            return self.sync.ledger.gpus(node)

    def _ledger_view(self) -> Iterator[tuple[str, GpuUsage]]:
        with self._lock:
            ledger = self.sync.ledger
            rows = [(name, gpu) for name in ledger.node_names() for gpu in ledger.gpus(name)]
        return iter(rows)
