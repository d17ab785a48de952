"""Figures of the node side under the genuine kubelet 1.20.2 (tests/integration/kubelet_harness.py).

Starts etcd + kube-apiserver (tests/integration/k8s_harness.py), containerd + kubelet, and as processes
``ljrk runtime`` (two simulated 16 GiB GPUs), ``ljrk device-plugin`` and ``ljrk scheduler --mode standalone``
(tests/integration/real_node_world.py), then prints:

- admission latency as kubelet sees it: from the moment the pod is seen bound (``spec.nodeName`` set, polled every
  20 ms) to every container seen running, for ``--pods`` pods one after another, each a core + memory share and
  each a whole GPU (p50 and max, seconds);
- kubelet restart: SIGTERM, started again; seconds until the device plugin has registered all three resources
  again (its registrations counter) and until node allocatable shows them in a status kubelet wrote after the
  restart.

Needs root and ``bash scripts/k8s-control-plane.sh install`` + ``bash scripts/real-kubelet.sh install``.
Usage: ``.venv/bin/python bench/real_kubelet.py [--pods 5]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
NODE = "ljrk-bench-node"


def _latency(pods: Any, manifest: dict[str, Any]) -> float:
    name = pods.create(manifest)
    while not pods.get(name).spec.node_name:
        time.sleep(0.02)
    bound = time.monotonic()
    pods.wait_running(name)
    took = time.monotonic() - bound
    pods.delete(name, force=True)
    return took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=5, help="pods per kind (default 5)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from k8s_harness import control_plane
    from kubelet_harness import node_dir, start_node
    from kubernetes import client
    from real_node_world import (
        RES,
        allocatable,
        container,
        eventually,
        node_ready,
        node_stack,
        pod_manifest,
        pods_in_new_namespace,
        unique,
    )

    files = node_dir()
    if files is None:
        print("real node not installed: bash scripts/real-kubelet.sh install", file=sys.stderr)
        return 2
    bins = subprocess.run(["bash", str(REPO / "scripts" / "k8s-control-plane.sh"), "bin-dir"],
                          capture_output=True, text=True, check=False)
    if bins.returncode != 0:
        print("control plane not built: bash scripts/k8s-control-plane.sh install", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="ljrk-bench-kubelet-", dir="/tmp"))
    expected = {RES.gpu: "2", RES.core: "200", RES.memory: "32"}
    with control_plane(bins.stdout.strip(), nodes=[NODE]) as plane, plane.api_client() as api:
        started = time.monotonic()
        node = start_node(plane.node_kubeconfig(NODE), NODE, work / "node", nodes=files)
        try:
            core = client.CoreV1Api(api)
            eventually(lambda: node_ready(api, NODE), 90, "node Ready")
            print(f"node Ready {time.monotonic() - started:.1f} s after start")
            core.patch_node(NODE, {"spec": {"taints": None}})
            with node_stack(node, plane, api, gpus="2x16Gi:A100", expected=expected) as stack, \
                    pods_in_new_namespace(api, node) as pods:
                for kind, limits in (("share", {RES.core: 50, RES.memory: 8}), ("whole", {RES.gpu: 1})):
                    took = [_latency(pods, pod_manifest(unique(kind), [container("main", limits)]))
                            for _ in range(args.pods)]
                    print(f"admission {kind:5s} (bound -> running, {args.pods} pods): "
                          f"p50 {statistics.median(took):.2f} s, max {max(took):.2f} s")
                registrations = stack.registrations()
                version = core.read_node(NODE).metadata.resource_version
                node.stop_kubelet()
                restarted = time.monotonic()
                node.start_kubelet()
                eventually(lambda: stack.registrations() >= registrations + 3, 60, "registered again")
                registered = time.monotonic() - restarted
                eventually(lambda: core.read_node(NODE).metadata.resource_version != version
                           and allocatable(api, NODE) == expected, 60, "allocatable again")
                print(f"kubelet restart: resources registered again after {registered:.1f} s, "
                      f"allocatable in node status after {time.monotonic() - restarted:.1f} s")
        finally:
            node.stop()
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
