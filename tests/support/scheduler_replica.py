"""A scheduler replica in-process — its service, app and HTTP listener on a free local port — over any cluster,
for tests that drive it through its HTTP API or through the cluster it watches."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from adapters.prometheus import PrometheusSchedulerMetrics
from entrypoints.scheduler.app import SchedulerApp, SchedulerSettings
from ports.cluster import ClusterApi
from services.scheduler.service import SchedulerService, ServiceConfig
from support.kube_builders import PROTOCOL
from support.polling import eventually

NO_HOLDS = ServiceConfig(policy="fgd", admission_hold_seconds=None)
"""No device plugin in these tests marks pods allocated, so admission holds are off."""


class SchedulerReplica:
    """``service`` and ``app`` (``mode`` ``extender`` or ``standalone``) over ``cluster``; ``url`` is the
    listener's. ``leader`` (one item, settable) is what the service asks before it writes."""

    def __init__(self, cluster: ClusterApi, *, mode: str = "extender", config: ServiceConfig = NO_HOLDS,
                 watch_timeout_seconds: float = 0.2, tick_seconds: float = 0.1) -> None:
        self.cluster = cluster
        self.metrics = PrometheusSchedulerMetrics()
        self.leader = [True]
        self.service = SchedulerService(cluster, PROTOCOL, self.metrics, config=config,
                                        is_leader=lambda: self.leader[0])
        settings = SchedulerSettings(mode=mode, host="127.0.0.1", port=0, watch_timeout_seconds=watch_timeout_seconds,
                                     tick_seconds=tick_seconds)
        self.app = SchedulerApp(settings=settings, cluster=cluster, service=self.service, elector=None,
                                metrics_text=self.metrics.exposition)
        host, port = self.app.http.address
        self.url = f"http://{host}:{port}"

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Start the app, wait until the service serves (its ledger rebuilt), stop it at the end."""
        self.app.start()
        eventually(lambda: self.service.serving, what="the scheduler serving")
        try:
            yield
        finally:
            self.app.stop()
