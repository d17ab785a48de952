"""The in-process node Runtime: the reference :class:`RuntimeService` over simulated GPUs and an in-memory store.

What the tests, the benchmarks and any dry run use instead of a Runtime process: the same state machine as
``ljrk runtime --backend simulated`` (allocation book, env-var rules, MIG strategies, damping, persistence through
the state port), wired in this process with ``adapters.simulated.SimulatedGpuBackend`` (its usage model measures
the allocations; ``adapters.simulated`` documents the numbers) and ``adapters.memory`` ``InMemoryRuntimeStateStore``.

Invariants: health changes only through :meth:`InProcessRuntime.set_health` (no timed recovery, no pump thread),
which returns once every WatchHealth stream has the change, so a test never waits for a thread; the damping
quiet period defaults to 0 s (every change passes; pass ``health_hold_s`` to test damping). ``version`` /
``capabilities`` only change what GetVersion announces (a client's feature checks against an older Runtime);
the behaviour stays the reference Runtime's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from adapters.memory.runtime_state import InMemoryRuntimeStateStore
from adapters.simulated import SimulatedGpuBackend
from domain.gpu import Gpu, Health
from domain.mig.gpu import PlacementMode
from domain.runtime.edits import ContainerEdits
from domain.runtime.features import RuntimeInfo, SemVer, features_at
from domain.runtime.types import RuntimeState
from domain.topology import NodeTopology
from ports.runtime_state import RuntimeStateStore
from services.runtime.service import RuntimeService


class InProcessRuntime(RuntimeService):
    """``NodeRuntime`` and ``NodeConfig`` over ``gpus`` (module docstring; at least one GPU, else ValueError).

    ``mig_layouts``: initial MIG instances per GPU index, ``(profile, start)`` pairs (MIG domain errors for a bad
    one); ``mig_mode``: the MIG strategy; ``state``: the config state when ``store`` holds nothing (``store``
    defaults to a fresh in-memory one, :attr:`store`); ``clock``: epoch seconds for the Runtime and its GPUs;
    ``health_hold_s``: the damping quiet period, seconds; ``version`` and ``capabilities``: what GetVersion
    announces instead of the reference Runtime's (capabilities default to the version's features); ``topology``: the
    GPUs' NUMA nodes, PCIe roots and NVLink peers ListDevices reports (default none). The simulated
    backend is :attr:`backend`. Thread-safe."""

    def __init__(
        self,
        gpus: Sequence[Gpu],
        *,
        mig_layouts: Mapping[int, Sequence[tuple[str, int]]] | None = None,
        mig_mode: PlacementMode = PlacementMode.STATIC,
        state: RuntimeState = RuntimeState.ENABLED,
        store: RuntimeStateStore | None = None,
        clock: Callable[[], float] = time.time,
        edits: ContainerEdits | None = None,
        health_hold_s: float = 0.0,
        version: SemVer | None = None,
        capabilities: Iterable[str] | None = None,
        topology: NodeTopology | None = None,
    ) -> None:
        self.backend = SimulatedGpuBackend(gpus, mig_layouts=mig_layouts, clock=clock, topology=topology)
        self.store = InMemoryRuntimeStateStore() if store is None else store
        super().__init__(self.backend, self.store, initial_state=state, clock=clock, health_hold_s=health_hold_s,
                         edits=edits, mig_mode=mig_mode)
        self._announced = self._announcement(version, capabilities)

    def _announcement(self, version: SemVer | None, capabilities: Iterable[str] | None) -> RuntimeInfo | None:
        if version is None and capabilities is None:
            return None
        real = super().get_version()
        announced = real.version if version is None else version
        # default: the announced version's features, less what this strategy lacks (``mig-dynamic`` when static)
        features = frozenset(capabilities) if capabilities is not None else real.capabilities & features_at(announced)
        return RuntimeInfo(real.name, announced, features, real.backend)

    def get_version(self) -> RuntimeInfo:
        """The reference Runtime's answer (backend ``simulated``), or what ``version``/``capabilities`` say."""
        return super().get_version() if self._announced is None else self._announced

    def set_health(self, uuid: str, health: Health, reason: str = "") -> None:
        """Make GPU ``uuid`` ``health`` for ``reason`` (an XID, an operator's reset) and serve it: ListDevices,
        ExporterGetDataList and every WatchHealth stream have it when this returns (no event when unchanged).
        Raises KeyError for a GPU not on this node."""
        self.backend.inject_health(uuid, health, reason)
        self.pump_health(0.0)

    def close(self) -> None:
        """End every health stream and release the simulated GPUs; idempotent."""
        super().close()
        self.backend.close()
