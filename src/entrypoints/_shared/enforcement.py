"""The enforcement mounts a node component may pass on from the node Runtime's Allocate answers: the flags, their
checks and the allow-list they make, one definition for ``ljrk device-plugin`` (to kubelet) and ``ljrk dra-driver``
(into each claim's CDI spec).

Flags: ``--hami-core-library PATH`` with ``--hami-preload-file PATH`` (the Runtime's ``--hami-core-library`` and
``<its --state-dir>/ld.so.preload``), or ``--mps-pipe-dir DIR`` (the Runtime's); ``--dev-root DIR`` (the host's
device directory, default ``/dev``). The allow-list itself is :class:`domain.device_plugin.response_guard.
ResponseAllowList`.
"""

from __future__ import annotations

from pathlib import Path

from domain.device_plugin.response_guard import ResponseAllowList
from entrypoints._shared.command import SettingsError
from entrypoints._shared.flags import flag

HAMI_CORE_LIBRARY = flag(
    "--hami-core-library", type=Path, metavar="PATH",
    help="host path of HAMi-core's libvgpu.so that the node Runtime mounts (same as its --hami-core-library); "
    "the only library mount passed on (default: none)")
HAMI_PRELOAD_FILE = flag(
    "--hami-preload-file", type=Path, metavar="PATH",
    help="host path of the Runtime's ld.so.preload (<its --state-dir>/ld.so.preload); needs --hami-core-library")
MPS_PIPE_DIR = flag(
    "--mps-pipe-dir", type=Path, metavar="DIR",
    help="host pipe directory of the node's CUDA MPS control daemon that the node Runtime mounts (same as its "
    "--mps-pipe-dir); default: no MPS mount passes")
DEV_ROOT = flag("--dev-root", type=Path, default=Path("/dev"), metavar="DIR",
                help="host device directory of the Runtime's /dev/nvidia* device specs (default: /dev)")


def check_enforcement_paths(hami_core_library: Path | None, hami_preload_file: Path | None,
                            mps_pipe_dir: Path | None, dev_root: Path) -> None:
    """Raise :class:`SettingsError` naming the flag for only one of the two HAMi-core paths, a relative path, or
    HAMi-core together with MPS (a node's Runtime enforces shares with one of them)."""
    if (hami_core_library is None) != (hami_preload_file is None):
        raise SettingsError(f"--hami-core-library {hami_core_library} and --hami-preload-file "
                            f"{hami_preload_file}: give both (the Runtime mounts both) or neither")
    for name, path in (("--hami-core-library", hami_core_library), ("--hami-preload-file", hami_preload_file),
                       ("--mps-pipe-dir", mps_pipe_dir), ("--dev-root", dev_root)):
        if path is not None and not path.is_absolute():
            raise SettingsError(f"{name} {path}: must be an absolute host path")
    if mps_pipe_dir is not None and hami_core_library is not None:
        raise SettingsError(f"--mps-pipe-dir {mps_pipe_dir} and --hami-core-library {hami_core_library}:"
                            " a node's Runtime enforces shares with one of them")


def allow_list(hami_core_library: Path | None, hami_preload_file: Path | None, mps_pipe_dir: Path | None,
               dev_root: Path) -> ResponseAllowList:
    """What the Runtime's answers may mount and name as device nodes, from the checked flags."""
    return ResponseAllowList(
        hami_library=None if hami_core_library is None else str(hami_core_library),
        preload_file=None if hami_preload_file is None else str(hami_preload_file),
        mps_pipe_dir=None if mps_pipe_dir is None else str(mps_pipe_dir),
        dev_root=str(dev_root),
    )
