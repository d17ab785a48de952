"""Settings and the serving loop of ``ljrk dra-driver``.

:class:`DraDriverApp` runs the ResourceSlice publisher (``services.dra.publisher``) on its own thread until
stopped. **Seam for the kubelet DRA plugin** (the next part of issue 34, not here): the plugin's registration
socket and ``NodePrepareResources``/``NodeUnprepareResources`` server will be another runnable started beside the
publisher in :meth:`DraDriverApp.run` and stopped with it; the publisher already owns the pool the kubelet
refers to (``pool_name`` = node name, ``device_name`` = the slice device names of ``domain.dra.build``).
"""

from __future__ import annotations

import threading
from pathlib import Path

import attrs

from domain.dra.build import UnhealthyPolicy
from entrypoints._shared.command import SettingsError
from services.dra.publisher import SlicePublisher


@attrs.frozen
class DraDriverSettings:
    """Validated settings of ``ljrk dra-driver`` (flags in ``__main__``). ``unhealthy``: ``taint`` or
    ``withdraw`` (:class:`~domain.dra.build.UnhealthyPolicy`); ``withdraw``: delete the node's slices and exit;
    ``runtime_wait_s`` in seconds. Raises :class:`SettingsError` for an empty node name, an unknown unhealthy
    policy or a non-positive wait."""

    node_name: str
    runtime_socket: Path
    kubeconfig: Path | None = None
    protocol_file: Path | None = None
    in_memory: bool = False
    runtime_wait_s: float = 30.0
    unhealthy: str = UnhealthyPolicy.TAINT.value
    withdraw: bool = False
    log_level: str = "INFO"

    def __attrs_post_init__(self) -> None:
        if not self.node_name:
            raise SettingsError("--node-name must not be empty")
        if self.unhealthy not in {p.value for p in UnhealthyPolicy}:
            raise SettingsError(f"--unhealthy {self.unhealthy!r}: must be taint or withdraw")
        if self.runtime_wait_s <= 0:
            raise SettingsError(f"--runtime-wait {self.runtime_wait_s}: must be > 0 seconds")

    @property
    def unhealthy_policy(self) -> UnhealthyPolicy:
        """``unhealthy`` as the domain's policy."""
        return UnhealthyPolicy(self.unhealthy)


class DraDriverApp:
    """Publishes the node's ResourceSlices until stopped (module docstring)."""

    def __init__(self, publisher: SlicePublisher) -> None:
        self.publisher = publisher

    def run(self, stop: threading.Event) -> None:
        """Publish and keep the slices current until ``stop`` is set; the slices stay (a restart keeps the
        devices visible). Returns when stopped."""
        worker = threading.Thread(target=self.publisher.follow, args=(stop,), name="dra-slices", daemon=True)
        worker.start()
        stop.wait()
        self.publisher.close()
        worker.join(timeout=10)
