"""``ljrk runtime`` (also ``python -m entrypoints.runtime``): the reference node Runtime.

``ljrk runtime --socket PATH [--backend auto|nvml|simulated] [--simulated-gpus 2x16Gi:A100 |
--simulated-gpus-file FILE.yaml] [--simulated-topology none|nvswitch8|nvlink-islands-2x4|pcie-pairs-2numa]
[--state-dir DIR] [--initial-state enabled|disabled]
[--recovery-quiet-period SECONDS] [--health-hold SECONDS] [--ignored-xids XID,…|none]
[--device-specs [--dev-root DIR]] [--hami-core-library PATH | --mps-pipe-dir DIR] [--mig-strategy static|dynamic]
[--log-level LEVEL]``

Serves until SIGTERM or SIGINT, then stops cleanly (calls in flight get 1 s; the socket is removed).
Exit codes: 0 stopped by a signal; 1 cannot run — ``--backend nvml`` without NVML, the socket cannot be bound, the
saved state is unreadable; 2 bad command line (a bad ``--health-hold`` or ``--ignored-xids`` names the flag and the
value), simulated-GPU spec (more than 64 GPUs included; the message names the flag and the item), a missing
``--hami-core-library`` or ``--mps-pipe-dir``, or both of them.
Errors are one line ``ljrk runtime: error: …`` on stderr; logs are JSON lines on stderr.
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from adapters.simulated import SpecError
from domain.mig.gpu import PlacementMode
from domain.runtime.health import APPLICATION_XIDS, MAX_XID
from domain.runtime.types import RuntimeState
from domain.topology.machines import MACHINE_NAMES
from entrypoints._shared.command import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    SettingsError,
    failing,
    serve,
    shutting_down,
)
from entrypoints._shared.flags import LOG_LEVEL, cli, flag
from ports.gpu_backend import GpuBackendError
from ports.runtime_state import StateStoreError
from services.runtime.service import HEALTH_HOLD_S

from .app import BACKENDS, DEFAULT_SIMULATED_GPUS, MIG_STRATEGIES, RuntimeSettings
from .containers import RuntimeContainer

__all__ = ["CLI", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main", "settings_from_args"]


def _seconds(text: str) -> float | None:
    if text.strip().lower() in ("none", "never", "off"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (or 'never')") from None
    if not 0 <= value < math.inf:  # NaN would never compare true: a GPU that never recovers, silently
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number of seconds >= 0 (or 'never')")
    return value


def _hold(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number of seconds >= 0")
    return value


def _xids(text: str) -> frozenset[int]:
    if text.strip().lower() in ("", "none"):
        return frozenset()
    xids = set()
    for item in text.split(","):
        item = item.strip()
        if not item.isdecimal() or not 1 <= int(item) <= MAX_XID:
            raise argparse.ArgumentTypeError(f"{text!r}: {item!r} is not an XID (an integer 1..{MAX_XID}); give "
                                             "a comma-separated list such as 13,31,43 or 'none'")
        xids.add(int(item))
    return frozenset(xids)


CLI = cli(
    "ljrk runtime",
    "Reference node Runtime: serves the ljrk.runtime.v1 Runtime contract and the ljrk.config.v1 config "
    "service on a unix socket, over NVML or simulated GPUs.",
    RuntimeSettings,
    flag("--socket", type=Path, required=True, metavar="PATH", help="unix socket to serve on"),
    flag("--backend", choices=BACKENDS, default="auto",
         help="GPU source; auto = nvml when NVML initialises, else simulated (default: auto)"),
    flag("--simulated-gpus", group="gpus", metavar="SPEC",
         help="simulated inventory, [COUNTx]MEMORY[:MODEL[:mig[=PROFILE@START/…]]],… e.g. 2x16Gi:A100 or "
         f"1x80Gi:A100:mig=3g.40gb@0/3g.40gb@4 (default: {DEFAULT_SIMULATED_GPUS})"),
    flag("--simulated-gpus-file", group="gpus", type=Path, metavar="FILE.yaml",
         help="simulated inventory from YAML: gpus: [{model, memory, count, uuid, health, migMode, "
         "migInstances: [{profile, start}]}]"),
    flag("--simulated-topology", choices=MACHINE_NAMES, default="none",
         help="simulated machine whose NUMA nodes, PCIe roots and NVLink peers ListDevices reports: nvswitch8 (all "
         "GPUs NVLinked), nvlink-islands-2x4 (two NVLink islands of half the GPUs), pcie-pairs-2numa (no NVLink; PCIe "
         "pairs, half on each NUMA node); needs an even GPU count; none = no topology reported (default: none)"),
    flag("--state-dir", type=Path, metavar="DIR",
         help="where runtime-state.json is kept (default: the socket's directory)"),
    flag("--initial-state", convert=RuntimeState, choices=[s.value for s in RuntimeState], default="enabled",
         help="config state when no state was saved yet (default: enabled)"),
    flag("--recovery-quiet-period", setting="recovery_quiet_period_s", type=_seconds, default=300.0,
         metavar="SECONDS", help="an unhealthy GPU turns healthy after this long without a fault; 'never' = only on "
         "an explicit reset (default: 300)"),
    flag("--health-hold", setting="health_hold_s", type=_hold, default=HEALTH_HOLD_S, metavar="SECONDS",
         help="report an unhealthy GPU healthy again only after this long without a fault, so a flapping GPU sends "
         f"one Unhealthy and one Healthy per period; 0 = at once (default: {HEALTH_HOLD_S:g})"),
    flag("--ignored-xids", type=_xids, default=APPLICATION_XIDS, metavar="XID,…",
         help="application XIDs that are counted but leave the GPU healthy; 'none' = every XID marks it unhealthy "
         f"(default: {','.join(map(str, sorted(APPLICATION_XIDS)))})"),
    flag("--device-specs", action="store_true",
         help="answer Allocate with /dev/nvidia<minor> of each GPU and the control device nodes (for nodes without "
         "the NVIDIA container toolkit; default: off, NVIDIA_VISIBLE_DEVICES only)"),
    flag("--dev-root", type=Path, default=Path("/dev"), metavar="DIR",
         help="host device directory for --device-specs (default: /dev)"),
    flag("--hami-core-library", type=Path, metavar="PATH",
         help="host path of HAMi-core's libvgpu.so: mounted into every allocated container with an ld.so.preload, "
         "so the CUDA_DEVICE_*_LIMIT envs are enforced (default: not mounted)"),
    flag("--mps-pipe-dir", type=Path, metavar="DIR",
         help="host pipe directory of the node's CUDA MPS control daemon: mounted into every time-shared container "
         "with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT from its grant (default: no MPS; "
         "exclusive with --hami-core-library)"),
    flag("--mig-strategy", convert=PlacementMode, choices=MIG_STRATEGIES, default=PlacementMode.STATIC.value,
         help="MIG: static = hand out the instances that exist; dynamic = also create planned instances at Allocate "
         "and destroy them at Release (default: static)"),
    LOG_LEVEL,
)
"""The command line (module docstring): program name, ``--help`` description, settings class and flags."""
build_parser, settings_from_args = CLI.parser, CLI.settings_from


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk runtime", stop: threading.Event | None = None) -> int:
    """Run until a signal (or ``stop``, for tests); returns the exit code (module docstring)."""
    return CLI.main(argv, prog, lambda settings: _run(settings, stop))


def _run(settings: RuntimeSettings, stop: threading.Event | None) -> int:
    container = RuntimeContainer(settings=settings)
    container.init_resources()
    with shutting_down(container):
        flag = "--simulated-gpus-file" if settings.simulated_gpus_file is not None else "--simulated-gpus"
        try:  # the innermost mapping sees an error first: the spec, then settings, then the backend
            with failing(GpuBackendError, code=EXIT_FAILED, prefix=f"--backend {settings.backend}: ",
                         suffix="; use --backend simulated or auto"), \
                    failing(SettingsError, code=EXIT_USAGE), failing(SpecError, code=EXIT_USAGE, prefix=f"{flag}: "):
                app = container.app()
        except StateStoreError as error:
            container.backend().close()
            raise CommandError(EXIT_FAILED, error) from error
        with failing(OSError, code=EXIT_FAILED):
            serve(app, stop)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
