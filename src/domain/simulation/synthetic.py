"""The embedded default workload: a synthetic cluster and pod list built from published figures only.

Node types are the 15 (model, GPUs, CPU, memory) types of the Alibaba GPU trace with their node counts
(docs/trace-replay.md §1.1), scaled by ``scale``. Pods follow the published mix of the ``default`` workload
(§1.2: 1088 CPU-only, 3078 sharing, 3911 one-GPU and 75 multi-GPU pods of 8152), the published sharing sizes
(810, 470, 320, 650, 230, 460 milli-GPU with their counts; the remaining 401 sharing pods spread over four
smaller sizes), and CPU requests around the published typical pods ((3152 CPU-milli, 810) for sharing pods,
11300-11400 CPU-milli per whole GPU) with ≈ 3.8 GiB of memory per core. It is not the trace: no trace file is
read, and it works on a fresh machine.
"""

from __future__ import annotations

import numpy as np

from domain.errors import InvalidRequestError
from domain.simulation.workload import TraceNode, TracePod

NODE_TYPES: tuple[tuple[str, int, int, int, int], ...] = (
    ("G2", 8, 96000, 393216, 549), ("T4", 2, 104000, 524288, 387), ("P100", 2, 16000, 122880, 107),
    ("G3", 8, 128000, 786432, 39), ("V100M16", 4, 32000, 131072, 28), ("P100", 2, 64000, 262144, 22),
    ("V100M32", 8, 96000, 786432, 21), ("V100M16", 1, 8000, 32768, 19), ("T4", 4, 96000, 393216, 17),
    ("V100M32", 4, 48000, 376832, 9), ("V100M16", 8, 64000, 262144, 7), ("P100", 1, 8000, 61440, 3),
    ("A10", 1, 128000, 1048576, 2), ("P100", 2, 8000, 61440, 2), ("V100M16", 8, 82000, 344064, 1),
)
"""(model, GPUs per node, CPU-milli, memory MiB, node count) of the published node list (§1.1)."""

POD_MIX = {"cpu": 1088, "share": 3078, "one": 3911, "multi": 75}
"""Pods per kind in the published ``default`` workload (§1.2)."""

SHARE_SIZES = {810: 1078, 470: 750, 320: 328, 650: 253, 230: 140, 460: 128, 110: 120, 220: 110, 50: 90, 550: 81}
"""Sharing sizes (milli-GPU) → pods; the first six are published, the last four spread the remaining 401."""

MULTI_SIZES = {2: 40, 4: 20, 8: 15}
"""Multi-GPU pods by GPU count (assumed split of the published 75)."""


def synthetic_nodes(scale: float = 0.1) -> list[TraceNode]:
    """Nodes of every published type, ``max(1, round(count × scale))`` of each. Raises for ``scale ≤ 0``."""
    if not scale > 0:
        raise InvalidRequestError("scale", scale, "must be > 0")
    nodes: list[TraceNode] = []
    for model, gpus, cpu, memory, count in NODE_TYPES:
        for _ in range(max(1, round(count * scale))):
            nodes.append(TraceNode(f"synth-node-{len(nodes):04d}", cpu, memory, gpus, model))
    return nodes


def synthetic_pods(scale: float = 0.1, *, seed: int = 0) -> list[TracePod]:
    """``≈ 8152 × scale`` pods drawn with the published mix (module docstring); deterministic for ``seed``."""
    if not scale > 0:
        raise InvalidRequestError("scale", scale, "must be > 0")
    rng = np.random.default_rng(seed)
    pods: list[TracePod] = []

    def add(cpu: int, gpus: int, milli: int) -> None:
        cpu = int(max(1000, round(cpu / 100) * 100))
        memory = int(round(cpu / 1000 * 3.8 * 1024 / 1024) * 1024)
        pods.append(TracePod(f"synth-pod-{len(pods):05d}", cpu, max(memory, 1024), gpus, milli))

    for _ in range(max(1, round(POD_MIX["cpu"] * scale))):
        add(int(rng.choice([1000, 2000, 4000, 8000, 16000])), 0, 0)
    sizes = np.array(list(SHARE_SIZES))
    weights = np.array(list(SHARE_SIZES.values()), np.float64)
    for _ in range(max(1, round(POD_MIX["share"] * scale))):
        milli = int(rng.choice(sizes, p=weights / weights.sum()))
        add(3152 if milli == 810 else int(rng.normal(4000, 1500)), 1, milli)
    for _ in range(max(1, round(POD_MIX["one"] * scale))):
        add(int(rng.choice([11300, 11400, 8000, 6000, 16000], p=[0.35, 0.25, 0.2, 0.1, 0.1])), 1, 1000)
    counts = np.array(list(MULTI_SIZES))
    multi_weights = np.array(list(MULTI_SIZES.values()), np.float64)
    for _ in range(max(1, round(POD_MIX["multi"] * scale))):
        gpus = int(rng.choice(counts, p=multi_weights / multi_weights.sum()))
        add(gpus * 8000, gpus, 1000)
    return pods
