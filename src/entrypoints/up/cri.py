"""The emulated container runtime of one node: when kubelet tears a pod's containers down, the node Runtime's
allocation records of that pod are released, over the Runtime's gRPC contract (``Release``).

On a real node the device plugin's release reconciler frees the records of pods that ended or left the node
(every ``--release-interval`` seconds, after a grace); this emulated hook frees them at once, as a container
runtime hook would, and the reconciler stays the backstop (Release is idempotent).
:class:`ReleasingDeviceManager` is the emulator's device manager whose ``release_pod`` — called by
:class:`~adapters.grpc.kubelet_emulator.NodeKubelet` whenever a pod ends, is deleted or is rejected — also hands
the pod UID to a :class:`RuntimeReleaser`. The releaser calls ``Release`` on its own thread, so kubelet never waits
on the Runtime; a Runtime that is down (restarting) is retried every ``retry_s`` seconds until it answers, so a
release is never lost.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from adapters.grpc.kubelet_emulator import DeviceManager
from ports.runtime import NodeRuntime, NodeRuntimeError

log = logging.getLogger(__name__)

RETRY_S = 0.5
"""Seconds between attempts while the Runtime does not answer a Release."""


class RuntimeReleaser:
    """Releases pods' Runtime records on a worker thread (module docstring). ``runtime`` is the node Runtime's
    client (owned by the caller); ``retry_s`` in seconds. Thread-safe."""

    def __init__(self, runtime: NodeRuntime, *, node: str, retry_s: float = RETRY_S) -> None:
        self._runtime = runtime
        self._node = node
        self._retry_s = retry_s
        self._cond = threading.Condition()
        self._queue: dict[str, None] = {}  # pod UIDs, oldest first
        self._busy = 0
        self._stop = False
        self._thread: threading.Thread | None = None
        self.released = 0
        """Records released so far (for the report and tests)."""

    def start(self) -> None:
        """Start the worker (a no-op when running)."""
        with self._cond:
            if self._thread is not None:
                return
            self._stop = False
            self._thread = threading.Thread(target=self._work, name=f"ljrk-up-cri-{self._node}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the worker and join it; releases still queued are dropped (logged). Idempotent."""
        with self._cond:
            self._stop = True
            thread, self._thread = self._thread, None
            self._cond.notify_all()
        if thread is not None:
            thread.join(timeout=10)
        with self._cond:
            if self._queue:
                log.warning("node %s: %d Runtime release(s) not done at stop", self._node, len(self._queue))

    def submit(self, pod_uid: str) -> None:
        """Queue a release of every record of ``pod_uid`` (repeats coalesce)."""
        with self._cond:
            self._queue[pod_uid] = None
            self._cond.notify_all()

    def idle(self) -> bool:
        """True when no release is queued or in flight."""
        with self._cond:
            return not self._queue and not self._busy

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` seconds for :meth:`idle`; returns it."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout=timeout_s)

    def _work(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stop or bool(self._queue))
                if self._stop:
                    return
                uid = next(iter(self._queue))
                del self._queue[uid]
                self._busy += 1
            retry = False
            try:
                count = self._runtime.release(uid)
                self.released += count
                if count:
                    log.info("node %s: released %d Runtime record(s) of pod %s", self._node, count, uid)
            except NodeRuntimeError as error:  # unreachable or failing Runtime: keep the release, try again
                log.warning("node %s: Runtime Release of pod %s failed: %s; retrying", self._node, uid, error)
                retry = True
            except Exception:  # never lose the worker over an adapter bug
                log.exception("node %s: Runtime Release of pod %s failed; retrying", self._node, uid)
                retry = True
            with self._cond:
                self._busy -= 1
                if retry:
                    self._queue.setdefault(uid, None)
                self._cond.notify_all()
                if retry:
                    self._cond.wait(self._retry_s)


class ReleasingDeviceManager(DeviceManager):
    """Kubelet's device manager on ``plugin_dir`` whose :meth:`release_pod` also queues the pod's Runtime release
    on ``releaser`` (module docstring)."""

    def __init__(self, plugin_dir: Path, releaser: RuntimeReleaser, *, cdi_dir: Path | None = None) -> None:
        super().__init__(plugin_dir, cdi_dir=cdi_dir)
        self.releaser = releaser

    def release_pod(self, uid: str) -> bool:
        """Free the pod's devices (kubelet) and, when kubelet held a record of the pod (it was admitted or being
        admitted, so Allocate may have reached the Runtime), queue the release of its Runtime records (container
        runtime); returns whether it held one."""
        held = super().release_pod(uid)
        if held:
            self.releaser.submit(uid)
        return held
