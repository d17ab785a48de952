"""Figures of the node side under the genuine kubelet of the live version (tests/integration/kubelet_harness.py).

Starts etcd + kube-apiserver (tests/integration/k8s_harness.py), containerd + kubelet, and as processes
``ljrk runtime`` (two simulated 16 GiB GPUs), ``ljrk device-plugin`` and ``ljrk scheduler --mode standalone``
(tests/integration/real_node_world.py), then prints:

- admission latency as kubelet sees it: from the moment the pod is seen bound (``spec.nodeName`` set, polled every
  20 ms) to every container seen running, for ``--pods`` pods one after another, each a core + memory share and
  each a whole GPU (p50 and max, seconds);
- the device plugin's Allocate as kubelet itself times it: kubelet's own histogram
  ``kubelet_device_plugin_alloc_duration_seconds`` (its ``/metrics``; the time of the Allocate call to our plugin
  per resource, which includes the plugin's Runtime Allocate), count, mean and the bucket holding the median;
- kubelet restart: SIGTERM, started again; seconds until the device plugin has registered all three resources
  again (its registrations counter) and until node allocatable shows them in a status kubelet wrote after the
  restart.

Needs root and ``bash scripts/k8s-control-plane.sh install`` + ``bash scripts/real-kubelet.sh install``.
Usage: ``.venv/bin/python bench/real_kubelet.py [--pods 5] [--record FILE]``; ``--record`` writes the figures,
with the kubelet and container runtime versions the node reports, as this invocation's row of the performance table
(:func:`adapters.reportfiles.results_table.record_bench_run`).
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

from adapters.reportfiles.results_table import RunStart, record_bench_run

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


def kubelet_alloc_durations(port: int) -> dict[str, tuple[int, float, float]]:
    """Per resource name: (count, mean s, upper bound s of the bucket holding the median) of kubelet's
    ``kubelet_device_plugin_alloc_duration_seconds`` histogram, read from its HTTPS ``/metrics`` on 127.0.0.1
    (anonymous access, as the test node configures it; its self-signed certificate is not verified)."""
    import ssl
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=10) as reply:
        page = reply.read().decode()
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    buckets: dict[str, list[tuple[float, float]]] = {}
    for family in text_string_to_metric_families(page):
        if family.name != "kubelet_device_plugin_alloc_duration_seconds":
            continue
        for sample in family.samples:
            resource = sample.labels.get("resource_name", "")
            if sample.name.endswith("_sum"):
                sums[resource] = sample.value
            elif sample.name.endswith("_count"):
                counts[resource] = int(sample.value)
            elif sample.name.endswith("_bucket"):
                buckets.setdefault(resource, []).append((float(sample.labels["le"]), sample.value))
    result = {}
    for resource, count in counts.items():
        if count:
            half = count / 2
            median_le = min(le for le, seen in buckets.get(resource, []) if seen >= half)
            result[resource] = (count, sums.get(resource, 0.0) / count, median_le)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=5, help="pods per kind (default 5)")
    parser.add_argument("--record", type=Path, metavar="FILE", help="write the figures as this run's table row")
    args = parser.parse_args(argv)
    start = RunStart.now()
    figures: list[str] = []
    sys.path[:0] = [str(REPO / "tests" / "integration"), str(REPO / "tests")]  # the harnesses import support.*
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
            info = core.read_node(NODE).status.node_info
            figures.append(f"kubelet {info.kubelet_version}, {info.container_runtime_version}")
            with node_stack(node, plane, api, gpus="2x16Gi:A100", expected=expected) as stack, \
                    pods_in_new_namespace(api, node) as pods:
                for kind, limits in (("share", {RES.core: 50, RES.memory: 8}), ("whole", {RES.gpu: 1})):
                    took = [_latency(pods, pod_manifest(unique(kind), [container("main", limits)]))
                            for _ in range(args.pods)]
                    print(f"admission {kind:5s} (bound -> running, {args.pods} pods): "
                          f"p50 {statistics.median(took):.2f} s, max {max(took):.2f} s")
                    figures.append(f"bound → running p50 {statistics.median(took):.2f} s ({kind})")
                for resource, (count, mean, median_le) in sorted(
                        kubelet_alloc_durations(node.state.kubelet_port).items()):
                    print(f"kubelet_device_plugin_alloc_duration_seconds{{resource_name={resource}}}: {count} calls, "
                          f"mean {mean * 1000:.1f} ms, median <= {median_le * 1000:g} ms")
                    figures.append(f"kubelet's Allocate mean {mean * 1000:.1f} ms (`{resource.rsplit('/', 1)[-1]}`)")
                registrations = stack.registrations()
                version = core.read_node(NODE).metadata.resource_version
                node.stop_kubelet()
                restarted = time.monotonic()
                node.start_kubelet()
                eventually(lambda: stack.registrations() >= registrations + 3, 60, "registered again")
                registered = time.monotonic() - restarted
                eventually(lambda: core.read_node(NODE).metadata.resource_version != version
                           and allocatable(api, NODE) == expected, 60, "allocatable again")
                back = time.monotonic() - restarted
                print(f"kubelet restart: resources registered again after {registered:.1f} s, "
                      f"allocatable in node status after {back:.1f} s")
                figures.append(f"after a kubelet restart registered in {registered:.1f} s, allocatable in {back:.1f} s")
        finally:
            node.stop()
            shutil.rmtree(work, ignore_errors=True)
    if args.record is not None:
        record_bench_run(args.record, __file__, argv, "; ".join(figures), start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
