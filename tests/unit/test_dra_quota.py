"""Per-namespace DRA claim quotas (``domain.dra.quota``).

Behaviours covered:
- the Namespace labels parse to limits (absent = no limit); bad values name the label and the value;
- a whole GPU (no consumedCapacity) counts 100 cores and the slice's memory; a share counts its consumedCapacity;
  a share without memory gets the memory its cores give of the device; several results add up; other drivers'
  results count nothing;
- a MIG device counts its memory and ceil(100 x compute slices taken / compute slices of its GPU) cores;
- the safe side: bad consumedCapacity counts as the whole device (named), an unlisted device is named as unknown;
- the refusal: within the limit none, past it a message saying over quota with the claim, namespace, key, limit,
  use and ask; both keys named when both are over; exactly at the limit fits.
"""

from __future__ import annotations

import pytest

from domain.dra.claims import AllocationResult, ClaimAllocation
from domain.dra.quota import (
    DeviceFacts,
    QuotaLimits,
    Usage,
    claim_usage,
    device_facts,
    namespace_usage,
    quota_refusal,
    read_limits,
)
from domain.dra.slices import Capacity, CounterConsumption, CounterSet, Device, ResourceSlice, SliceContent
from domain.errors import InvalidRequestError
from domain.kube.protocol import DraNames

NAMES = DraNames()
DRIVER = NAMES.driver
GI = 2**30
CORES, MEMORY = NAMES.claim_quota_cores, NAMES.claim_quota_memory


def _slices() -> list[ResourceSlice]:
    whole = SliceContent(devices=(Device("gpu-0", capacity={"cores": Capacity(100), "memory": Capacity(80 * GI)}),
                                  Device("gpu-1", capacity={"cores": Capacity(100), "memory": Capacity(40 * GI)})))
    taken = {f"compute-slice-{i}": 1 for i in range(3)} | {f"memory-slice-{i}": 1 for i in range(4)}
    mig = SliceContent(devices=(Device("gpu-2-mig-3g-40gb-0", capacity={"memory": Capacity(40 * GI)},
                                       consumes_counters=(CounterConsumption("gpu-2", taken),)),))
    counters = {f"compute-slice-{i}": 1 for i in range(7)} | {f"memory-slice-{i}": 1 for i in range(8)}
    shared = SliceContent(shared_counters=(CounterSet("gpu-2", counters),))
    other = SliceContent(devices=(Device("gpu-0", capacity={"memory": Capacity(1)}),))
    return [ResourceSlice("n1-a", DRIVER, "n1", 1, 3, whole), ResourceSlice("n1-b", DRIVER, "n1", 1, 3, mig),
            ResourceSlice("n1-c", DRIVER, "n1", 1, 3, shared), ResourceSlice("x", "other.example.com", "n1", 1, 1,
                                                                             other)]


FACTS = device_facts(_slices(), driver=DRIVER)


def _claim(name: str, *results: AllocationResult, namespace: str = "team") -> ClaimAllocation:
    return ClaimAllocation(namespace, name, f"uid-{name}", results)


def _result(device: str, driver: str = DRIVER, pool: str = "n1", **consumed: str) -> AllocationResult:
    return AllocationResult("r", driver, pool, device, consumed)


def test_labels_parse_to_limits_and_absent_ones_set_none() -> None:
    assert read_limits({CORES: "150", MEMORY: "64Gi", "other": "x"}, NAMES) == QuotaLimits(150, 64 * GI)
    assert read_limits({MEMORY: "1000"}, NAMES) == QuotaLimits(None, 1000)
    assert not read_limits({}, NAMES).active


@pytest.mark.parametrize(("labels", "expected"), [
    ({CORES: "1.5"}, f"namespace label {CORES}='1.5': must be a whole number of percent of one GPU"),
    ({CORES: "-1"}, f"namespace label {CORES}='-1'"),
    ({CORES: "1" * 12}, f"namespace label {CORES}="),
    ({MEMORY: "64GB"}, f"namespace label {MEMORY}='64GB': must be a non-negative integer quantity"),
    ({MEMORY: "0.5Gi"}, f"namespace label {MEMORY}='0.5Gi'"),
])
def test_bad_label_values_name_the_label_and_value(labels: dict[str, str], expected: str) -> None:
    with pytest.raises(InvalidRequestError) as error:
        read_limits(labels, NAMES)
    assert expected in str(error.value)


def test_slices_give_whole_gpu_and_mig_device_facts() -> None:
    assert FACTS[("n1", "gpu-0")] == DeviceFacts(100, 80 * GI)
    assert FACTS[("n1", "gpu-2-mig-3g-40gb-0")] == DeviceFacts(43, 40 * GI)  # ceil(300 / 7)
    assert ("n1", "gpu-0") in FACTS
    assert FACTS[("n1", "gpu-0")].memory_bytes != 1


def test_whole_device_share_and_several_results_add_up() -> None:
    claim = _claim("c", _result("gpu-0"), _result("gpu-1", cores="30", memory="4Gi"),
                   _result("gpu-1", cores="20"), _result("dev", driver="other.example.com"))
    usage = claim_usage(claim, driver=DRIVER, devices=FACTS)
    # gpu-0 whole: 100 + 80Gi; share: 30 + 4Gi; cores-only share of the 40Gi gpu-1: 20 + 8Gi
    assert usage.usage == Usage(150, 92 * GI)
    assert (usage.key, usage.uid, usage.problems, usage.unknown) == ("team/c", "uid-c", (), ())


def test_mig_device_counts_its_memory_and_compute_slices() -> None:
    usage = claim_usage(_claim("m", _result("gpu-2-mig-3g-40gb-0")), driver=DRIVER, devices=FACTS)
    assert usage.usage == Usage(43, 40 * GI)


def test_bad_consumed_capacity_counts_the_whole_device_and_is_named() -> None:
    usage = claim_usage(_claim("b", _result("gpu-1", cores="lots")), driver=DRIVER, devices=FACTS)
    assert usage.usage == Usage(100, 40 * GI)
    assert len(usage.problems) == 1
    assert "cores" in usage.problems[0]
    assert "counted as the whole device" in usage.problems[0]


def test_unlisted_device_is_counted_as_a_gpu_without_memory_and_named() -> None:
    usage = claim_usage(_claim("u", _result("gpu-9", pool="gone")), driver=DRIVER, devices=FACTS)
    assert usage.usage == Usage(100, 0)
    assert usage.unknown
    assert "gpu-9 in pool gone: no ResourceSlice" in usage.unknown[0]
    shared = claim_usage(_claim("s", _result("gpu-9", pool="gone", cores="10")), driver=DRIVER, devices=FACTS)
    assert shared.usage == Usage(10, 0)
    assert "no memory" in shared.unknown[0]


def test_refusal_names_claim_namespace_key_limit_use_and_ask() -> None:
    current = namespace_usage("team", QuotaLimits(cores=150, memory_bytes=100 * GI),
                              [claim_usage(_claim("a", _result("gpu-0")), driver=DRIVER, devices=FACTS)])
    assert (current.used, current.claims) == (Usage(100, 80 * GI), 1)
    assert quota_refusal("team/b", Usage(50, 20 * GI), current, NAMES) is None  # exactly at both limits
    message = quota_refusal("team/b", Usage(60, 4 * GI), current, NAMES)
    assert message == (f"ResourceClaim team/b is over quota in namespace team: cores limit {CORES}=150 (1.5 GPU): "
                       "in use 100 (1 GPU) by 1 claim(s), this claim asks 60 (0.6 GPU)")
    both = quota_refusal("team/b", Usage(60, 24 * GI), current, NAMES)
    assert both is not None
    assert "over quota" in both
    assert f"memory limit {MEMORY}=100Gi: in use 80Gi by 1 claim(s), this claim asks 24Gi" in both


def test_one_key_limited_leaves_the_other_free() -> None:
    current = namespace_usage("team", QuotaLimits(memory_bytes=8 * GI), [])
    assert quota_refusal("team/b", Usage(10_000, 8 * GI), current, NAMES) is None
    assert quota_refusal("team/b", Usage(0, 8 * GI + 1), current, NAMES) is not None
