"""The node's GPUs as ResourceSlice content (``domain.dra.build``) and the pool's generation and writes
(``domain.dra.pool``).

Behaviours covered:
- a whole GPU: one device with typed attributes (uuid, productName, index, memoryBytes; numaNode and
  resource.kubernetes.io/pcieRoot only when known), capacity cores 100 and memory in bytes with request policies
  (memory steps of the memory unit, or 1 % in percent mode), allowMultipleAllocations;
- an unhealthy GPU: tainted <driver>/unhealthy NoSchedule, or withdrawn;
- a MIG GPU (dynamic Runtime): one counter set in its own slice, one device per (profile, placement) consuming its
  memory and compute slices; a static Runtime: only the listed usable instances; a model without a table: nothing;
- splitting: 128 untainted devices per slice, 64 once one is tainted, counter sets 8 per slice; the API limits
  are refused on construction;
- the pool: generation 1 at first, unchanged on a repeat, bumped on a health change; resume from stored slices;
  resourceSliceCount on every slice; plan_writes creates, updates and deletes by name; long node names.
"""

from __future__ import annotations

import pytest

from domain.dra.build import GpuTopology, UnhealthyPolicy, desired_content
from domain.dra.pool import PoolState, plan_writes, slice_name
from domain.dra.slices import (
    MAX_DEVICES,
    Device,
    DeviceTaint,
    NodeOwner,
    RequestPolicy,
    SliceContent,
    TaintEffect,
)
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.kube.protocol import ProtocolConstants
from domain.runtime.types import DeviceInfo, MigInstanceInfo

GIB = 2**30
PROTOCOL = ProtocolConstants()


def gpu(index: int, *, health: Health = Health.HEALTHY, mig: bool = False, model: str = "NVIDIA A100-SXM4-40GB",
        memory: int = 40 * GIB) -> DeviceInfo:
    return DeviceInfo(Gpu(index, GpuUuid(f"GPU-{index:04d}"), model, memory, health,
                          MigMode.ENABLED if mig else MigMode.DISABLED))


def test_a_whole_gpu_is_one_shareable_device_with_typed_attributes_and_capacity() -> None:
    (content,) = desired_content([gpu(0, memory=40 * GIB + 123)], protocol=PROTOCOL)
    (device,) = content.devices
    assert device.name == "gpu-0"
    assert device.attributes == {"type": "gpu", "uuid": "GPU-0000", "productName": "NVIDIA A100-SXM4-40GB",
                                 "index": 0, "memoryBytes": 40 * GIB + 123}
    assert device.allow_multiple_allocations
    assert device.taints == ()
    cores, memory = device.capacity["cores"], device.capacity["memory"]
    assert (cores.value, cores.request_policy) == (100, RequestPolicy(default=100, minimum=1, maximum=100, step=1))
    assert memory.value == 40 * GIB + 123
    assert memory.request_policy == RequestPolicy(default=40 * GIB, minimum=GIB, maximum=40 * GIB, step=GIB)


def test_topology_adds_numa_node_and_the_standard_pcie_root_only_when_known() -> None:
    topology = {GpuUuid("GPU-0000"): GpuTopology(numa_node=1, pcie_root="pci0000:80")}
    (content,) = desired_content([gpu(0), gpu(1)], protocol=PROTOCOL, topology=topology)
    first, second = content.devices
    assert (first.attributes["numaNode"], first.attributes["resource.kubernetes.io/pcieRoot"]) == (1, "pci0000:80")
    assert "numaNode" not in second.attributes
    assert "resource.kubernetes.io/pcieRoot" not in second.attributes


def test_percent_mode_steps_memory_by_one_percent_of_the_gpu() -> None:
    protocol = ProtocolConstants(memory_unit="1%", resources=PROTOCOL.resources.__class__(
        memory="alibabacloud.com/gpu-memory.percentage"))
    (content,) = desired_content([gpu(0, memory=1000 * 2**20)], protocol=protocol)
    policy = content.devices[0].capacity["memory"].request_policy
    assert policy is not None
    assert (policy.step, policy.maximum) == (10 * 2**20, 1000 * 2**20)


def test_an_unhealthy_gpu_is_tainted_or_withdrawn() -> None:
    devices = [gpu(0), gpu(1, health=Health.UNHEALTHY)]
    (content,) = desired_content(devices, protocol=PROTOCOL)
    assert content.devices[0].taints == ()
    assert content.devices[1].taints == (DeviceTaint("gpu.lj-runtimekit.io/unhealthy", TaintEffect.NO_SCHEDULE),)
    (withdrawn,) = desired_content(devices, protocol=PROTOCOL, unhealthy=UnhealthyPolicy.WITHDRAW)
    assert [d.name for d in withdrawn.devices] == ["gpu-0"]


def test_a_dynamic_mig_gpu_is_a_counter_set_and_one_device_per_placement() -> None:
    devices_slice, counters_slice = desired_content([gpu(0, mig=True)], protocol=PROTOCOL, mig_dynamic=True)
    (counter_set,) = counters_slice.shared_counters
    assert counter_set.name == "gpu-0"
    assert {k for k in counter_set.counters if k.startswith("memory-slice-")} == {f"memory-slice-{i}" for i in range(8)}
    assert {k for k in counter_set.counters if k.startswith("compute-slice-")} == {
        f"compute-slice-{i}" for i in range(7)}
    assert counters_slice.devices == ()
    names = [d.name for d in devices_slice.devices]
    assert len(names) == 25  # A100-40GB: every placement of every profile
    assert len(set(names)) == len(names)
    big = next(d for d in devices_slice.devices if d.name == "gpu-0-mig-7g-40gb-0")
    (used,) = big.consumes_counters
    assert used.counter_set == "gpu-0"
    every_slice = {**{f"memory-slice-{i}": 1 for i in range(8)}, **{f"compute-slice-{i}": 1 for i in range(7)}}
    assert used.counters == every_slice
    assert big.attributes["profile"] == "7g.40gb"
    assert big.attributes["parentUUID"] == "GPU-0000"
    assert not big.allow_multiple_allocations
    three = next(d for d in devices_slice.devices if d.name == "gpu-0-mig-3g-20gb-4")
    assert set(three.consumes_counters[0].counters) == {
        "memory-slice-4", "memory-slice-5", "memory-slice-6", "memory-slice-7",
        "compute-slice-4", "compute-slice-5", "compute-slice-6"}
    media = next(d for d in devices_slice.devices if d.name.startswith("gpu-0-mig-1g-5gb-me-"))
    assert media.consumes_counters[0].counters["instances-1g-5gb-me"] == 1
    assert counter_set.counters["instances-1g-5gb-me"] == 1


def test_a_static_mig_gpu_offers_only_its_usable_listed_instances() -> None:
    base = gpu(0, mig=True)
    listed = (
        MigInstanceInfo(0, base.gpu.uuid, 1, 0, "3g.20gb", 0, 4, 3, 20 * GIB, "MIG-a"),
        MigInstanceInfo(0, base.gpu.uuid, 2, None, "3g.20gb", 4, 4, 3, 20 * GIB, ""),  # no compute instance
    )
    devices_slice, _ = desired_content([DeviceInfo(base.gpu, mig_instances=listed)], protocol=PROTOCOL)
    (device,) = devices_slice.devices
    assert (device.name, device.attributes["uuid"]) == ("gpu-0-mig-3g-20gb-0", "MIG-a")


def test_a_mig_gpu_of_an_unknown_model_gets_no_devices() -> None:
    assert desired_content([gpu(0, mig=True, model="Mystery GPU")], protocol=PROTOCOL, mig_dynamic=True) == ()


def test_devices_split_at_128_and_at_64_once_one_is_tainted() -> None:
    many = [gpu(i) for i in range(130)]
    assert [len(c.devices) for c in desired_content(many, protocol=PROTOCOL)] == [128, 2]
    many[5] = gpu(5, health=Health.UNHEALTHY)
    assert [len(c.devices) for c in desired_content(many, protocol=PROTOCOL)] == [64, 64, 2]


def test_counter_sets_split_at_8_and_mig_devices_at_64() -> None:
    content = desired_content([gpu(i, mig=True) for i in range(9)], protocol=PROTOCOL, mig_dynamic=True)
    assert [len(c.devices) for c in content] == [64, 64, 64, 33, 0, 0]  # 9 × 25 devices
    assert [len(c.shared_counters) for c in content] == [0, 0, 0, 0, 8, 1]


def test_slice_limits_are_refused_on_construction() -> None:
    with pytest.raises(InvalidRequestError, match="at most 128"):
        SliceContent(devices=tuple(Device(f"d-{i}") for i in range(MAX_DEVICES + 1)))
    with pytest.raises(InvalidRequestError, match="one or the other"):
        SliceContent(devices=(Device("d"),), shared_counters=desired_content(
            [gpu(0, mig=True)], protocol=PROTOCOL, mig_dynamic=True)[-1].shared_counters)
    with pytest.raises(InvalidRequestError, match="requestPolicy"):
        RequestPolicy(default=3, minimum=1, maximum=4, step=2)


def test_the_generation_bumps_on_every_change_and_never_on_a_repeat() -> None:
    pool = PoolState("node-a", "gpu.lj-runtimekit.io", owner=NodeOwner("node-a", "uid-1"))
    healthy = desired_content([gpu(0), gpu(1)], protocol=PROTOCOL)
    assert pool.advance(healthy)
    assert pool.generation == 1
    assert not pool.advance(desired_content([gpu(0), gpu(1)], protocol=PROTOCOL))
    assert pool.generation == 1
    assert pool.advance(desired_content([gpu(0), gpu(1, health=Health.UNHEALTHY)], protocol=PROTOCOL))
    assert pool.generation == 2
    (only,) = pool.slices()
    assert (only.name, only.generation, only.slice_count, only.pool) == (
        "node-a-gpu.lj-runtimekit.io-0", 2, 1, "node-a")
    assert only.owner == NodeOwner("node-a", "uid-1")


def test_every_slice_of_a_generation_carries_the_slice_count_and_a_node_without_gpus_has_one_empty_slice() -> None:
    pool = PoolState("n", "d.example.com")
    pool.advance(desired_content([gpu(i, mig=True) for i in range(2)], protocol=PROTOCOL, mig_dynamic=True))
    assert [(s.name, s.slice_count) for s in pool.slices()] == [("n-d.example.com-0", 2), ("n-d.example.com-1", 2)]
    assert pool.advance(())
    assert [s.content for s in pool.slices()] == [SliceContent()]
    assert not pool.advance(())


def test_resume_keeps_the_stored_generation_when_the_content_is_the_same() -> None:
    first = PoolState("n", "d.example.com")
    first.advance(desired_content([gpu(0)], protocol=PROTOCOL))
    first.advance(desired_content([gpu(0), gpu(1)], protocol=PROTOCOL))
    stored = first.slices()
    again = PoolState("n", "d.example.com")
    again.resume(stored)
    assert not again.advance(desired_content([gpu(0), gpu(1)], protocol=PROTOCOL))
    assert again.generation == 2
    assert again.advance(desired_content([gpu(0)], protocol=PROTOCOL))
    assert again.generation == 3


def test_plan_writes_creates_updates_and_deletes_by_name() -> None:
    pool = PoolState("n", "d.example.com")
    pool.advance(desired_content([gpu(i) for i in range(130)], protocol=PROTOCOL))
    stored = pool.slices()
    assert plan_writes(stored, stored).empty
    plan = plan_writes(stored, ())
    assert [s.name for s in plan.create] == ["n-d.example.com-0", "n-d.example.com-1"]
    pool.advance(desired_content([gpu(0)], protocol=PROTOCOL))
    plan = plan_writes(pool.slices(), stored)
    assert (plan.create, [s.name for s in plan.update], plan.delete) == ((), ["n-d.example.com-0"],
                                                                         ("n-d.example.com-1",))


def test_slice_names_stay_dns_subdomains_for_long_node_names() -> None:
    name = slice_name("x" * 250, "gpu.lj-runtimekit.io", 3)
    assert len(name) <= 253
    assert name.endswith("-gpu.lj-runtimekit.io-3")
    assert slice_name("y" * 250, "gpu.lj-runtimekit.io", 3) != name
