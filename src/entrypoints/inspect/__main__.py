"""``ljrk inspect`` (also ``python -m entrypoints.inspect``): argument parsing, then the container.

Command contract::

    ljrk inspect [NODE] [--kubeconfig FILE] [-o table|wide|json] [--scheduler URL] [--protocol FILE]
                 [--mig-strategy static|dynamic] [--timeout SECONDS]

Reads the Nodes (GPU inventory annotations) and Pods (plan annotations, requests) from the API server and books
them as the scheduler does, then prints per node and GPU: model, health, core allocated (% of the GPU) and memory
allocated of capacity, the pods (namespace/name/container) holding each share, MIG instances, the node's flags
(:mod:`domain.inspection.flags`) and cluster totals. ``NODE`` shows that node only. ``--scheduler URL`` (the
scheduler's listener, e.g. ``http://127.0.0.1:8888``) also reads its books (``GET /debug/ledger``) and lists where
they differ. ``-o wide`` adds GPU UUIDs, the holders and MIG instances under each GPU, every flag's message and
every disagreement; ``-o json`` is the stable JSON of :mod:`domain.inspection.encode`. ``--protocol``: the
``protocol.yaml`` the components run with (default: the embedded one), whose fingerprint decides protocol
mismatches; ``--mig-strategy``: the scheduler's (default ``static``). ``--kubeconfig`` absent = in-cluster config.
Inspect only reads: it writes nothing to the cluster.

Exit codes: 0 nothing flagged; 1 the report flags a problem (a node's or the cluster's flag, or a disagreement
with the scheduler), so a script can alert on it; 2 bad command line or protocol file, an unknown ``NODE``, the
API server or the scheduler unreachable or refusing — one line ``ljrk inspect: error: …`` on stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from adapters.protocolfile import ProtocolFileError
from domain.inspection.encode import report_json
from domain.kube.annotations import MIG_STRATEGIES
from entrypoints._shared.command import EXIT_OK, EXIT_USAGE, failing, shutting_down
from entrypoints._shared.flags import KUBECONFIG, PROTOCOL, cli, flag
from ports.scheduler_view import SchedulerViewError

from .app import OUTPUTS, InspectError, InspectSettings
from .containers import InspectContainer
from .render import render

__all__ = ["CLI", "EXIT_OK", "EXIT_PROBLEMS", "EXIT_USAGE", "build_parser", "main", "settings_from_args"]

EXIT_PROBLEMS = 1


CLI = cli(
    "ljrk inspect",
    "Per node and GPU: allocated core and memory, the pods holding them, MIG instances and problems, read "
    "from the API server (and the scheduler with --scheduler).",
    InspectSettings,
    flag("node", nargs="?", default="", metavar="NODE", help="show this node only"),
    KUBECONFIG,
    flag("-o", "--output", choices=OUTPUTS, default="table",
         help="table (default), wide (UUIDs, holders, MIG instances, flag details) or json"),
    flag("--scheduler", default="", metavar="URL",
         help="the scheduler's listener (http://HOST:PORT): compare its books with the API objects"),
    PROTOCOL,
    flag("--mig-strategy", choices=MIG_STRATEGIES, default="static",
         help="the scheduler's MIG strategy (default: static)"),
    flag("--timeout", setting="timeout_s", type=float, default=10.0, metavar="SECONDS",
         help="per request to the API server or the scheduler (default: 10)"),
)
"""The command line (module docstring): program name, ``--help`` description, settings class and flags."""
build_parser, settings_from_args = CLI.parser, CLI.settings_from


def main(argv: Sequence[str] | None = None, *, prog: str = "ljrk inspect",
         container: InspectContainer | None = None) -> int:
    """Print the report; returns the exit code (module docstring). ``container``: a container whose settings are
    given here, on every call (tests override its cluster and may call again with other arguments); ``--help``
    prints help and returns 0."""
    return CLI.main(argv, prog, lambda settings: _run(settings, container or InspectContainer()),
                    errors=(InspectError,))


def _run(settings: InspectSettings, container: InspectContainer) -> int:
    container.settings.override(settings)
    container.reset_singletons()  # an app built by an earlier call holds that call's settings (its NODE, output…)
    # any other exception comes from the client library: kubeconfig / in-cluster configuration errors
    with shutting_down(container), \
            failing(Exception, code=EXIT_USAGE, prefix="cannot reach the cluster: "), \
            failing(ProtocolFileError, SchedulerViewError, InspectError, code=EXIT_USAGE):
        container.protocol()
        container.init_resources()
        report = container.app().report()
    if settings.output == "json":
        print(json.dumps(report_json(report), indent=2))
    else:
        print(render(report, wide=settings.output == "wide"), end="")
    return EXIT_PROBLEMS if report.problems else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
