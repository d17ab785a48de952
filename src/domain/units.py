"""Units shared by every component.

Invariants: compute is counted in milli-GPU (1/1000 of one GPU's compute, so 1 % = 10 milli-GPU and one
whole GPU = 1000); GPU and host memory in bytes; CPU in milli-cores (1/1000 core), as Kubernetes counts it.
The Kubernetes protocol speaks core in percent (1-100) and memory in `memory-unit` (default 1 GiB); the
conversion happens once, at the edge, with the helpers below.
"""

from __future__ import annotations

from typing import Final

MILLI_PER_GPU: Final = 1000
"""milli-GPU in one whole GPU (the published trace's unit, ATC'23 FGD paper §2)."""

MILLI_PER_PERCENT: Final = 10
"""milli-GPU in one percent of a GPU's compute (`gpu-core.percentage` = 100 per GPU)."""

PERCENT_PER_GPU: Final = 100

KiB: Final = 1024
MiB: Final = 1024 * KiB
GiB: Final = 1024 * MiB
PiB: Final = 1024 * 1024 * GiB

MAX_GPU_MEMORY_BYTES: Final = PiB
"""Largest GPU memory one share may ask for (bytes, 1 PiB). No GPU comes near it (the largest hold a few hundred
GiB), and it keeps the planner's ``1000 × memory`` and the ledger's per-GPU sums within int64 (2^63 bytes), where a
larger request used to escape as ``OverflowError``."""

MAX_NODE_QUANTITY: Final = PiB
"""Largest node-level request of one pod: host memory in bytes (1 PiB) or CPU in milli-cores (about 1.1e12 cores).
Far above any node; small enough that the ledger's sums over thousands of pods stay within int64."""

MAX_GPUS_PER_NODE: Final = 64
"""Most GPUs one node may have (simulated inventories, trace nodes and pods). A real node has at most a few dozen
(16 on the largest boards today); without a bound ``99999999999x16Gi`` was accepted and grew memory without
limit."""


def percent_to_milli(percent: int) -> int:
    """Convert a core share in percent of one GPU (int) to milli-GPU (int): ``percent × 10``."""
    return percent * MILLI_PER_PERCENT


def format_bytes(value: int) -> str:
    """Render a byte count for messages: exact ``Gi``/``Mi`` when divisible, else plain bytes."""
    if value % GiB == 0:
        return f"{value // GiB}Gi"
    if value % MiB == 0:
        return f"{value // MiB}Mi"
    return f"{value}B"
