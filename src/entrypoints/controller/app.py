"""The ``controller`` use case: settings, and the threads that keep one replica running.

:class:`ControllerApp` starts the node informer and the Job informer (Jobs of ``namespace`` with our
``managed-by`` label only; both feed :class:`~.service.ToggleController`), the HTTP listener (``/healthz``,
``/readyz``, ``/metrics``), the leader elector (its ``on_started`` runs the startup sweep; without leader
election the replica leads from the start) and the worker that reconciles due nodes. Every thread logs and
survives any exception. :meth:`ControllerApp.stop` releases the Lease first (a standby takes over at once), then
stops the listener, the worker and the informers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import attrs

from domain.kube.objects import JobObject
from domain.toggle.jobs import DEFAULT_IMAGE, DEFAULT_SOCKET, JOB_SELECTOR
from entrypoints._shared.command import SettingsError as SettingsError
from entrypoints._shared.httpserver import HealthEndpoint
from entrypoints._shared.lifecycle import RunUntilStopped
from entrypoints._shared.threads import ReplicaThreads
from ports.cluster import ClusterApi
from services._shared.informer import Informer, node_informer
from services._shared.leader import LeaderElector
from services._shared.logs import fields
from services.controller.service import ToggleController

log = logging.getLogger(__name__)

JOIN_SECONDS = 2.0
"""How long :meth:`ControllerApp.stop` waits for its threads in all (they are daemons)."""


@attrs.frozen
class ControllerSettings:
    """Validated settings of ``ljrk controller``.

    ``kubeconfig``: file, or None for the in-cluster service account; ``protocol_file``: ``protocol.yaml``, or
    None for the embedded defaults; ``namespace``: where the Jobs run (and the default Lease namespace);
    ``job_image``: image of the Jobs (``ljrk`` on its PATH); ``config_daemon_socket``: the node config daemon's
    socket on the nodes; ``job_service_account``: the Jobs' service account (empty = the namespace default);
    ``max_retries``: retries after a failed first try before the node is ``failed`` (so ``max_retries + 1``
    tries); ``backoff_base``/``backoff_cap`` (s): retry delays; ``failed_job_ttl`` (s): how long failed Jobs are
    kept; ``job_timeout`` (s): the agent's ``--timeout``; ``job_deadline`` (s): the Jobs'
    ``activeDeadlineSeconds``; ``host``/``port``: the listener; ``leader_elect`` with ``lease_namespace`` (empty
    = ``namespace``), ``lease_name``, ``identity`` and ``lease_duration``/``renew_deadline``/``retry_period``
    (s); ``in_memory``: an empty in-memory cluster (development); ``watch_timeout_seconds``,
    ``resync_seconds``, ``retry_seconds`` (s); ``log_level``; ``pod_namespace``/``pod_name``: this replica's own
    Pod, annotated with the protocol fingerprint (:mod:`services._shared.publish`; empty = not in a pod,
    nothing published). Raises :class:`SettingsError`.
    """

    kubeconfig: Path | None = None
    protocol_file: Path | None = None
    namespace: str = "kube-system"
    job_image: str = DEFAULT_IMAGE
    config_daemon_socket: str = DEFAULT_SOCKET
    job_service_account: str = ""
    max_retries: int = 4
    backoff_base: float = 10.0
    backoff_cap: float = 300.0
    failed_job_ttl: float = 3600.0
    job_timeout: float = 60.0
    job_deadline: float = 300.0
    host: str = "0.0.0.0"
    port: int = 8081
    leader_elect: bool = True
    lease_namespace: str = ""
    lease_name: str = "lj-runtimekit-controller"
    identity: str = "lj-runtimekit-controller"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    in_memory: bool = False
    watch_timeout_seconds: float = 300.0
    resync_seconds: float = 600.0
    retry_seconds: float = 5.0
    log_level: str = "INFO"
    pod_namespace: str = ""
    pod_name: str = ""

    def __attrs_post_init__(self) -> None:
        if not self.namespace:
            raise SettingsError("namespace: must not be empty")
        if not 0 <= self.port <= 65535:
            raise SettingsError(f"port={self.port}: must be 0..65535")
        if self.max_retries < 0:
            raise SettingsError(f"max_retries={self.max_retries}: must be >= 0")
        if not 0 < self.backoff_base <= self.backoff_cap:
            raise SettingsError("backoff: need 0 < backoff_base <= backoff_cap")
        if self.failed_job_ttl < 0:
            raise SettingsError(f"failed_job_ttl={self.failed_job_ttl}: must be >= 0")
        if not self.job_timeout > 0 or self.job_deadline < max(1.0, self.job_timeout):
            raise SettingsError("job times: need job_timeout > 0 and job_deadline >= job_timeout (s)")
        for field in ("watch_timeout_seconds", "resync_seconds", "retry_seconds"):
            if not getattr(self, field) > 0:
                raise SettingsError(f"{field}={getattr(self, field)!r}: must be > 0")
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise SettingsError("leader timings: need lease_duration > renew_deadline > retry_period > 0")
        if not self.identity:
            raise SettingsError("identity: must not be empty")
        if logging.getLevelName(self.log_level.upper()) not in (10, 20, 30, 40, 50):
            raise SettingsError(f"log_level={self.log_level!r}: use DEBUG, INFO, WARNING, ERROR or CRITICAL")
        if bool(self.pod_name) != bool(self.pod_namespace):
            raise SettingsError(f"pod_name={self.pod_name!r}, pod_namespace={self.pod_namespace!r}: give both "
                                "(the downward API's metadata.name and metadata.namespace) or neither")

    @property
    def max_tries(self) -> int:
        """Tries per target before ``failed``: the first one plus ``max_retries``."""
        return self.max_retries + 1


class ControllerApp(RunUntilStopped):
    """One controller replica's threads (module docstring). ``elector`` None = always leader. ``publisher`` (None:
    none) runs once on a thread of its own, not watched by :meth:`health` (it ends once it has written the
    fingerprint on the replica's Pod)."""

    def __init__(
        self,
        *,
        settings: ControllerSettings,
        cluster: ClusterApi,
        controller: ToggleController,
        elector: LeaderElector | None,
        metrics_text: Callable[[], bytes],
        publisher: Callable[[threading.Event], None] | None = None,
    ) -> None:
        self.settings = settings
        self.controller = controller
        self.elector = elector
        self.publisher = publisher
        namespace, timeout = settings.namespace, settings.watch_timeout_seconds
        self.nodes = node_informer(cluster, on_upsert=controller.on_node, on_delete=controller.on_node_deleted,
                                   watch_timeout=timeout)
        self.jobs: Informer[JobObject] = Informer(
            name="jobs", list_fn=lambda: cluster.list_jobs(namespace, label_selector=JOB_SELECTOR),
            watch_fn=lambda rv, t: cluster.watch_jobs(namespace, resource_version=rv, timeout_seconds=t,
                                                      label_selector=JOB_SELECTOR),
            key=lambda j: j.name, uid=lambda j: j.uid, on_upsert=controller.on_job,
            on_delete=controller.on_job_deleted, watch_timeout=timeout)
        controller.synced = lambda: self.synced
        self.threads = ReplicaThreads()
        self.http = HealthEndpoint(settings.host, settings.port, health=self.health, ready=self.ready,
                                   metrics=metrics_text, name="controller")

    @property
    def synced(self) -> bool:
        """True once both informers have listed."""
        return self.nodes.synced.is_set() and self.jobs.synced.is_set()

    def health(self) -> tuple[bool, str]:
        """Liveness: every started thread still runs."""
        return self.threads.health()

    def ready(self) -> tuple[bool, str]:
        """Readiness: both informers have listed."""
        return (True, "ok") if self.synced else (False, "informers not synced")

    def start(self) -> None:
        """Start every thread (module docstring); returns at once."""
        threads, stop, controller = self.threads, self.threads.stop_event, self.controller
        threads.spawn("informer-nodes", lambda: self.nodes.run(stop))
        threads.spawn("informer-jobs", lambda: self.jobs.run(stop))
        self.http.start()
        threads.lead(self.elector, on_started=controller.begin_leading, on_stopped=controller.stop_leading)
        threads.spawn("worker", lambda: controller.run(stop))
        threads.publish(self.publisher)
        host, port = self.http.address
        log.info("controller started", extra=fields(namespace=self.settings.namespace, listen=f"{host}:{port}",
                                                    leader_elect=self.elector is not None))

    def stop(self, *, join_seconds: float = JOIN_SECONDS) -> None:
        """Stop every thread: the elector first (it releases the Lease), then the listener, then wait up to
        ``join_seconds`` in all for the rest; idempotent."""
        self.threads.stop(join_seconds=join_seconds, then=self.http.stop)
        log.info("controller stopped")
