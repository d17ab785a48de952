"""``ljrk inspect`` benchmark: how long building and rendering the report takes for a large cluster.

Usage (from the repository root, with the project's virtual environment)::

    PYTHONPATH=src .venv/bin/python bench/inspect_report.py [--nodes 1000] [--gpus 8] [--pods-per-gpu 3]

Builds Node objects with an inventory annotation (``--gpus`` A100 16 GiB each) and bound Pods with plans (each GPU
shared by ``--pods-per-gpu`` pods of 30 % and 4 GiB; one pod in ten without a plan, counted by inference), then
times, in one process, :func:`domain.inspection.report.build_report` (the scheduler's booking of the listing plus
the per-GPU read-back and flags), the same with a scheduler view to compare against, and the table and JSON
renderings. No API server: the listing's transfer is not measured (it is ``kubectl get nodes,pods -A -o json``'s).

The last lines are ``nodes=<int>``, ``pods=<int>``, ``report_seconds=<float>``, ``report_with_view_seconds=<float>``,
``render_seconds=<float>``, ``json_seconds=<float>`` and ``peak_rss_mib=<float>``.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

from domain.allocation import ContainerGrant, GpuGrant, PodAllocation
from domain.gpu import Gpu, GpuUuid
from domain.inspection.encode import report_json
from domain.inspection.report import book, build_report
from domain.inspection.view import scheduler_view
from domain.kube.annotations import encode_inventory, encode_plan
from domain.kube.objects import ContainerSpec, NodeObject, PodObject, PodPhase
from domain.kube.protocol import ProtocolConstants
from domain.units import GiB
from entrypoints.inspect.render import render

PROTOCOL = ProtocolConstants()


def listing(nodes: int, gpus: int, per_gpu: int, now: float) -> tuple[list[NodeObject], list[PodObject]]:
    """The synthetic cluster of the module docstring."""
    keys, res = PROTOCOL.annotations, PROTOCOL.resources
    node_objects, pods = [], []
    for n in range(nodes):
        name = f"node-{n:05d}"
        devices = tuple(Gpu(i, GpuUuid(f"GPU-{name}-{i}"), "A100", 16 * GiB) for i in range(gpus))
        text = encode_inventory(devices, heartbeat=now, protocol=PROTOCOL.fingerprint())
        node_objects.append(NodeObject(name, annotations={keys.node_inventory: text},
                                       allocatable={"cpu": "128", "memory": "1Ti", "pods": "250"}))
        for i in range(gpus):
            for k in range(per_gpu):
                uid = f"{name}-{i}-{k}"
                annotations = {}
                if k % 10 != 9:
                    plan = PodAllocation(uid, name, (ContainerGrant("main", (GpuGrant(i, 300, 4 * GiB),)),))
                    annotations[keys.pod_plan] = encode_plan(plan, devices)
                pods.append(PodObject(uid, "default", uid, node_name=name, phase=PodPhase.RUNNING,
                                      containers=(ContainerSpec("main", limits={res.core: "30", res.memory: "4"}),),
                                      annotations=annotations))
    return node_objects, pods


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods-per-gpu", type=int, default=3)
    args = parser.parse_args()
    now = time.time()
    nodes, pods = listing(args.nodes, args.gpus, args.pods_per_gpu, now)
    began = time.perf_counter()
    report = build_report(nodes, pods, PROTOCOL, now=now)
    report_s = time.perf_counter() - began
    view = scheduler_view(book(nodes, pods, PROTOCOL, now=now), serving=True)
    began = time.perf_counter()
    compared = build_report(nodes, pods, PROTOCOL, now=now, view=view)
    with_view_s = time.perf_counter() - began
    began = time.perf_counter()
    text = render(report, wide=True)
    render_s = time.perf_counter() - began
    began = time.perf_counter()
    data = json.dumps(report_json(report))
    json_s = time.perf_counter() - began
    print(f"{len(nodes)} nodes, {len(pods)} pods: {report.totals.gpus} GPUs, {report.totals.gpu_pods} GPU pods, "
          f"{len(compared.disagreements)} disagreements, {len(text.splitlines())} wide lines, {len(data)} JSON bytes")
    print(f"nodes={len(nodes)}")
    print(f"pods={len(pods)}")
    print(f"report_seconds={report_s:.3f}")
    print(f"report_with_view_seconds={with_view_s:.3f}")
    print(f"render_seconds={render_s:.3f}")
    print(f"json_seconds={json_s:.3f}")
    print(f"peak_rss_mib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")


if __name__ == "__main__":
    main()
