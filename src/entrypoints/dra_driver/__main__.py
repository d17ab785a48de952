"""``ljrk dra-driver`` (also ``python -m entrypoints.dra_driver``): the DRA driver's node component.

``ljrk dra-driver --node-name NAME --runtime-socket PATH [--kubeconfig FILE] [--protocol FILE]
[--runtime-wait SECONDS] [--unhealthy taint|withdraw] [--withdraw] [--resync SECONDS] [--plugins-registry DIR]
[--plugins-dir DIR] [--cdi-dir DIR] [--hami-core-library PATH --hami-preload-file PATH | --mps-pipe-dir DIR]
[--dev-root DIR] [--log-level LEVEL]``
(hidden: ``--in-memory``).

Publishes the node's GPUs, read from the node Runtime, as ``resource.k8s.io/v1`` ResourceSlices of the driver
``protocol.dra.driver`` (pool = the node; whole GPUs with consumable ``cores``/``memory``, MIG GPUs as
partitionable devices; ``services.dra.publisher``) and keeps them current until SIGTERM or SIGINT; the slices stay
when it stops (a restart resumes them without a write); every ``--resync`` seconds it puts back slices someone
else deleted or changed (the kubelet deletes its node's slices when it starts). ``--withdraw`` deletes the node's
slices and exits (the driver leaves the node for good); the Node's deletion removes them too (owner reference).
Unhealthy GPUs are tainted (``--unhealthy taint``, Kubernetes 1.36+) or left out (``withdraw``, for servers without
DRADeviceTaints).
A node runs this or ``ljrk device-plugin``, not both. Beside the slices it serves the kubelet DRA plugin
(``services.dra.plugin``): registration on ``<plugins-registry>/<driver>-reg.sock``, ``NodePrepareResources`` /
``NodeUnprepareResources`` on ``<plugins-dir>/<driver>/dra.sock``, a Runtime grant and a CDI spec in ``--cdi-dir``
per claim, checkpointed in ``<plugins-dir>/<driver>/checkpoint.json`` (docs/dra.md). The claim's spec carries the
Runtime's limit environment and, as the device plugin forwards them, exactly the enforcement mounts the flags name
(HAMi-core's library and preload list, or the MPS pipe directory; ``entrypoints._shared.enforcement``): a Runtime
answer with any other mount fails that claim.

Exit codes: 0 stopped by a signal or withdrawn; 1 cannot run (Runtime unreachable, kubeconfig unreadable, API
errors); 2 bad command line or protocol file. Errors are one line ``ljrk dra-driver: error: …`` on stderr.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from pathlib import Path

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
    cli,
    flag,
)
from ports.resource_claims import CheckpointError
from ports.runtime import NodeRuntimeError
from services.dra.publisher import withdraw_node

from .app import DEFAULT_CDI_DIR, DEFAULT_PLUGINS_DIR, DEFAULT_REGISTRY_DIR, DEFAULT_RESYNC_S, DraDriverSettings
from .containers import DraDriverContainer

__all__ = ["CLI", "main"]

CLI = cli(
    "ljrk dra-driver",
    "DRA driver node component: publishes the node's GPUs (whole GPUs with consumable cores and memory, MIG "
    "profiles as partitionable devices) as resource.k8s.io/v1 ResourceSlices from the node Runtime.",
    DraDriverSettings,
    NODE_NAME,
    RUNTIME_SOCKET,
    KUBECONFIG.but(help="kubeconfig (default: in-cluster)"),
    PROTOCOL.but(help="protocol.yaml (default: built-in constants)"),
    RUNTIME_WAIT,
    flag("--unhealthy", default="taint", choices=["taint", "withdraw"],
         help="unhealthy GPUs: taint their devices (Kubernetes 1.36+) or leave them out (default: taint)"),
    flag("--withdraw", action="store_true", help="delete this node's ResourceSlices and exit"),
    flag("--resync", dest="resync_s", type=float, default=DEFAULT_RESYNC_S, metavar="SECONDS",
         help=f"seconds between two passes that restore slices deleted by others, e.g. the kubelet when it starts "
              f"(default: {DEFAULT_RESYNC_S:g})"),
    flag("--plugins-registry", type=Path, default=DEFAULT_REGISTRY_DIR, metavar="DIR",
         help=f"kubelet plugin registration folder (default: {DEFAULT_REGISTRY_DIR})"),
    flag("--plugins-dir", type=Path, default=DEFAULT_PLUGINS_DIR, metavar="DIR",
         help=f"kubelet plugins folder; the DRA socket and checkpoint go to DIR/<driver>/ "
              f"(default: {DEFAULT_PLUGINS_DIR})"),
    flag("--cdi-dir", type=Path, default=DEFAULT_CDI_DIR, metavar="DIR",
         help=f"where per-claim CDI specs are written (default: {DEFAULT_CDI_DIR})"),
    HAMI_CORE_LIBRARY,
    HAMI_PRELOAD_FILE,
    MPS_PIPE_DIR,
    DEV_ROOT,
    LOG_LEVEL,
    IN_MEMORY,
)
"""The command line (module docstring)."""


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk dra-driver",
         stop: threading.Event | None = None) -> int:
    """Run until a signal (or ``stop``, for tests); returns the exit code (module docstring)."""
    return CLI.main(argv, prog, lambda settings: _run(settings, stop))


def _run(settings: DraDriverSettings, stop: threading.Event | None) -> int:
    container = DraDriverContainer(settings=settings)
    container.init_resources()
    with shutting_down(container):
        with failing(ProtocolFileError, InvalidRequestError, code=EXIT_USAGE):
            protocol = container.protocol()
        if settings.withdraw:  # no Runtime needed: the driver leaves the node
            with failing(Exception, code=EXIT_FAILED, prefix="withdraw: "):
                withdraw_node(container.api().slices, driver=protocol.dra.driver, node=settings.node_name)
            return EXIT_OK
        with failing(Exception, code=EXIT_FAILED), failing(NodeRuntimeError, UnsupportedFeatureError,
                                                           code=EXIT_FAILED,
                                                           prefix=f"node Runtime on {settings.runtime_socket}: "):
            app = container.app()
        with failing(OSError, CheckpointError, code=EXIT_FAILED, prefix="kubelet plugin: "):
            serve(app, stop)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
