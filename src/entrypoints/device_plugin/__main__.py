"""``ljrk device-plugin`` (also ``python -m entrypoints.device_plugin``): the kubelet device plugin.

``ljrk device-plugin --node-name NAME --runtime-socket PATH [--device-plugin-dir DIR] [--kubeconfig FILE]
[--protocol FILE] [--memory-unit 1Gi] [--heartbeat SECONDS] [--runtime-wait SECONDS]
[--release-interval SECONDS] [--cdi | --no-cdi] [--cdi-dir DIR] [--device-list-strategy NAME[,NAME]...]
[--hami-core-library PATH --hami-preload-file PATH | --mps-pipe-dir DIR] [--dev-root DIR] [--listen HOST:PORT]
[--log-level LEVEL]``
(hidden: ``--in-memory``, an in-memory cluster for tests and demos).

The node Runtime's Allocate answers are forwarded to kubelet only with the mounts and device nodes this plugin
expects (``domain.device_plugin.response_guard``): the HAMi-core library and preload file at exactly the host paths
``--hami-core-library`` and ``--hami-preload-file`` give (the Runtime's ``--hami-core-library`` and
``<its --state-dir>/ld.so.preload``), or the MPS pipe directory ``--mps-pipe-dir`` gives (the Runtime's, mounted
read-write at ``/tmp/nvidia-mps``); without them no mount passes; and ``/dev/nvidia*`` nodes under ``--dev-root``
(default ``/dev``, as the Runtime's). Any other entry fails the container's Allocate.

``--cdi`` (default on) returns each container's planned GPUs as CDI devices (``lj-runtimekit.io/gpu=<gpu uuid>``,
``ContainerAllocateResponse.cdi_devices``) beside the environment variables, and keeps the node's CDI spec in
``--cdi-dir`` (default ``/var/run/cdi``; file ``lj-runtimekit.io-gpu.json``, kept at exit for running pods' container
restarts; Allocate names only what the written spec resolves). A CDI-enabled runtime
(containerd 2, CRI-O) injects what the spec says; kubelets before 1.28 and containerd 1.x without ``enable_cdi``
ignore the names, so leaving it on there costs one small file. ``--no-cdi`` is for nodes where the directory cannot
be written.

``--device-list-strategy`` (repeatable or comma-separated; default ``$DEVICE_LIST_STRATEGY``, else ``envvar,cdi-cri``
with ``--cdi`` and ``envvar`` without) chooses how the granted devices reach the container, as NVIDIA's device
plugin flag of that name: ``envvar`` (``NVIDIA_VISIBLE_DEVICES``), ``volume-mounts`` (``/dev/null`` mounts under
``/var/run/nvidia-container-devices``), ``cdi-cri`` (the CDI names; needs ``--cdi``); see
``domain.device_plugin.device_list``. With the NVIDIA container toolkit settings of docs/security.md, the last two
make a pod's own ``NVIDIA_VISIBLE_DEVICES`` ineffective.

Serves until SIGTERM or SIGINT. Exit codes: 0 stopped by a signal; 1 cannot run (Runtime unreachable, kubeconfig
unreadable, socket cannot be bound); 2 bad command line, protocol file or memory unit. Errors are one line
``ljrk device-plugin: error: …`` on stderr; logs are JSON lines on stderr.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from adapters.cdifiles import DEFAULT_CDI_DIR
from adapters.grpc import DEFAULT_PLUGIN_DIR
from adapters.protocolfile import ProtocolFileError
from domain.errors import InvalidRequestError
from domain.runtime.errors import UnsupportedFeatureError
from entrypoints._shared.command import EXIT_FAILED, EXIT_OK, EXIT_USAGE, failing, serve, shutting_down
from entrypoints._shared.enforcement import DEV_ROOT, HAMI_CORE_LIBRARY, HAMI_PRELOAD_FILE, MPS_PIPE_DIR
from entrypoints._shared.flags import (
    IN_MEMORY,
    KUBECONFIG,
    LOG_LEVEL,
    NODE_NAME,
    PROTOCOL,
    RUNTIME_SOCKET,
    RUNTIME_WAIT,
    Repeatable,
    cli,
    flag,
    items,
)
from ports.runtime import NodeRuntimeError

from .app import DevicePluginSettings
from .containers import DevicePluginContainer

__all__ = ["CLI", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main", "settings_from_args"]


CLI = cli(
    "ljrk device-plugin",
    "Kubelet device plugin: advertises whole GPUs, GPU core percent and GPU memory units (and, on GPUs in MIG "
    "mode, one <prefix>/mig-<profile> resource per MIG profile, following the node Runtime's MIG strategy), "
    "and allocates containers from the scheduler's plan via the node Runtime.",
    DevicePluginSettings,
    NODE_NAME,
    RUNTIME_SOCKET,
    flag("--device-plugin-dir", type=Path, default=DEFAULT_PLUGIN_DIR, metavar="DIR",
         help=f"kubelet's device-plugin directory (default: {DEFAULT_PLUGIN_DIR})"),
    KUBECONFIG.but(help="kubeconfig (default: in-cluster)"),
    PROTOCOL.but(help="protocol.yaml (default: built-in constants)"),
    flag("--memory-unit", metavar="QUANTITY",
         help="bytes per gpu-memory unit, e.g. 1Gi, or 1%% (default: the protocol's)"),
    flag("--heartbeat", setting="heartbeat_s", type=float, default=10.0, metavar="SECONDS",
         help="inventory annotation refresh period (default: 10)"),
    RUNTIME_WAIT,
    flag("--release-interval", setting="release_interval_s", type=float, default=30.0, metavar="SECONDS",
         help="seconds between passes that release the node Runtime's records of pods that left the node or ended; "
         "a record is released once older than two intervals (default: 30)"),
    flag("--cdi", action=argparse.BooleanOptionalAction, default=True,
         help="return CDI device names and write the node's CDI spec (default: on)"),
    flag("--cdi-dir", type=Path, default=DEFAULT_CDI_DIR, metavar="DIR",
         help=f"CDI spec directory the container runtime reads (default: {DEFAULT_CDI_DIR})"),
    flag("--device-list-strategy", action=Repeatable, convert=items, env="DEVICE_LIST_STRATEGY", metavar="NAME",
         help="how granted devices reach the container: envvar, volume-mounts, cdi-cri; repeatable or "
         "comma-separated (default: $DEVICE_LIST_STRATEGY, else envvar,cdi-cri with --cdi, envvar without)"),
    HAMI_CORE_LIBRARY,
    MPS_PIPE_DIR,
    HAMI_PRELOAD_FILE,
    DEV_ROOT,
    flag("--listen", metavar="HOST:PORT", help="serve /healthz, /readyz and /metrics here (default: no HTTP listener)"),
    LOG_LEVEL,
    IN_MEMORY,
)
"""The command line (module docstring): program name, ``--help`` description, settings class and flags."""
build_parser, settings_from_args = CLI.parser, CLI.settings_from


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk device-plugin",
         stop: threading.Event | None = None) -> int:
    """Run until a signal (or ``stop``, for tests); returns the exit code (module docstring)."""
    return CLI.main(argv, prog, lambda settings: _run(settings, stop))


def _run(settings: DevicePluginSettings, stop: threading.Event | None) -> int:
    container = DevicePluginContainer(settings=settings)
    container.init_resources()
    with shutting_down(container):
        with failing(ProtocolFileError, InvalidRequestError, code=EXIT_USAGE):
            container.protocol()
        # kubeconfig / in-cluster config problems come from the client library: any exception
        with failing(Exception, code=EXIT_FAILED), failing(NodeRuntimeError, UnsupportedFeatureError,
                                                           code=EXIT_FAILED,
                                                           prefix=f"node Runtime on {settings.runtime_socket}: "):
            app = container.app()
        with failing(OSError, code=EXIT_FAILED):
            http = container.http()
            if http is not None:
                http.start()
            try:
                serve(app, stop)
            finally:
                if http is not None:
                    http.stop()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
