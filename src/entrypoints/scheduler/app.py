"""The ``scheduler`` use case: settings, and the threads that keep one replica running.

:class:`SchedulerApp` starts, in this order: the node and pod informers and, when the service has a claims port,
the ResourceClaim informer (list+watch into the service; a pod, node or claim re-created under a known name is
released by UID first; their resourceVersions are the service's resync watermarks), the HTTP listener
(``/healthz``, ``/readyz``, ``/metrics``, the read-only ``/debug/ledger`` view of the books, and the extender verbs
in extender mode;
with ``metrics_listen`` a second one without the verbs, for Prometheus), the leader elector (on gaining leadership
a new term opens at once on the elector's thread, and the ledger is rebuilt from a full listing on a thread of its
own — so the Lease keeps being renewed — once both informers have listed, retried with backoff until it succeeds or
the term ends; only then does the replica schedule: ``SchedulerService.serving``), the maintenance thread
(inventory staleness and reservation expiry every ``tick_seconds``, full resync every ``resync_seconds``) and, in
standalone mode, the scheduling loop. Every thread logs and survives any exception. :meth:`SchedulerApp.stop`
reverses it: the Lease is released first so a standby takes over at once, then the loop, the listeners and the
informers stop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import attrs

from domain.dra.claims import ClaimAllocation
from domain.dra.slices import ResourceSlice
from domain.errors import InvalidRequestError
from domain.inspection.view import VIEW_PATH, encode_view, scheduler_view
from domain.kube.annotations import MIG_STRATEGIES
from domain.kube.objects import PodObject
from domain.scheduling.framework.tiebreak import TIE_BREAKS
from domain.scheduling.nodefit.holds import hold_window
from domain.scheduling.registry import get_policy
from entrypoints._shared.command import SettingsError as SettingsError
from entrypoints._shared.httpserver import HealthEndpoint, is_loopback
from entrypoints._shared.lifecycle import RunUntilStopped
from entrypoints._shared.threads import ReplicaThreads
from ports.cluster import ClusterApi
from services._shared.informer import Informer, node_informer
from services._shared.leader import LeaderElector
from services._shared.logs import fields
from services.scheduler.extender import Extender
from services.scheduler.policies import DEFAULT_POLICY
from services.scheduler.service import SchedulerService
from services.scheduler.standalone import StandaloneLoop

from .extender_json import ExtenderJson
from .httpserver import HttpEndpoint

log = logging.getLogger(__name__)

MODES = ("extender", "standalone")
JOIN_SECONDS = 2.0
"""How long :meth:`SchedulerApp.stop` waits for its threads in all (an informer may sit in a watch until the
watch times out; the threads are daemons, so the process can exit without them)."""


MAX_SECONDS = float(2**31 - 1)
"""Longest period or timeout a setting may give (about 68 years, so ``1e9`` still means "practically never"): an
infinite or larger one would only fail later, in a wait (beyond ``threading.TIMEOUT_MAX``) or in a Lease's int32
seconds."""


def _positive(field: str, value: float) -> None:
    if not 0 < value <= MAX_SECONDS:  # also refuses NaN
        raise SettingsError(f"{field}={value!r}: must be > 0 and at most {MAX_SECONDS:.0f} seconds")


@attrs.frozen
class SchedulerSettings:
    """Validated settings of ``ljrk scheduler``.

    ``mode``: ``extender`` or ``standalone``; ``host``/``port``: the listener (port 0 = any free port);
    ``metrics_listen``: ``(host, port)`` of a second listener serving only ``/metrics``, ``/healthz`` and
    ``/readyz`` (None = none);
    ``kubeconfig``: file, or None for the in-cluster service account; ``protocol_file``: ``protocol.yaml``, or
    None for the embedded defaults; ``policy``: default policy name; ``tie_break``: tie rule name;
    ``in_memory``: use an empty in-memory cluster (development); ``lease_namespace``/``lease_name``/
    ``identity``: leader election; ``lease_duration``/``renew_deadline``/``retry_period`` (s);
    ``resync_seconds``, ``tick_seconds``, ``assumed_ttl_seconds``, ``watch_timeout_seconds`` (s);
    ``log_level``: a logging level name; ``rank_all_pods``: the extender also chooses the node of pods without
    GPU requests (for scheduler configurations without ``managedResources``; see :mod:`services.scheduler.extender`);
    ``mig_strategy``: ``static`` or ``dynamic``, the MIG placement mode (must match the node Runtimes').
    ``admission_hold_seconds``: how long a pod waiting for its devices keeps pods with a confusable request off its
    node (0: never, the same meaning as in ``ServiceConfig``: :func:`domain.scheduling.nodefit.holds.hold_window`).
    ``pod_namespace``/``pod_name``: this replica's own Pod, annotated with the protocol fingerprint
    (:mod:`services._shared.publish`); empty = not in a pod, nothing published.
    ``dra_claims``: watch ResourceClaims (``resource.k8s.io/v1``, Kubernetes 1.34+) and count the DRA allocations
    of our driver in the books (:mod:`domain.scheduling.sync.claims`), and our driver's ResourceSlices for the GPUs
    of nodes without a device plugin (:mod:`domain.scheduling.sync.draslices`); also off where the API server does
    not serve that API when the scheduler starts (:func:`.containers.dra_watched`).
    ``gpu_topology_first``: ``ServiceConfig.topology_first`` (pods of 2 or more whole GPUs go to the nodes where
    their GPUs are best connected, then the policy chooses). ``bind_workers``: standalone mode, commits (claim
    writes, binding) in flight at most while the next pods are scheduled (1..64; 1 = each pod committed before the
    next cycle; :class:`~services.scheduler.standalone.StandaloneLoop`).
    ``insecure_listen``: allow an extender-mode ``host`` that is not a loopback address. The verbs have no
    authentication: whoever reaches them can bind any pod to any node, so by default they stay inside the pod's
    network namespace (kube-scheduler calls them over loopback).

    Raises :class:`SettingsError`, or :class:`domain.errors.UnknownPolicyError` for an unknown policy or tie rule.
    """

    mode: str = "extender"
    host: str = "127.0.0.1"
    port: int = 8888
    metrics_listen: tuple[str, int] | None = None
    kubeconfig: Path | None = None
    protocol_file: Path | None = None
    policy: str = DEFAULT_POLICY
    tie_break: str = "fixed-order"
    in_memory: bool = False
    lease_namespace: str = "kube-system"
    lease_name: str = "lj-runtimekit-scheduler"
    identity: str = "lj-runtimekit-scheduler"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resync_seconds: float = 300.0
    tick_seconds: float = 5.0
    assumed_ttl_seconds: float = 60.0
    watch_timeout_seconds: float = 30.0
    log_level: str = "INFO"
    rank_all_pods: bool = False
    mig_strategy: str = "static"
    admission_hold_seconds: float = 60.0
    pod_namespace: str = ""
    pod_name: str = ""
    insecure_listen: bool = False
    dra_claims: bool = True
    gpu_topology_first: bool = False
    bind_workers: int = 16

    def __attrs_post_init__(self) -> None:
        if self.mode not in MODES:
            raise SettingsError(f"mode={self.mode!r}: must be one of {', '.join(MODES)}")
        if self.mode == "extender" and not self.insecure_listen and not is_loopback(self.host):
            raise SettingsError(f"listen host={self.host!r}: the extender verbs have no authentication and listen "
                                "on loopback only (127.0.0.1, ::1); pass --insecure-listen to serve them there")
        if not 1 <= self.bind_workers <= 64:
            raise SettingsError(f"bind_workers={self.bind_workers!r}: must be 1..64")
        if self.mig_strategy not in MIG_STRATEGIES:
            raise SettingsError(f"mig_strategy={self.mig_strategy!r}: must be one of {', '.join(MIG_STRATEGIES)}")
        if not 0 <= self.port <= 65535:
            raise SettingsError(f"port={self.port}: must be 0..65535")
        if self.metrics_listen is not None and not 0 <= self.metrics_listen[1] <= 65535:
            raise SettingsError(f"metrics_listen={self.metrics_listen!r}: the port must be 0..65535")
        get_policy(self.policy)
        if self.tie_break not in TIE_BREAKS:
            raise SettingsError(f"tie_break={self.tie_break!r}: must be one of {', '.join(TIE_BREAKS)}")
        for field in ("resync_seconds", "tick_seconds", "assumed_ttl_seconds", "watch_timeout_seconds"):
            _positive(field, getattr(self, field))
        try:
            hold_window(self.admission_hold_seconds)
        except InvalidRequestError as error:
            raise SettingsError(str(error)) from None
        for field in ("lease_duration", "renew_deadline", "retry_period"):
            _positive(field, getattr(self, field))
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise SettingsError("leader timings: need lease_duration > renew_deadline > retry_period > 0")
        if not self.identity:
            raise SettingsError("identity: must not be empty")
        if logging.getLevelName(self.log_level.upper()) not in (10, 20, 30, 40, 50):
            raise SettingsError(f"log_level={self.log_level!r}: use DEBUG, INFO, WARNING, ERROR or CRITICAL")
        if bool(self.pod_name) != bool(self.pod_namespace):
            raise SettingsError(f"pod_name={self.pod_name!r}, pod_namespace={self.pod_namespace!r}: give both "
                                "(the downward API's metadata.name and metadata.namespace) or neither")


class SchedulerApp(RunUntilStopped):
    """One scheduler replica's threads (module docstring). ``elector`` None = always leader (tests, dev).
    ``publisher`` (None: none) runs once on a thread of its own, not watched by :meth:`health` (it ends when it
    has written the fingerprint on the replica's Pod)."""

    def __init__(
        self,
        *,
        settings: SchedulerSettings,
        cluster: ClusterApi,
        service: SchedulerService,
        elector: LeaderElector | None,
        metrics_text: Callable[[], bytes],
        publisher: Callable[[threading.Event], None] | None = None,
    ) -> None:
        self.settings = settings
        self.cluster = cluster
        self.service = service
        self.elector = elector
        self.publisher = publisher
        self.loop = (StandaloneLoop(service, bind_workers=settings.bind_workers) if settings.mode == "standalone"
                     else None)
        self.extender = (Extender(service, rank_all_pods=settings.rank_all_pods) if settings.mode == "extender"
                         else None)
        timeout = settings.watch_timeout_seconds
        self.nodes = node_informer(cluster, on_upsert=service.on_node, on_delete=service.on_node_deleted,
                                   watch_timeout=timeout)
        self.pods: Informer[PodObject] = Informer(
            name="pods", list_fn=cluster.list_pods,
            watch_fn=lambda rv, t: cluster.watch_pods(resource_version=rv, timeout_seconds=t),
            key=lambda p: p.key, uid=lambda p: p.uid, on_upsert=service.on_pod,
            on_delete=service.on_pod_deleted, watch_timeout=timeout)
        service.listing.watermarks = lambda: (self.nodes.resource_version, self.pods.resource_version)
        self.claims: Informer[ClaimAllocation] | None = None
        if service.claims is not None:
            api = service.claims
            claims: Informer[ClaimAllocation] = Informer(
                name="resourceclaims", list_fn=api.list_claims,
                watch_fn=lambda rv, t: api.watch_claims(resource_version=rv, timeout_seconds=t),
                key=lambda c: c.key, uid=lambda c: c.uid, on_upsert=service.on_claim,
                on_delete=service.on_claim_deleted, watch_timeout=timeout)
            self.claims = claims
            service.listing.claim_watermark = lambda: claims.resource_version
        self.slices: Informer[ResourceSlice] | None = None
        if service.slices is not None:
            slice_api, driver = service.slices, service.protocol.dra.driver
            slices: Informer[ResourceSlice] = Informer(
                name="resourceslices", list_fn=lambda: slice_api.list_driver_slices(driver=driver),
                watch_fn=lambda rv, t: slice_api.watch_driver_slices(driver=driver, resource_version=rv,
                                                                     timeout_seconds=t),
                key=lambda s: s.name, on_upsert=service.on_slice,  # by name: a re-created slice is an update
                on_delete=service.on_slice_deleted, watch_timeout=timeout)
            self.slices = slices
            service.listing.slice_watermark = lambda: slices.resource_version
        self.threads = ReplicaThreads()
        wire = None if self.extender is None else ExtenderJson(self.extender)
        verbs = {} if wire is None else {"filter": wire.filter, "prioritize": wire.prioritize, "bind": wire.bind,
                                         "preempt": wire.preempt}
        self.http = HttpEndpoint(settings.host, settings.port, health=self.health, ready=self.ready,
                                 metrics=metrics_text, verbs=verbs, views={VIEW_PATH: self.ledger_view})
        self.metrics_http: HealthEndpoint | None = None
        if settings.metrics_listen is not None:
            try:
                self.metrics_http = HealthEndpoint(*settings.metrics_listen, health=self.health, ready=self.ready,
                                                   metrics=metrics_text, name="scheduler-metrics")
            except OSError:
                self.http.stop()  # do not keep the first port bound
                raise

    @property
    def synced(self) -> bool:
        """True once every informer (nodes, pods, claims and slices when watched) has listed."""
        claims = self.claims is None or self.claims.synced.is_set()
        slices = self.slices is None or self.slices.synced.is_set()
        return claims and slices and self.nodes.synced.is_set() and self.pods.synced.is_set()

    def health(self) -> tuple[bool, str]:
        """Liveness: every started thread still runs."""
        return self.threads.health()

    def ready(self) -> tuple[bool, str]:
        """Readiness ``(ready, reason)``: informers synced and serving, that is leading with a ledger rebuilt in
        the current term, in both modes (``docs/scheduler.md``'s contract; only the leader answers verbs or binds, so a
        standby of either mode reports 503 ``standby``)."""
        if not self.synced:
            return False, "informers not synced"
        if not self.service.serving:
            return False, "standby (not the leader, or rebuilding the ledger)"
        return True, "ok"

    def ledger_view(self) -> dict[str, object]:
        """``GET /debug/ledger``: the books as JSON (:mod:`domain.inspection.view`), read under the service's lock."""
        service = self.service
        with service.books() as books:
            view = scheduler_view(books, serving=service.serving)
        return encode_view(view)

    def start(self) -> None:
        """Start every thread (module docstring); returns at once."""
        threads, stop = self.threads, self.threads.stop_event
        threads.spawn("informer-nodes", lambda: self.nodes.run(stop))
        threads.spawn("informer-pods", lambda: self.pods.run(stop))
        if self.claims is not None:
            claims = self.claims
            threads.spawn("informer-resourceclaims", lambda: claims.run(stop))
        if self.slices is not None:
            slices = self.slices
            threads.spawn("informer-resourceslices", lambda: slices.run(stop))
        self.http.start()
        if self.metrics_http is not None:
            self.metrics_http.start()
        # always leader (no elector): one rebuild once the informers have listed
        threads.lead(self.elector, on_started=self._on_started, on_stopped=self.service.stop_leading)
        threads.spawn("maintenance", self._maintain)
        threads.publish(self.publisher)
        if self.loop is not None:
            loop = self.loop
            threads.spawn("standalone-loop", lambda: loop.run(stop))
        log.info("scheduler started", extra=fields(mode=self.settings.mode, policy=self.settings.policy,
                                                   identity=self.settings.identity))

    def _on_started(self) -> None:
        """Leadership gained: open the term now (on the caller's thread), rebuild on a thread of its own, so the
        elector keeps renewing the Lease meanwhile; the rebuild waits for both informers and ends with the
        term."""
        term = self.service.begin_leading()

        def rebuild() -> None:
            try:
                self.service.rebuild_ledger(term, ready=lambda: self.synced, stop=self.threads.stop_event)
            except Exception:  # rebuild_ledger retries what it expects; never let a bug pass silently
                log.exception("ledger rebuild thread failed", extra=fields(term=term))

        self.threads.spawn(f"rebuild-term-{term}", rebuild, watched=False)

    def _maintain(self) -> None:
        settings, since_resync = self.settings, 0.0
        while not self.threads.stop_event.wait(settings.tick_seconds):
            try:
                self.service.tick()
                since_resync += settings.tick_seconds
                if since_resync >= settings.resync_seconds and self.synced:
                    since_resync = 0.0
                    self.service.resync()
            except Exception as error:  # the next round retries; the informers keep the books meanwhile
                log.warning("maintenance failed", extra=fields(error=str(error)))

    def stop(self, *, join_seconds: float = JOIN_SECONDS) -> None:
        """Stop every thread: the elector first (it releases the Lease), then the listeners, then wait up to
        ``join_seconds`` in all for the rest (default :data:`JOIN_SECONDS`); idempotent."""
        self.threads.stop(join_seconds=join_seconds, then=self._stop_listeners)
        log.info("scheduler stopped")

    def _stop_listeners(self) -> None:
        self.http.stop()
        if self.metrics_http is not None:
            self.metrics_http.stop()
