"""The kubelet DRA plugin's service (``services.dra.plugin.ClaimPreparer``) with in-memory claims, checkpoint and
CDI stores and the reference Runtime in process.

Behaviours covered: a share is granted by the Runtime under the claim UID and answered with its CDI id; the claim's
CDI spec holds the Runtime's limit environment; preparing twice answers the same and grants once; a new preparer
over the same checkpoint answers without the API (restart) and unprepare releases the grant, removes the spec and
the checkpoint entry; every claim of a request is answered, a bad one with its own error (missing claim, changed
UID, another driver only, over capacity counting device-plugin grants in the same book); a failed checkpoint write
gives the grant back; unpreparing an unknown claim is no error; a Runtime without Allocate is refused; a Runtime
with HAMi-core gives the claim's spec its library and preload mounts when the allow-list names them, and a claim
whose Runtime answer mounts anything the allow-list does not name fails with the grant given back and no spec.
"""

from __future__ import annotations

import pytest

from adapters.memory.cdi import InMemoryCdiSpecStore
from adapters.memory.resource_claims import InMemoryPreparedClaims, InMemoryResourceClaims
from domain.device_plugin.cdi import HostGpuNodes
from domain.device_plugin.response_guard import ResponseAllowList
from domain.dra.claims import AllocationResult, ClaimAllocation, ClaimRef
from domain.gpu import Gpu, GpuUuid
from domain.runtime.edits import HAMI_LIBRARY_PATH, LD_SO_PRELOAD, ContainerEdits
from domain.runtime.errors import UnsupportedFeatureError
from domain.runtime.features import SemVer
from domain.runtime.types import ContainerAllocationRequest, Mount, PlannedGpu
from entrypoints.runtime.inprocess import InProcessRuntime
from services.dra.plugin import ClaimPreparer

GIB = 2**30
DRIVER = "gpu.lj-runtimekit.io"


class World:
    def __init__(self, edits: ContainerEdits | None = None, allowed: ResponseAllowList | None = None) -> None:
        self.runtime = InProcessRuntime([Gpu(0, GpuUuid("GPU-a"), "A100", 16 * GIB),
                                         Gpu(1, GpuUuid("GPU-b"), "A100", 16 * GIB)], edits=edits)
        self.allowed = allowed
        self.claims = InMemoryResourceClaims()
        self.checkpoint = InMemoryPreparedClaims()
        self.specs: dict[str, InMemoryCdiSpecStore] = {}

    def spec(self, uid: str) -> InMemoryCdiSpecStore:
        return self.specs.setdefault(uid, InMemoryCdiSpecStore())

    def preparer(self) -> ClaimPreparer:
        return ClaimPreparer(driver=DRIVER, node="n1", runtime=self.runtime, claims=self.claims,
                             checkpoint=self.checkpoint, spec_store=self.spec, host=HostGpuNodes,
                             allowed=self.allowed)

    def claim(self, uid: str, *results: AllocationResult, name: str | None = None) -> ClaimRef:
        ref = ClaimRef(namespace="ns", uid=uid, name=name or f"c-{uid}")
        self.claims.put(ClaimAllocation(namespace="ns", name=ref.name, uid=uid, results=results))
        return ref

    def booked(self) -> list[tuple[str, str]]:
        return sorted((c.pod_uid, c.container) for c in self.runtime.exporter_data().containers)


def share(device: str, cores: str, memory: str, *, driver: str = DRIVER) -> AllocationResult:
    return AllocationResult(request="r", driver=driver, pool="n1", device=device,
                            consumed={"cores": cores, "memory": memory}, share_id="s")


def test_prepare_grants_once_answers_the_same_and_survives_a_restart() -> None:
    world = World()
    claim = world.claim("u1", share("gpu-0", "30", "4Gi"))
    first = world.preparer()
    answer = first.prepare([claim])["u1"]
    assert answer.error == ""
    assert answer.prepared is not None
    assert [d.cdi_ids for d in answer.prepared.devices] == [("lj-runtimekit.io/claim=u1-gpu-0",)]
    spec = world.spec("u1").read()
    assert spec is not None
    env = dict(spec.env)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-a"
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"].startswith("4096")
    assert world.booked() == [("u1", "dra-claim")]

    assert first.prepare([claim])["u1"] == answer
    world.claims.delete("ns", claim.name)  # a restarted plugin answers from its checkpoint, not the API
    restarted = world.preparer()
    assert restarted.prepare([claim])["u1"] == answer
    assert world.checkpoint.saves == 1
    assert world.booked() == [("u1", "dra-claim")]

    assert restarted.unprepare([claim]) == {"u1": ""}
    assert world.booked() == []
    assert world.spec("u1").read() is None
    assert world.checkpoint.load() == {}
    assert restarted.unprepare([claim]) == {"u1": ""}  # kubelet retries: nothing left is no error


def test_every_claim_is_answered_and_a_bad_one_gets_its_own_error() -> None:
    world = World()
    world.runtime.allocate(ContainerAllocationRequest(  # a device-plugin pod holds 80 % of GPU 1
        pod_uid="pod", namespace="ns", pod_name="p", container="c",
        gpus=(PlannedGpu(1, GpuUuid("GPU-b"), core_milli=800),)))
    good = world.claim("u1", share("gpu-0", "50", "8Gi"))
    over = world.claim("u2", share("gpu-1", "30", "1Gi"))
    foreign = world.claim("u3", share("gpu-0", "10", "1Gi", driver="gpu.nvidia.com"))
    missing = ClaimRef(namespace="ns", uid="u4", name="gone")
    moved = world.claim("u5-new", share("gpu-0", "10", "1Gi"), name="moved")
    stale = ClaimRef(namespace="ns", uid="u5-old", name="moved")
    answers = world.preparer().prepare([good, over, foreign, missing, stale])
    assert set(answers) == {"u1", "u2", "u3", "u4", "u5-old"}
    assert answers["u1"].error == ""
    assert "claim ns/c-u2 (u2)" in answers["u2"].error
    assert "capacity" in answers["u2"].error.lower()
    assert "no allocated device of this driver on this node" in answers["u3"].error
    assert "does not exist" in answers["u4"].error
    assert "now has UID u5-new" in answers["u5-old"].error
    assert world.booked() == [("pod", "c"), ("u1", "dra-claim")]
    assert moved.uid not in world.checkpoint.load()


def test_a_failed_checkpoint_gives_the_grant_back() -> None:
    world = World()
    claim = world.claim("u1", share("gpu-0", "30", "4Gi"))
    world.checkpoint.fail("disk full")
    answer = world.preparer().prepare([claim])["u1"]
    assert answer.prepared is None
    assert "disk full" in answer.error
    assert world.booked() == []
    assert world.spec("u1").read() is None


def test_a_runtime_without_allocate_is_refused() -> None:
    world = World()
    world.runtime = InProcessRuntime([Gpu(0, GpuUuid("GPU-a"), "A100", 16 * GIB)], version=SemVer(1, 0, 0),
                                     capabilities=["inventory"])
    with pytest.raises(UnsupportedFeatureError, match="allocate"):
        world.preparer().check_runtime()


LIBRARY, PRELOAD = "/opt/hami/libvgpu.so", "/var/lib/lj-runtimekit/ld.so.preload"
HAMI = ContainerEdits(hami_library=LIBRARY, preload_file=PRELOAD)


def test_a_hami_core_runtime_gives_the_claim_spec_its_mounts() -> None:
    world = World(HAMI, ResponseAllowList(hami_library=LIBRARY, preload_file=PRELOAD))
    claim = world.claim("u1", share("gpu-0", "30", "4Gi"))
    assert world.preparer().prepare([claim])["u1"].error == ""
    spec = world.spec("u1").read()
    assert spec is not None
    assert sorted(spec.mounts, key=lambda m: m.container_path) == [
        Mount(container_path=LD_SO_PRELOAD, host_path=PRELOAD, read_only=True),
        Mount(container_path=HAMI_LIBRARY_PATH, host_path=LIBRARY, read_only=True)]
    assert dict(spec.env)["CUDA_DEVICE_SM_LIMIT"] == "30"


@pytest.mark.parametrize("allowed", [None, ResponseAllowList(hami_library="/elsewhere/libvgpu.so",
                                                             preload_file=PRELOAD)],
                         ids=["no-mount-allowed", "another-library"])
def test_a_mount_the_allow_list_does_not_name_fails_the_claim_and_gives_the_grant_back(
        allowed: ResponseAllowList | None) -> None:
    world = World(HAMI, allowed)
    claim = world.claim("u1", share("gpu-0", "30", "4Gi"))
    other = world.claim("u2", share("gpu-1", "30", "4Gi"))
    outcome = world.preparer().prepare([claim, other])
    assert outcome["u1"].prepared is None
    assert outcome["u1"].error.startswith("claim ns/c-u1 (u1): the node Runtime answered ")
    assert f"mount host '{LIBRARY}' at '{HAMI_LIBRARY_PATH}'" in outcome["u1"].error
    assert "not forwarded to the container" in outcome["u1"].error
    assert outcome["u2"].prepared is None  # the same Runtime answers every claim with the same mounts
    assert world.booked() == []
    assert world.spec("u1").read() is None
    assert world.checkpoint.load() == {}
