"""A time-sharing request on a node whose GPUs are in MIG mode.

Behaviours covered:

* ``gpu-memory`` on a node with only MIG-mode GPUs is refused with a reason that names MIG, the MIG resource to ask
  for and the profiles that would hold the request, smallest first; a request equal to a profile's memory fits that
  profile (inclusive boundary); a request larger than every profile says ``none``; a whole GPU is held only by the
  profile spanning the GPU; a core share needs as large a share of compute slices;
* a node with a time-sharing GPU beside its MIG GPUs still takes the pod there; a pod whose GPU selection rules
  out the MIG GPUs keeps the old reason; the extender's per-node reasons carry the same text.
"""

from __future__ import annotations

import pytest

from domain.kube.objects import PodObject
from domain.mig.profiles import MIG_MODELS
from domain.request import ContainerRequest, PodRequest
from domain.scheduling.mig.timesharing import fitting_profiles
from domain.units import GiB
from entrypoints.scheduler.extender_json import ExtenderJson
from services.scheduler.extender import Extender
from support.kube_builders import KEYS
from support.mig_builders import mig_gpus, mig_node
from support.scheduler_world import World, world

STEM = "alibabacloud.com/mig-"


def mig_world(**kwargs: object) -> World:
    w = world()
    w.service.on_node(w.cluster.create_node(mig_node("n1", **kwargs)))  # type: ignore[arg-type]
    return w


@pytest.mark.parametrize(("mem", "fitting"), [
    ("20", "1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"),
    ("10", "1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"),  # equal to 1g.10gb's memory: it fits
    ("11", "1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"),
    ("80", "7g.80gb"),
    ("81", "none"),
])
def test_gpu_memory_on_an_all_mig_node_names_mig_and_the_profiles_that_hold_it(mem: str, fitting: str) -> None:
    w = mig_world()
    result = w.service.schedule_pod(w.pending("z", mem=mem))
    assert result.allocation is None
    assert "no schedulable GPU of an allowed model or UUID" not in result.reason  # was the only reason
    assert "MIG mode" in result.reason
    assert f"ask for {STEM}<profile>" in result.reason
    assert f"A100-80GB: {fitting}" in result.reason


def test_whole_gpus_and_core_shares_name_the_profiles_with_enough_slices() -> None:
    w = mig_world()
    whole = w.service.schedule_pod(w.pending("w", gpu="1"))
    assert "A100-80GB: 7g.80gb" in whole.reason
    core = w.service.schedule_pod(w.pending("c", core="50", mem="5"))  # 50 % of compute: 4 of 7 slices
    assert "A100-80GB: 4g.40gb, 7g.80gb" in core.reason


def test_fitting_profiles_of_every_container_and_relative_memory() -> None:
    table = MIG_MODELS["A100-40GB"]
    pod = PodRequest("u", (ContainerRequest("a", memory_bytes=5 * GiB), ContainerRequest("b", memory_bytes=9 * GiB)))
    assert [p.name for p in fitting_profiles(table, pod)] == ["1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    half = PodRequest("u", (ContainerRequest("a", memory_milli=500),))  # 50 % of the memory: 4 of 8 slices
    assert [p.name for p in fitting_profiles(table, half)] == ["3g.20gb", "4g.20gb", "7g.40gb"]


def test_a_time_sharing_gpu_beside_mig_gpus_still_takes_the_pod() -> None:
    w = mig_world(gpus=mig_gpus("n1", 1, shared=1))
    result = w.service.schedule_pod(w.pending("z", mem="8"))
    assert result.allocation is not None, result.reason
    assert result.allocation.containers[0].grants[0].gpu_index == 1


def test_a_selection_that_rules_out_the_mig_gpus_keeps_the_plain_reason() -> None:
    w = mig_world()
    result = w.service.schedule_pod(w.pending("z", mem="8", annotations={KEYS.pod_gpu_models: "H100"}))
    assert "no schedulable GPU of an allowed model or UUID" in result.reason
    assert "MIG" not in result.reason


def pod_json(pod: PodObject) -> dict[str, object]:
    containers = [{"name": c.name, "resources": {"limits": dict(c.limits)}} for c in pod.containers]
    return {"metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "spec": {"containers": containers, "schedulerName": pod.scheduler_name}, "status": {}}


def test_the_extender_gives_the_mig_reason_per_node() -> None:
    w = mig_world()
    w.node("n2", 1)  # one time-sharing GPU of 16 GiB
    w.service.start_leading()
    extender = ExtenderJson(Extender(w.service))
    fits = extender.filter({"Pod": pod_json(w.pending("z", mem="8")), "NodeNames": ["n1", "n2"]})
    assert fits["NodeNames"] == ["n2"]
    refused = extender.filter({"Pod": pod_json(w.pending("big", mem="20")), "NodeNames": ["n1", "n2"]})
    reasons = refused["FailedNodes"]
    assert isinstance(reasons, dict)
    assert "MIG mode" in reasons["n1"]
    assert "A100-80GB: 1g.20gb, 2g.20gb" in reasons["n1"]
    assert "MIG" not in reasons["n2"]
