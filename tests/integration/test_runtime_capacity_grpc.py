"""Capacity admission of the reference Runtime over its real unix socket (issue 32: a tenant gets exactly what it
was granted).

The Runtime is built as ``ljrk runtime --backend simulated`` builds it (``entrypoints.runtime.containers``) and
reached only through ``GrpcNodeRuntime`` / ``GrpcNodeConfig``.

Behaviours covered:
- the reported attack: three Allocate calls of 80 % and 12 GiB each, for three pods, on one 16 GiB GPU — the
  first is granted, the second and third are refused with RESOURCE_EXHAUSTED (``CapacityExceededError`` on the
  client) naming pod, container, GPU UUID, what is granted, what is asked and the capacity; the book, the records
  (exporter data, config status) and the state file hold only the first, also after a restart;
- once the first pod is released the GPU admits a new grant again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from runtime_node import RunningRuntime
from runtime_node import start as start_runtime

from adapters.statefile import JsonRuntimeStateStore
from domain.runtime.types import ContainerAllocationRequest, PlannedGpu
from domain.units import GiB
from ports.runtime import CapacityExceededError


def start(directory: Path) -> RunningRuntime:
    """One simulated 16 GiB A100."""
    return start_runtime(directory, "1x16Gi:A100")


def eighty_percent(node: RunningRuntime, pod: int) -> ContainerAllocationRequest:
    uuid = node.runtime.list_devices()[0].gpu.uuid
    return ContainerAllocationRequest(f"uid-{pod}", "tenant", f"pod-{pod}", "main",
                                      (PlannedGpu(0, uuid, core_milli=800, memory_bytes=12 * GiB),))


def test_three_80_percent_grants_on_one_gpu_only_the_first_is_granted(sock_dir: Path) -> None:
    node = start(sock_dir)
    try:
        uuid = node.runtime.list_devices()[0].gpu.uuid
        granted = node.runtime.allocate(eighty_percent(node, 1))
        assert granted.envs["NVIDIA_VISIBLE_DEVICES"] == uuid
        for pod in (2, 3):
            with pytest.raises(CapacityExceededError) as error:
                node.runtime.allocate(eighty_percent(node, pod))
            message = str(error.value)
            for part in (f"tenant/pod-{pod}:main", f"uid-{pod}", uuid,
                         "800 milli-GPU core and 12884901888 bytes granted already",
                         "asked for 800 milli-GPU core and 12884901888 bytes",
                         "capacity 1000 milli-GPU and 17179869184 bytes"):
                assert part in message
        assert [(c.pod_uid, c.container) for c in node.runtime.exporter_data().containers] == [("uid-1", "main")]
        assert node.config.status().active_allocations == 1
        assert node.runtime.allocate(eighty_percent(node, 1)) == granted  # the holder's repeat still answers
    finally:
        node.stop()
    saved = JsonRuntimeStateStore.in_dir(sock_dir / "state").load()
    assert saved is not None
    assert [r.key for r in saved.allocations] == [("uid-1", "main")]
    node = start(sock_dir)
    try:
        assert node.config.status().active_allocations == 1
        with pytest.raises(CapacityExceededError):
            node.runtime.allocate(eighty_percent(node, 2))
        assert node.runtime.release("uid-1") == 1
        node.runtime.allocate(eighty_percent(node, 2))
        assert [(c.pod_uid, c.container) for c in node.runtime.exporter_data().containers] == [("uid-2", "main")]
    finally:
        node.stop()
