"""Resource requests: validation at construction and the default and effective-request rules.

Behaviours covered:

* ``ContainerRequest.share`` rejects a core percentage that is zero, negative, above 100, fractional (``50.5``)
  or a bool, and the error names the field (``container[<name>].core_percent``) and the rejected value;
* ``ContainerRequest`` rejects zero/negative/over-100 % ``core_milli``, zero or negative memory, negative
  whole-GPU counts, bools in any integer field, an empty name, and whole GPUs combined with a share; memory
  above 1 PiB (``MAX_GPU_MEMORY_BYTES``: 2^63 bytes used to overflow the planner);
* percent → milli-GPU conversion at the edge (``core_percent=30`` is 300 milli-GPU);
* ``kind`` and ``nominal_milli`` of whole, share, memory-only and GPU-less containers;
* ``PodRequest`` rejects an empty UID, duplicate container names and negative, non-integer or
  beyond-any-node (``MAX_NODE_QUANTITY``) CPU/memory;
* ``PodRequest.effective_gpu_milli`` = ``max(Σ app containers, max init container)``; ``gpu_containers``
  lists init containers first; ``simple_shape`` only for exactly one GPU container;
* ``resolve_share`` default rule (failure case B09): memory omitted → ``floor(gpu_mem × core / 1000)``;
  core omitted → ``ceil(1000 × mem / gpu_mem)``, at least 1, at most 1000; both omitted or a GPU without
  memory → error; the floors keep defaulted memory of shares whose cores sum to ≤ 100 % within the GPU;
* ``GpuSelector.allows`` (model allow-list, UUID include and exclude lists).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.errors import DomainError, InvalidRequestError
from domain.gpu import Gpu, GpuUuid
from domain.request import (
    ContainerRequest,
    GpuKind,
    GpuSelector,
    PodRequest,
    resolve_share,
    single_container_pod,
)
from domain.units import MAX_GPU_MEMORY_BYTES, MAX_NODE_QUANTITY, GiB, MiB, percent_to_milli

GPU16 = 16 * GiB


# ---------------------------------------------------------------------------------------------- core percent
@pytest.mark.parametrize("percent", [0, -1, -100, 101, 150, 50.5, 0.5, True, False, "50"])
def test_share_rejects_bad_core_percent_naming_field_and_value(percent: object) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        ContainerRequest.share("c", core_percent=percent, memory_bytes=GiB)
    assert caught.value.field == "container[c].core_percent"
    assert caught.value.value is percent
    assert "core_percent" in str(caught.value)
    assert repr(percent) in str(caught.value)


@pytest.mark.parametrize(("percent", "milli"), [(1, 10), (30, 300), (100, 1000)])
def test_share_converts_percent_to_milli(percent: int, milli: int) -> None:
    request = ContainerRequest.share("c", core_percent=percent)
    assert request.core_milli == milli == percent_to_milli(percent)
    assert request.memory_bytes is None
    assert request.kind is GpuKind.SHARE
    assert request.nominal_milli == milli


def test_share_with_memory_only_has_no_core_and_zero_nominal_milli() -> None:
    request = ContainerRequest.share("c", memory_bytes=2 * GiB)
    assert request.core_milli is None
    assert request.memory_bytes == 2 * GiB
    assert request.kind is GpuKind.SHARE
    assert request.nominal_milli == 0


@pytest.mark.parametrize("memory", [0, -1])
def test_share_rejects_zero_or_negative_memory(memory: int) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        ContainerRequest.share("c", core_percent=30, memory_bytes=memory)
    assert caught.value.field == "container[c].memory_bytes"
    assert caught.value.value == memory


@pytest.mark.parametrize("memory", [1.5, True, "4Gi"])
def test_share_rejects_non_integer_memory(memory: object) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        ContainerRequest.share("c", core_percent=30, memory_bytes=memory)
    assert caught.value.field == "container[c].memory_bytes"
    assert caught.value.value is memory


def test_share_with_zero_core_and_zero_memory_is_rejected() -> None:
    """B12b: ``core=0 mem=0`` is refused at construction, never booked as 0 (= unlimited)."""
    with pytest.raises(InvalidRequestError) as caught:
        ContainerRequest.share("c", core_percent=0, memory_bytes=0)
    assert caught.value.field.startswith("container[c].")
    assert caught.value.value == 0


# ---------------------------------------------------------------------------------------------- core milli
@pytest.mark.parametrize("core", [0, -1, 1001, 1500])
def test_container_rejects_core_milli_out_of_range(core: int) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        ContainerRequest("app", core_milli=core)
    assert caught.value.field == "container[app].core_milli"
    assert caught.value.value == core
    assert "1..1000" in caught.value.reason


@pytest.mark.parametrize("core", [500.5, True, "500"])
def test_container_rejects_non_integer_core_milli(core: object) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        ContainerRequest("app", core_milli=core)  # type: ignore[arg-type]
    assert caught.value.field == "container[app].core_milli"
    assert caught.value.value is core


@pytest.mark.parametrize("core", [1, 999, 1000])
def test_container_accepts_core_milli_bounds(core: int) -> None:
    assert ContainerRequest("app", core_milli=core).nominal_milli == core


@pytest.mark.parametrize("memory", [0, -GiB])
def test_container_rejects_zero_or_negative_memory(memory: int) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        ContainerRequest("app", core_milli=100, memory_bytes=memory)
    assert caught.value.field == "container[app].memory_bytes"
    assert caught.value.value == memory


def test_container_accepts_one_byte_memory() -> None:
    assert ContainerRequest("app", memory_bytes=1).memory_bytes == 1


@pytest.mark.parametrize("memory", [MAX_GPU_MEMORY_BYTES + 1, 2**63, 8589934591 * GiB])
def test_container_rejects_memory_beyond_any_gpu_naming_field_and_value(memory: int) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        ContainerRequest("app", memory_bytes=memory)
    assert (caught.value.field, caught.value.value) == ("container[app].memory_bytes", memory)
    assert "1 PiB" in caught.value.reason
    assert ContainerRequest("app", memory_bytes=MAX_GPU_MEMORY_BYTES).memory_bytes == MAX_GPU_MEMORY_BYTES


@pytest.mark.parametrize(("core", "memory"), [(500, None), (None, GiB), (500, GiB)])
def test_whole_gpus_combined_with_share_are_rejected(core: int | None, memory: int | None) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        ContainerRequest("app", gpus=1, core_milli=core, memory_bytes=memory)
    assert caught.value.field == "container[app].gpus"
    assert caught.value.value == 1
    assert "whole GPU" in caught.value.reason


@pytest.mark.parametrize("gpus", [-1, True, 1.5])
def test_container_rejects_bad_gpu_count(gpus: object) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        ContainerRequest("app", gpus=gpus)  # type: ignore[arg-type]
    assert caught.value.field == "container[app].gpus"
    assert caught.value.value is gpus


def test_container_rejects_empty_name() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        ContainerRequest("", core_milli=100)
    assert caught.value.field == "container.name"


def test_invalid_request_error_is_a_domain_and_value_error() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        ContainerRequest("app", core_milli=0)
    assert isinstance(caught.value, DomainError)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value).startswith("container[app].core_milli=0: ")


@pytest.mark.parametrize(
    ("container", "kind", "milli"),
    [
        (ContainerRequest("a", gpus=2), GpuKind.WHOLE, 2000),
        (ContainerRequest("a", core_milli=250), GpuKind.SHARE, 250),
        (ContainerRequest("a", core_milli=250, memory_bytes=GiB), GpuKind.SHARE, 250),
        (ContainerRequest("a", memory_bytes=GiB), GpuKind.SHARE, 0),
        (ContainerRequest("a"), GpuKind.NONE, 0),
    ],
)
def test_kind_and_nominal_milli(container: ContainerRequest, kind: GpuKind, milli: int) -> None:
    assert container.kind is kind
    assert container.nominal_milli == milli


# ---------------------------------------------------------------------------------------------- pod
def test_pod_rejects_duplicate_container_names() -> None:
    containers = (ContainerRequest("x", core_milli=100), ContainerRequest("x", core_milli=200, init=True))
    with pytest.raises(InvalidRequestError) as caught:
        PodRequest("uid-1", containers)
    assert caught.value.field == "pod[uid-1].containers.name"
    assert caught.value.value == ["x", "x"]


@pytest.mark.parametrize("field", ["cpu_milli", "memory_bytes"])
def test_pod_rejects_negative_node_resources(field: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        PodRequest("uid-1", **{field: -1})  # type: ignore[arg-type]
    assert caught.value.field == f"pod[uid-1].{field}"
    assert caught.value.value == -1


@pytest.mark.parametrize("field", ["cpu_milli", "memory_bytes"])
def test_pod_rejects_node_resources_beyond_any_node(field: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        PodRequest("uid-1", **{field: MAX_NODE_QUANTITY + 1})  # type: ignore[arg-type]
    assert (caught.value.field, caught.value.value) == (f"pod[uid-1].{field}", MAX_NODE_QUANTITY + 1)
    assert getattr(PodRequest("uid-1", **{field: MAX_NODE_QUANTITY}), field) == MAX_NODE_QUANTITY  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [1.5, True, "100m"])
def test_pod_rejects_non_integer_cpu(value: object) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        PodRequest("uid-1", cpu_milli=value)  # type: ignore[arg-type]
    assert caught.value.field == "pod[uid-1].cpu_milli"
    assert caught.value.value is value


def test_pod_rejects_empty_uid() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        PodRequest("")
    assert caught.value.field == "pod.uid"


def test_effective_gpu_milli_takes_sum_of_app_when_larger() -> None:
    pod = PodRequest(
        "p",
        (
            ContainerRequest("init", core_milli=500, init=True),
            ContainerRequest("a", core_milli=300),
            ContainerRequest("b", core_milli=400),
        ),
    )
    assert pod.effective_gpu_milli == 700


def test_effective_gpu_milli_takes_largest_init_when_larger() -> None:
    pod = PodRequest(
        "p",
        (
            ContainerRequest("init1", core_milli=800, init=True),
            ContainerRequest("init2", core_milli=600, init=True),
            ContainerRequest("a", core_milli=300),
        ),
    )
    assert pod.effective_gpu_milli == 800  # inits never add up: max, not 1400


def test_effective_gpu_milli_counts_whole_gpus() -> None:
    pod = PodRequest("p", (ContainerRequest("init", gpus=1, init=True), ContainerRequest("a", gpus=2)))
    assert pod.effective_gpu_milli == 2000


def test_gpu_containers_lists_init_first_and_skips_gpu_less() -> None:
    app = ContainerRequest("app", core_milli=100)
    sidecar = ContainerRequest("sidecar")
    init = ContainerRequest("init", memory_bytes=GiB, init=True)
    pod = PodRequest("p", (app, sidecar, init))
    assert pod.gpu_containers == (init, app)
    assert pod.wants_gpu
    assert pod.simple_shape is None


def test_simple_shape_and_cpu_only_pod() -> None:
    pod = single_container_pod("p", cpu_milli=500, core_milli=300, gpu_memory_bytes=GiB)
    assert pod.simple_shape == ContainerRequest("main", core_milli=300, memory_bytes=GiB)
    cpu_only = single_container_pod("q", cpu_milli=500)
    assert not cpu_only.wants_gpu
    assert cpu_only.simple_shape is None
    assert cpu_only.effective_gpu_milli == 0


def test_label_uses_namespace_and_name_or_uid() -> None:
    assert PodRequest("u1", name="web", namespace="ns").label() == "ns/web"
    assert PodRequest("u1").label() == "u1"


# ---------------------------------------------------------------------------------------------- default rule
def test_resolve_share_memory_omitted_is_floor_of_proportional_memory() -> None:
    core, memory = resolve_share(core_milli=333, memory_bytes=None, gpu_memory_bytes=GPU16)
    assert core == 333
    assert memory == GPU16 * 333 // 1000
    assert memory < GPU16 * 333 / 1000  # 16 GiB × 0.333 is not integral: floored
    assert memory > 0


def test_resolve_share_core_omitted_is_ceil_of_proportional_core() -> None:
    core, memory = resolve_share(core_milli=None, memory_bytes=GiB, gpu_memory_bytes=GPU16)
    assert (core, memory) == (63, GiB)  # 1000 / 16 = 62.5 → 63
    core, memory = resolve_share(core_milli=None, memory_bytes=4 * GiB, gpu_memory_bytes=GPU16)
    assert (core, memory) == (250, 4 * GiB)  # exact: no rounding up


def test_resolve_share_core_omitted_is_at_least_one_milli() -> None:
    """A memory-only share always takes some core, so it can never land on a GPU held at 100 % (B09)."""
    assert resolve_share(core_milli=None, memory_bytes=1, gpu_memory_bytes=GPU16) == (1, 1)


def test_resolve_share_core_omitted_is_capped_at_one_gpu() -> None:
    core, memory = resolve_share(core_milli=None, memory_bytes=20 * GiB, gpu_memory_bytes=GPU16)
    assert core == 1000
    assert memory == 20 * GiB  # the memory itself is not shrunk: it will not fit, and must not


def test_resolve_share_keeps_explicit_values() -> None:
    assert resolve_share(core_milli=300, memory_bytes=5 * MiB, gpu_memory_bytes=GPU16) == (300, 5 * MiB)


def test_resolve_share_needs_core_or_memory() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        resolve_share(core_milli=None, memory_bytes=None, gpu_memory_bytes=GPU16)
    assert caught.value.field == "core_milli"


@pytest.mark.parametrize("gpu_memory", [0, -1])
def test_resolve_share_refuses_gpu_without_memory(gpu_memory: int) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        resolve_share(core_milli=100, memory_bytes=None, gpu_memory_bytes=gpu_memory)
    assert caught.value.field == "gpu.memory_bytes"
    assert caught.value.value == gpu_memory


@settings(max_examples=200, deadline=None)
@given(
    cores=st.lists(st.integers(1, 1000), min_size=1, max_size=12).filter(lambda c: sum(c) <= 1000),
    gpu_memory=st.integers(1000, 200 * GiB),
)
def test_defaulted_memory_of_shares_within_one_gpu_never_exceeds_it(cores: list[int], gpu_memory: int) -> None:
    memories = [resolve_share(core_milli=c, memory_bytes=None, gpu_memory_bytes=gpu_memory)[1] for c in cores]
    assert sum(memories) <= gpu_memory
    assert all(m >= 1 for m in memories)


@settings(max_examples=200, deadline=None)
@given(memory=st.integers(1, 400 * GiB), gpu_memory=st.integers(1, 200 * GiB))
def test_defaulted_core_is_ceil_clamped(memory: int, gpu_memory: int) -> None:
    core, granted = resolve_share(core_milli=None, memory_bytes=memory, gpu_memory_bytes=gpu_memory)
    assert granted == memory
    assert 1 <= core <= 1000
    if core < 1000:
        # the smallest core (≥ 1) whose share of the GPU covers the memory, in exact integers
        assert core * gpu_memory >= 1000 * memory
        assert core == 1 or (core - 1) * gpu_memory < 1000 * memory
    else:
        assert 999 * gpu_memory < 1000 * memory


# ---------------------------------------------------------------------------------------------- selector
def _gpu(uuid: str, model: str) -> Gpu:
    return Gpu(0, GpuUuid(uuid), model, GPU16)


def test_selector_allows_by_model_and_uuid_lists() -> None:
    a100, v100 = _gpu("GPU-a", "A100"), _gpu("GPU-v", "V100")
    assert GpuSelector().unconstrained
    assert GpuSelector().allows(a100)
    by_model = GpuSelector(models=("A100",))
    assert not by_model.unconstrained
    assert by_model.allows(a100)
    assert not by_model.allows(v100)
    include = GpuSelector(include_uuids=frozenset({"GPU-v"}))
    assert include.allows(v100)
    assert not include.allows(a100)
    exclude = GpuSelector(exclude_uuids=frozenset({"GPU-v"}))
    assert exclude.allows(a100)
    assert not exclude.allows(v100)
