"""``scripts/real-kubelet.sh start DIR`` / ``stop DIR``: the real-node harness (kubelet_harness.py) as a command.

``start`` leaves containerd and kubelet running after it exits and prints the device-plugin folder, the
pod-resources socket and kubelet's log, as the host sees them; ``stop`` reads ``DIR/node.json`` and removes the
node as :meth:`kubelet_harness.RealNode.stop` does. Exit codes: 0 done, 1 the node could not be started or
stopped (one line on stderr), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kubelet_harness import NodeError, NodeState, RealNode, start_node


def load_node(workdir: Path) -> RealNode:
    """The node recorded in ``workdir/node.json`` (for ``stop``). Raises NodeError when there is none."""
    try:
        raw = json.loads((workdir / "node.json").read_text())
    except (OSError, ValueError) as exc:
        raise NodeError(f"no node recorded in {workdir}: {exc}") from exc
    return RealNode(NodeState(**raw), own_processes=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="real-kubelet.sh", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start containerd + kubelet with their state in DIR")
    start.add_argument("dir", type=Path)
    start.add_argument("--kubeconfig", type=Path, required=True, help="kubelet's kubeconfig (its node identity)")
    start.add_argument("--node-name", required=True)
    stop = sub.add_parser("stop", help="stop the node started in DIR and remove everything it made")
    stop.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            node = start_node(args.kubeconfig.resolve(), args.node_name, args.dir.resolve(), own_processes=False)
            print(json.dumps({"device_plugin_dir": str(node.device_plugin_dir),
                              "pod_resources_socket": str(node.pod_resources_socket),
                              "kubelet_log": str(node.kubelet_log)}, indent=2))
        else:
            load_node(args.dir.resolve()).stop()
    except NodeError as exc:
        print(f"real-kubelet: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
