"""The two readers of a ResourceSlice (``adapters.kubernetes.translate_dra``) agree without a server: the JSON a
``V1ResourceSlice`` serialises to (what the API server's list and watch send) reads back through
``slice_from_json`` equal to the slice written and to ``slice_from_v1`` of the model, for whole GPUs with
attributes, capacities, request policies and taints, and for MIG devices with counters; a slice without its pool
generation is refused naming the field."""

from __future__ import annotations

import pytest
from kubernetes import client

from adapters.kubernetes.translate_dra import slice_from_json, slice_from_v1, slice_to_v1
from domain.dra.build import desired_content
from domain.dra.slices import NodeOwner, ResourceSlice
from domain.errors import InvalidRequestError
from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.kube.protocol import ProtocolConstants
from domain.runtime.types import DeviceInfo

GIB = 2**30


def slices() -> list[ResourceSlice]:
    devices = [DeviceInfo(Gpu(0, GpuUuid("GPU-0"), "A100", 16 * GIB)),
               DeviceInfo(Gpu(1, GpuUuid("GPU-1"), "A100", 16 * GIB, health=Health.UNHEALTHY)),
               DeviceInfo(Gpu(2, GpuUuid("GPU-2"), "NVIDIA A100-SXM4-80GB", 80 * GIB, mig_mode=MigMode.ENABLED))]
    contents = desired_content(devices, protocol=ProtocolConstants(), mig_dynamic=True)
    return [ResourceSlice(f"n1-{i}", "gpu.lj-runtimekit.io", "n1", 3, len(contents), content,
                          owner=NodeOwner("n1", "uid-n1")) for i, content in enumerate(contents)]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_json_and_model_readers_agree_with_what_was_written(index: int) -> None:
    written = slices()[index]
    model = slice_to_v1(written)
    wire = client.ApiClient().sanitize_for_serialization(model)
    assert slice_from_json(wire) == written
    assert slice_from_v1(model) == written


def test_a_slice_without_its_pool_generation_is_refused_naming_the_field() -> None:
    wire = client.ApiClient().sanitize_for_serialization(slice_to_v1(slices()[0]))
    del wire["spec"]["pool"]["generation"]
    with pytest.raises(InvalidRequestError, match="generation"):
        slice_from_json(wire)
