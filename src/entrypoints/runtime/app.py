"""``ljrk runtime`` settings, backend selection and the serving loop.

Backend choice (``--backend``): ``nvml`` needs NVML and fails with a clear error without it; ``simulated`` serves
the GPUs of ``--simulated-gpus`` / ``--simulated-gpus-file``; ``auto`` (default) uses NVML when it initialises and
otherwise simulated GPUs, and logs which it took and why.

Health (``--recovery-quiet-period``, ``--health-hold``, ``--ignored-xids``): the backend turns an unhealthy GPU
healthy after the recovery quiet period without a fault; the service reports a recovery only once ``--health-hold``
seconds have passed since the last fault (damping, ``domain.runtime.damping``); XIDs in ``--ignored-xids`` are
counted but leave the GPU healthy (``domain.runtime.health``).

State (config state and allocation records) is kept in ``--state-dir`` (default: the socket's directory, which
deployments mount from the host anyway) as ``runtime-state.json``.

Container edits (``domain.runtime.edits``): ``--device-specs`` adds ``/dev/nvidia<minor>`` of each granted GPU and
the control nodes that exist under ``--dev-root`` to every Allocate response; ``--hami-core-library PATH`` mounts
that host library and an ``ld.so.preload`` listing it, which the Runtime writes into the state directory at start.

MIG (``--mig-strategy``): ``static`` (default) hands out the instances that exist (made by an operator or
mig-manager); ``dynamic`` also creates the instances the scheduler placed at Allocate and destroys them at Release
(``service`` module docstring), and advertises feature ``mig-dynamic``.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from socket import gethostname

import attrs

from adapters.grpc import GrpcRuntimeServer
from adapters.nvml import NvmlGpuBackend
from adapters.simulated import SimulatedGpuBackend
from domain.mig.gpu import PlacementMode
from domain.runtime.edits import CONTROL_DEVICES, HAMI_LIBRARY_PATH, ContainerEdits
from domain.runtime.health import APPLICATION_XIDS, MAX_XID
from domain.runtime.types import RuntimeState
from domain.topology.machines import MACHINE_NAMES
from entrypoints._shared.command import SettingsError as SettingsError
from entrypoints._shared.lifecycle import RunUntilStopped
from ports.gpu_backend import GpuBackend, GpuBackendUnavailableError
from services.runtime.service import HEALTH_HOLD_S, RUNTIME_VERSION, RuntimeService

log = logging.getLogger(__name__)

BACKENDS = ("auto", "nvml", "simulated")
MIG_STRATEGIES = tuple(mode.value for mode in PlacementMode)
DEFAULT_SIMULATED_GPUS = "1x16Gi"
MAX_SOCKET_PATH = 107
"""Linux ``sun_path`` holds 108 bytes including the terminating NUL."""


@attrs.frozen
class RuntimeSettings:
    """Validated ``ljrk runtime`` settings (see ``__main__`` for the flags). Raises :class:`SettingsError`."""

    socket: Path
    backend: str = "auto"
    simulated_gpus: str | None = None
    simulated_gpus_file: Path | None = None
    simulated_topology: str = "none"
    state_dir: Path | None = None
    initial_state: RuntimeState = RuntimeState.ENABLED
    recovery_quiet_period_s: float | None = 300.0
    health_hold_s: float = HEALTH_HOLD_S
    ignored_xids: frozenset[int] = APPLICATION_XIDS
    device_specs: bool = False
    dev_root: Path = Path("/dev")
    hami_core_library: Path | None = None
    mps_pipe_dir: Path | None = None
    mig_strategy: PlacementMode = PlacementMode.STATIC
    log_level: str = "INFO"
    # Seeds simulated GPU UUIDs, so two simulated nodes never share one (default: the host name).
    seed: str = attrs.field(factory=gethostname)

    def __attrs_post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise SettingsError(f"--backend {self.backend!r}: choose one of {', '.join(BACKENDS)}")
        if self.simulated_gpus is not None and self.simulated_gpus_file is not None:
            raise SettingsError("--simulated-gpus and --simulated-gpus-file are mutually exclusive")
        if self.backend == "nvml" and (self.simulated_gpus or self.simulated_gpus_file):
            raise SettingsError("--simulated-gpus/--simulated-gpus-file need --backend simulated or auto")
        if self.simulated_topology not in MACHINE_NAMES:
            raise SettingsError(f"--simulated-topology {self.simulated_topology!r}: choose one of "
                                f"{', '.join(MACHINE_NAMES)}")
        if self.backend == "nvml" and self.simulated_topology != "none":
            raise SettingsError("--simulated-topology needs --backend simulated or auto")
        if len(str(self.socket.absolute()).encode()) > MAX_SOCKET_PATH:
            raise SettingsError(f"--socket {self.socket}: a unix socket path has at most {MAX_SOCKET_PATH} bytes")
        quiet = self.recovery_quiet_period_s
        if quiet is not None and not 0 <= quiet < math.inf:  # refuses NaN too
            raise SettingsError(f"--recovery-quiet-period {quiet}: must be a finite number of seconds >= 0")
        if not 0 <= self.health_hold_s < math.inf:
            raise SettingsError(f"--health-hold {self.health_hold_s}: must be a finite number of seconds >= 0")
        bad = sorted(x for x in self.ignored_xids if not 1 <= x <= MAX_XID)
        if bad:
            raise SettingsError(f"--ignored-xids {bad[0]}: an XID is an integer 1..{MAX_XID}")
        if self.hami_core_library is not None and not self.hami_core_library.is_absolute():
            raise SettingsError(f"--hami-core-library {self.hami_core_library}: must be an absolute host path")
        if self.mps_pipe_dir is not None and not self.mps_pipe_dir.is_absolute():
            raise SettingsError(f"--mps-pipe-dir {self.mps_pipe_dir}: must be an absolute host path")
        if self.mps_pipe_dir is not None and self.hami_core_library is not None:
            raise SettingsError(f"--mps-pipe-dir {self.mps_pipe_dir} and --hami-core-library "
                                f"{self.hami_core_library}: one enforcement per node, MPS or HAMi-core")
        if not self.dev_root.is_absolute():
            raise SettingsError(f"--dev-root {self.dev_root}: must be an absolute path")

    @property
    def state_directory(self) -> Path:
        """``state_dir``, or the socket's directory."""
        return self.state_dir if self.state_dir is not None else self.socket.absolute().parent


PRELOAD_FILE = "ld.so.preload"
"""Name of the preload list the Runtime writes into its state directory for ``--hami-core-library``."""


def build_edits(settings: RuntimeSettings) -> ContainerEdits:
    """The node's :class:`ContainerEdits` from ``settings``: keeps the control device nodes that exist under
    ``--dev-root`` and, with ``--hami-core-library``, writes ``<state dir>/ld.so.preload`` (one line, the
    in-container library path); with ``--mps-pipe-dir``, checks that the directory exists. Raises
    :class:`SettingsError` when the library or the pipe directory is missing or the preload file cannot be
    written."""
    preload: Path | None = None
    library = settings.hami_core_library
    if library is not None:
        if not library.is_file():
            raise SettingsError(f"--hami-core-library {library}: no such file on this host")
        preload = settings.state_directory / PRELOAD_FILE
        try:
            preload.parent.mkdir(parents=True, exist_ok=True)
            preload.write_text(HAMI_LIBRARY_PATH + "\n")
        except OSError as error:
            raise SettingsError(f"--hami-core-library: cannot write {preload}: {error}") from error
    pipes = settings.mps_pipe_dir
    if pipes is not None and not pipes.is_dir():
        raise SettingsError(f"--mps-pipe-dir {pipes}: no such directory on this host (start nvidia-cuda-mps-control "
                            "-d with CUDA_MPS_PIPE_DIRECTORY set to it first)")
    control = tuple(name for name in CONTROL_DEVICES if (settings.dev_root / name).exists())
    if settings.device_specs:
        log.info("device specs on: /dev/nvidia<minor> per GPU plus %s", ", ".join(control) or "no control nodes")
    return ContainerEdits(
        device_nodes=settings.device_specs, dev_root=str(settings.dev_root), control_devices=control,
        hami_library=None if library is None else str(library), preload_file=None if preload is None else str(preload),
        mps_pipe_dir=None if pipes is None else str(pipes),
    )


def _simulated(settings: RuntimeSettings) -> SimulatedGpuBackend:
    quiet, ignored = settings.recovery_quiet_period_s, settings.ignored_xids
    if settings.simulated_gpus_file is not None:
        return SimulatedGpuBackend.from_file(settings.simulated_gpus_file, seed=settings.seed, quiet_period_s=quiet,
                                             ignored_xids=ignored, topology=settings.simulated_topology)
    spec = settings.simulated_gpus or DEFAULT_SIMULATED_GPUS
    return SimulatedGpuBackend.from_spec(spec, seed=settings.seed, quiet_period_s=quiet, ignored_xids=ignored,
                                         topology=settings.simulated_topology)


def select_backend(settings: RuntimeSettings) -> GpuBackend:
    """The GPU backend ``settings.backend`` asks for (module docstring). Raises GpuBackendUnavailableError for
    ``nvml`` without NVML and ``adapters.simulated.SpecError`` for a bad simulated inventory."""
    if settings.backend == "simulated":
        backend: GpuBackend = _simulated(settings)
        log.info("GPU backend: simulated, %d GPU(s)", len(backend.devices()))
        return backend
    try:
        backend = NvmlGpuBackend.open(quiet_period_s=settings.recovery_quiet_period_s,
                                      ignored_xids=settings.ignored_xids)
    except GpuBackendUnavailableError as error:
        if settings.backend == "nvml":
            raise
        backend = _simulated(settings)
        log.warning("GPU backend: simulated, %d GPU(s) (auto: %s)", len(backend.devices()), error)
        return backend
    log.info("GPU backend: nvml, %d GPU(s)", len(backend.devices()))
    return backend


class RuntimeApp(RunUntilStopped):
    """Runs the service and the gRPC server; :meth:`start` / :meth:`stop`, or :meth:`run` until an event."""

    def __init__(self, *, service: RuntimeService, server: GrpcRuntimeServer, backend: GpuBackend) -> None:
        self.service = service
        self.server = server
        self.backend = backend

    def start(self) -> None:
        """Start health pumping and serving. Raises OSError when the socket cannot be bound."""
        self.service.start()
        self.server.start()
        status = self.service.status()
        log.info("node Runtime %s ready on %s (backend %s, %s, %d allocation(s))", RUNTIME_VERSION,
                 self.server.socket_path, self.backend.name, status.state.value, status.active_allocations)

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop serving, then the service, then the backend (in that order: no call may outlive the backend)."""
        self.server.stop(grace_s)
        self.service.close()
        self.backend.close()
        log.info("node Runtime stopped")

