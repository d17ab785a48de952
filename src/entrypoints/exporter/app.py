"""``ljrk exporter`` settings, the HTTP listener (``/metrics``, ``/healthz``) and the serving loop.

The shared probe server (``entrypoints._shared.httpserver.HealthEndpoint``) on ``--listen``: ``GET /metrics``
renders the collector's current snapshot (never waits on the Runtime, B23); ``GET /healthz`` (and ``/readyz``) is
200 ``ok`` while the collector thread runs (a Runtime outage is reported by ``lj_runtimekit_exporter_runtime_up``,
not by restarting the exporter), else 500 (503).
"""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from entrypoints._shared.command import SettingsError as SettingsError
from entrypoints._shared.httpserver import HealthEndpoint
from entrypoints._shared.httpserver import parse_listen as shared_parse_listen
from entrypoints._shared.lifecycle import RunUntilStopped
from services.exporter.collector import SnapshotCollector
from services.exporter.podphases import WATCH_TIMEOUT_S

log = logging.getLogger(__name__)

REQUIRED_FEATURES = ("exporter-data",)
"""Runtime features (``domain.runtime.features.RUNTIME_FEATURES``) the exporter uses; checked at start."""


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``_shared.httpserver.parse_listen``). Raises :class:`SettingsError` naming ``--listen``."""
    try:
        return shared_parse_listen(text)
    except argparse.ArgumentTypeError as error:
        raise SettingsError(f"--listen {text!r}: expected HOST:PORT ({error})") from error


@attrs.frozen
class ExporterSettings:
    """Validated settings of ``ljrk exporter`` (flags in ``__main__``). Times in seconds. ``kubeconfig`` None =
    the pod's in-cluster config for Events (none either: Events disabled). ``watch_timeout_s``: how long one WATCH
    of the node's pods lasts before it is resumed (no flag; ``ljrk up`` shortens it to bound its shutdown). Raises
    :class:`SettingsError` for an empty node name, a bad ``--listen`` or non-positive times."""

    node_name: str
    runtime_socket: Path
    listen: str = "0.0.0.0:9400"
    pod_resources_socket: Path | None = None
    interval_s: float = 10.0
    deadline_s: float = 5.0
    runtime_wait_s: float = 30.0
    log_level: str = "INFO"
    kubeconfig: Path | None = None
    protocol_file: Path | None = None
    watch_timeout_s: float = WATCH_TIMEOUT_S

    def __attrs_post_init__(self) -> None:
        if not self.node_name:
            raise SettingsError("--node-name must not be empty")
        parse_listen(self.listen)
        for name in ("interval_s", "deadline_s", "runtime_wait_s", "watch_timeout_s"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"{name} must be > 0")


class ExporterApp(RunUntilStopped):
    """Runs ``collector`` in the background and serves ``exposition`` on ``host``:``port``. ``port`` 0 picks a
    free port (read :attr:`port` after :meth:`start`). Each of ``tasks`` runs on its own daemon thread with the
    stop event (for example publishing the protocol fingerprint on the node)."""

    def __init__(
        self, collector: SnapshotCollector, exposition: Callable[[], bytes], *, host: str, port: int,
        tasks: Sequence[Callable[[threading.Event], None]] = (),
    ) -> None:
        self.collector = collector
        self.exposition = exposition
        self._tasks = tuple(tasks)
        self._address = (host, port)
        self._http: HealthEndpoint | None = None
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        assert self._http is not None, "start() first"
        return self._http.address[1]

    def health(self) -> tuple[bool, str]:
        """``(ok, text)`` for ``/healthz`` and ``/readyz``: the collector thread runs."""
        alive = bool(self._threads) and self._threads[0].is_alive()
        return (True, "ok") if alive else (False, "collector not running")

    def start(self) -> None:
        """Bind the listener and start the collector (its ended-pods watch included) and HTTP threads. Raises
        OSError when it cannot bind."""
        host, port = self._address
        self._http = HealthEndpoint(host, port, health=self.health, ready=self.health,
                                    metrics=lambda: self.exposition(), name="exporter")
        self._http.start()
        self.collector.start()
        self._threads = [
            threading.Thread(target=self.collector.run, args=(self._stop,), name="ljrk-exp-collector", daemon=True),
        ]
        self._threads += [threading.Thread(target=task, args=(self._stop,), name=f"ljrk-exp-task-{i}", daemon=True)
                          for i, task in enumerate(self._tasks)]
        for thread in self._threads:
            thread.start()
        log.info("exporter serving /metrics on %s:%d", self._address[0], self.port)

    def stop(self) -> None:
        """Stop the threads and close the listener; idempotent."""
        self._stop.set()
        if self._http is not None:
            self._http.stop()
            self._http = None
        for thread in self._threads:
            thread.join(timeout=5)
        self.collector.close()

