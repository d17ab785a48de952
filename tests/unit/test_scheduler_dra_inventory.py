"""GPUs of DRA-only nodes read from our driver's ResourceSlices (``domain.dra.inventory``,
``domain.scheduling.sync.draslices``) and used by the scheduler.

Behaviours covered:
- reading: whole GPUs with their attributes; a tainted device's GPU unhealthy; a MIG GPU as a GPU in MIG mode; only
  the newest pool generation counts and an incomplete one is a problem; an unpublished GPU keeps its index,
  unhealthy, from what was known (the highest index too) or as a placeholder; another driver's or node's slices
  are not the node's;
- the scheduler: a node without an inventory annotation books the GPUs of its slices; a share claim is placed and
  allocated there by our standalone loop; a classic share pod is refused there with the claims-only reason while
  a node with a device plugin takes it; the device plugin's annotation wins where both publish; a slice deleted
  keeps the GPUs the node last published but gates it, and a delete older than the slice re-created under its name
  is ignored; a stale annotation (its device plugin gone: the node switched to DRA) gives way to the slices, also
  when it goes stale with no node event (the tick); a rebuild from the listing gives the same books; a classic GPU
  pod kube-scheduler serves through a claim (``extendedResourceName``) is counted once, by the claim; a slice wakes
  waiting pods only when it changed what a fit reads of a node it names or leaves (not published again unchanged,
  not another driver's).
"""

from __future__ import annotations

import attrs
from test_scheduler_claim_allocation import new_world

from adapters.memory.resource_slices import InMemoryResourceSlices
from domain.dra.build import UnhealthyPolicy, desired_content
from domain.dra.claims import AllocationResult, ClaimAllocation, DeviceAsk
from domain.dra.inventory import slice_inventory
from domain.dra.slices import ResourceSlice
from domain.gpu import Gpu, GpuUuid, Health, MigMode
from domain.kube.objects import ContainerSpec, PodClaim, PodObject, PodPhase
from domain.runtime.types import DeviceInfo, MigInstanceInfo
from domain.scheduling.sync.draslices import CLAIMS_ONLY
from support.kube_builders import NOW, PROTOCOL, make_node

DRA = PROTOCOL.dra
GIB = 2**30


def info(index: int, *, node: str = "n1", health: Health = Health.HEALTHY, mig: bool = False) -> DeviceInfo:
    model, memory = ("NVIDIA A100-SXM4-80GB", 80 * GIB) if mig else ("A100", 16 * GIB)
    instances = (MigInstanceInfo(index, GpuUuid(f"GPU-{node}-{index}"), 1, 0, "3g.40gb", 0, 4, 3, 40 * GIB,
                                 f"MIG-{node}-{index}"),) if mig else ()
    return DeviceInfo(Gpu(index, GpuUuid(f"GPU-{node}-{index}"), model, memory, health,
                          MigMode.ENABLED if mig else MigMode.DISABLED), mig_instances=instances)


def node_slices(node: str, *devices: DeviceInfo, generation: int = 1, driver: str = DRA.driver,
                unhealthy: UnhealthyPolicy = UnhealthyPolicy.TAINT) -> list[ResourceSlice]:
    contents = desired_content(devices, protocol=PROTOCOL, unhealthy=unhealthy)
    return [ResourceSlice(f"{node}-{driver}-{generation}-{i}", driver, node, generation, len(contents), content)
            for i, content in enumerate(contents)]


def read(slices: list[ResourceSlice], known: tuple[Gpu, ...] = ()) -> tuple[tuple[Gpu, ...], str]:
    found = slice_inventory(slices, driver=DRA.driver, node="n1", known=known)
    assert found is not None
    return found.gpus, found.problem


def test_whole_gpus_come_with_their_attributes_and_a_tainted_one_is_unhealthy() -> None:
    gpus, problem = read(node_slices("n1", info(0), info(1, health=Health.UNHEALTHY)))
    assert problem == ""
    assert gpus == (Gpu(0, GpuUuid("GPU-n1-0"), "A100", 16 * GIB),
                    Gpu(1, GpuUuid("GPU-n1-1"), "A100", 16 * GIB, health=Health.UNHEALTHY))


def test_a_mig_gpu_is_a_gpu_in_mig_mode() -> None:
    gpus, problem = read(node_slices("n1", info(0), info(1, mig=True)))
    assert problem == ""
    assert [(g.index, g.uuid, g.mig_mode) for g in gpus] == [(0, "GPU-n1-0", MigMode.DISABLED),
                                                             (1, "GPU-n1-1", MigMode.ENABLED)]
    assert gpus[1].memory_bytes > 0


def test_only_the_newest_generation_counts_and_an_incomplete_one_is_a_problem() -> None:
    old = node_slices("n1", info(0))
    new = node_slices("n1", info(0), info(1), generation=2)
    assert [g.index for g in read(old + new)[0]] == [0, 1]
    incomplete = [attrs.evolve(new[0], slice_count=2)]
    gpus, problem = read(old + incomplete)
    assert gpus == ()
    assert "pool generation 2 has 1 of its 2 slices" in problem


def test_an_unpublished_gpu_keeps_its_index_unhealthy_from_what_was_known_or_as_a_placeholder() -> None:
    known = read(node_slices("n1", info(0), info(1), info(2)))[0]
    withdrawn = node_slices("n1", info(0), info(1, health=Health.UNHEALTHY), info(2, health=Health.UNHEALTHY),
                            unhealthy=UnhealthyPolicy.WITHDRAW)
    gpus, problem = read(withdrawn, known)
    assert problem == ""
    assert [(g.uuid, g.health) for g in gpus] == [("GPU-n1-0", Health.HEALTHY), ("GPU-n1-1", Health.UNHEALTHY),
                                                  ("GPU-n1-2", Health.UNHEALTHY)]  # the top one too
    fresh = node_slices("n1", info(0, health=Health.UNHEALTHY), info(1), unhealthy=UnhealthyPolicy.WITHDRAW)
    gpus, problem = read(fresh)  # never seen (a scheduler restarted since): a placeholder nothing goes on
    assert problem == ""
    assert [(g.index, g.uuid, g.model, g.health) for g in gpus] == [
        (0, "unpublished-n1-gpu-0", "unpublished", Health.UNHEALTHY), (1, "GPU-n1-1", "A100", Health.HEALTHY)]


def test_another_drivers_or_nodes_slices_are_not_the_nodes() -> None:
    assert slice_inventory(node_slices("n1", info(0), driver="other.example.com"), driver=DRA.driver,
                           node="n1") is None
    assert slice_inventory(node_slices("n2", info(0)), driver=DRA.driver, node="n1") is None


def dra_world():  # type: ignore[no-untyped-def]
    """A standalone world with node ``n1`` (DRA driver only: no annotation, two GPUs in slices) and ``n2`` (device
    plugin inventory, two GPUs)."""
    w = new_world(nodes=("n2",))
    w.service.on_node(w.cluster.create_node(make_node("n1", annotation=None)))
    for resource_slice in node_slices("n1", info(0), info(1)):
        w.service.on_slice(resource_slice)
    return w


def share(cores: str = "30", memory: str = "4Gi") -> DeviceAsk:
    return DeviceAsk("r", DRA.device_class_share, capacity={"cores": cores, "memory": memory})


def test_a_dra_only_node_books_its_slices_gpus_and_takes_a_share_claim() -> None:
    w = dra_world()
    with w.service.books() as books:
        assert books.gates.get("n1") is None
        assert books.claims_only == {"n1": CLAIMS_ONLY}
        assert [g.uuid for g in books.ledger.inventory("n1").gpus] == ["GPU-n1-0", "GPU-n1-1"]
    w.service.on_node(w.cluster.create_node(make_node("n3", annotation=None)))  # no slices, no annotation: gated
    w.service.on_node_deleted("n2")  # only n1 can take the claim
    w.claim("c", share())
    pod = w.pod("p", PodClaim("g", claim_name="c"))
    assert w.loop.attempt(pod)
    (result,) = w.claims.get("default", "c").results  # type: ignore[union-attr]
    assert (result.pool, result.device) == ("n1", "gpu-0")
    assert w.deliver("p").node_name == "n1"
    assert w.used("n1") == [(300, 4), (0, 0)]


def test_a_classic_share_pod_is_refused_on_a_dra_only_node_and_placed_beside_a_device_plugin() -> None:
    w = dra_world()
    pod = w.pod("classic", core="30")
    assert w.loop.attempt(pod)
    assert w.deliver("classic").node_name == "n2"
    w.service.on_node_deleted("n2")
    second = w.pod("classic2", core="30")
    assert not w.loop.attempt(second)
    assert "GPUs published by the DRA driver only" in w.reasons("classic2")[-1]


def test_the_device_plugins_annotation_wins_where_both_publish() -> None:
    w = dra_world()
    w.service.on_node(w.cluster.create_node(make_node("n4", count=1)))
    for resource_slice in node_slices("n4", info(0, node="n4"), info(1, node="n4")):
        w.service.on_slice(resource_slice)
    with w.service.books() as books:
        assert [g.uuid for g in books.ledger.inventory("n4").gpus] == ["GPU-n4-0"]
        assert "n4" not in books.claims_only


def test_the_device_plugins_annotation_appearing_on_a_dra_only_node_counts_as_room() -> None:
    w = dra_world()
    version = w.service.room_version
    w.service.on_node(make_node("n1"))  # the same two GPUs, now published by a device plugin too
    with w.service.books() as books:
        assert "n1" not in books.claims_only  # classic pods may go there now: only that changed
    assert not w.service.room_unchanged_since(version)


def test_a_slice_wakes_waiting_pods_only_when_it_changed_what_a_fit_reads() -> None:
    w = dra_world()
    woken: list[int] = []
    w.service.change_listeners.append(lambda: woken.append(1))
    version = w.service.room_version
    for number, resource_slice in enumerate(node_slices("n1", info(0), info(1))):  # published again, unchanged
        w.service.on_slice(attrs.evolve(resource_slice, resource_version=f"9{number}"))
    for resource_slice in node_slices("n1", info(0), info(1), driver="other.example.com"):
        w.service.on_slice(resource_slice)  # another driver's: not ours to read
    assert not woken
    assert w.service.room_unchanged_since(version)
    for resource_slice in node_slices("n1", info(0), info(1, health=Health.UNHEALTHY)):
        w.service.on_slice(resource_slice)  # GPU 1 tainted: the node's inventory changed
    assert woken
    assert not w.service.room_unchanged_since(version)
    with w.service.books() as books:
        assert [g.health for g in books.ledger.inventory("n1").gpus] == [Health.HEALTHY, Health.UNHEALTHY]


def test_a_slice_moved_off_a_node_wakes_waiting_pods_for_the_node_it_left() -> None:
    w = dra_world()
    woken: list[int] = []
    w.service.change_listeners.append(lambda: woken.append(1))
    for resource_slice in node_slices("n1", info(0), info(1)):  # the same names, now on a node not seen yet
        w.service.on_slice(attrs.evolve(resource_slice, node="n9", resource_version="95"))
    assert woken  # n1 lost its slices: only its view changed
    with w.service.books() as books:
        assert "no GPU inventory annotation" in books.gates["n1"]


def test_deleted_slices_keep_the_gpus_last_published_and_gate_the_node() -> None:
    w = dra_world()
    version = w.service.room_version
    for resource_slice in node_slices("n1", info(0), info(1)):
        w.service.on_slice_deleted(resource_slice)
    assert not w.service.room_unchanged_since(version)  # its node was read again: pods kept aside are tried
    with w.service.books() as books:
        assert "no GPU inventory annotation" in books.gates["n1"]
        assert "its pods stay counted on the 2 GPUs it last published" in books.gates["n1"]
        assert books.ledger.inventory("n1").gpu_count == 2
        assert "n1" not in books.claims_only


def test_a_rebuild_from_the_listing_gives_the_same_books() -> None:
    w = dra_world()
    w.claim("c", share())
    pod = w.pod("p", PodClaim("g", claim_name="c"))
    w.service.on_node_deleted("n2")
    assert w.loop.attempt(pod)
    w.deliver("p")
    w.service.on_claim(w.claims.get("default", "c"))  # type: ignore[arg-type]
    with w.service.books() as books:
        fresh = books.rebuild(w.cluster.list_nodes().items, w.cluster.list_pods().items,
                              claims=w.claims.list_claims().items, slices=books.slices.slices())
        assert fresh.ledger.inventory("n1") == books.ledger.inventory("n1")
        assert fresh.claims_only == books.claims_only
        assert [(g.core_used, g.memory_used) for g in fresh.ledger.gpus("n1")] == [
            (g.core_used, g.memory_used) for g in books.ledger.gpus("n1")]


def test_an_unhealthy_slice_gpu_takes_no_new_share() -> None:
    w = new_world(nodes=())
    w.service.on_node(w.cluster.create_node(make_node("n1", annotation=None)))
    for resource_slice in node_slices("n1", info(0, health=Health.UNHEALTHY)):
        w.service.on_slice(resource_slice)
    w.claim("c", share())
    assert not w.loop.attempt(w.pod("p", PodClaim("g", claim_name="c")))
    assert not w.claims.get("default", "c").allocated  # type: ignore[union-attr]


def test_a_resync_lists_the_slices_and_a_slice_event_the_listing_holds_is_not_applied_again() -> None:
    w = new_world(nodes=())
    api = InMemoryResourceSlices()
    w.service.slices = api
    w.service.on_node(w.cluster.create_node(make_node("n1", annotation=None)))
    stored = [api.create_resource_slice(s) for s in node_slices("n1", info(0), info(1))]
    stored.append(api.create_resource_slice(node_slices("n9", info(0, node="n9"), driver="other.example.com")[0]))
    w.service.resync()
    with w.service.books() as books:
        assert [g.uuid for g in books.ledger.inventory("n1").gpus] == ["GPU-n1-0", "GPU-n1-1"]
        assert [s.name for s in books.slices.slices()] == sorted(s.name for s in stored[:-1])
        assert books.claims_only == {"n1": CLAIMS_ONLY}
        assert "n1" not in books.gates
    stale = attrs.evolve(stored[0], content=node_slices("n1", info(0, health=Health.UNHEALTHY))[0].content)
    w.service.on_slice(stale)  # same resourceVersion as the adopted listing: already reflected, not applied
    with w.service.books() as books:
        assert books.ledger.inventory("n1").gpus[0].health is Health.HEALTHY


def test_a_delete_older_than_the_slice_recreated_under_its_name_is_ignored() -> None:
    w = dra_world()
    first = node_slices("n1", info(0), info(1))[0]
    old, recreated = attrs.evolve(first, resource_version="10"), attrs.evolve(first, resource_version="11")
    w.service.on_slice(recreated)
    w.service.on_slice_deleted(old)  # the watch's late DELETED of the slice the kubelet wiped
    with w.service.books() as books:
        assert "n1" not in books.gates
        assert [s.resource_version for s in books.slices.slices()] == ["11"]
    w.service.on_slice_deleted(attrs.evolve(first, resource_version="12"))
    with w.service.books() as books:
        assert books.slices.slices() == []


def test_a_stale_annotation_gives_way_to_the_slices_also_when_it_goes_stale_later() -> None:
    w = new_world(nodes=())
    w.service.on_node(w.cluster.create_node(make_node("n1", count=1, heartbeat=NOW - 3600)))  # left by a plugin gone
    for resource_slice in node_slices("n1", info(0), info(1)):
        w.service.on_slice(resource_slice)
    with w.service.books() as books:
        assert books.claims_only == {"n1": CLAIMS_ONLY}
        assert books.ledger.inventory("n1").gpu_count == 2
    w.service.on_node(w.cluster.create_node(make_node("n2", count=1)))  # fresh: its device plugin serves it
    for resource_slice in node_slices("n2", info(0, node="n2"), info(1, node="n2")):
        w.service.on_slice(resource_slice)
    with w.service.books() as books:
        assert books.ledger.inventory("n2").gpu_count == 1
    w.clock.now += PROTOCOL.inventory_stale_seconds + 1  # the plugin stops: no node event, only time
    w.service.tick()
    with w.service.books() as books:
        assert books.claims_only.get("n2") == CLAIMS_ONLY
        assert books.ledger.inventory("n2").gpu_count == 2
        assert "n2" not in books.gates


def test_a_classic_gpu_pod_served_through_extended_resource_name_is_counted_once_by_its_claim() -> None:
    w = dra_world()
    gpu = PROTOCOL.resources.gpu
    special = ClaimAllocation("default", "p-gpu-extended-resources-x", "uid-special", (AllocationResult(
        request="container-0-request-0", driver=DRA.driver, pool="n1", device="gpu-0"),))
    w.service.on_claim(special)
    pod = PodObject("uid-p", "default", "p", containers=(ContainerSpec("main", limits={gpu: "1"}),),
                    node_name="n1", phase=PodPhase.RUNNING, claim_served=(("main", gpu),))
    w.service.on_pod(pod)
    assert w.used("n1") == [(1000, 16), (0, 0)]  # the claim's record alone
    w.service.on_pod(attrs.evolve(pod, claim_served=(), resource_version="2"))  # had kube-scheduler not said so
    assert w.used("n1") == [(1000, 16), (1000, 16)]
    stale = PodObject("uid-q", "default", "q", containers=(ContainerSpec("main", limits={gpu: "1"}),),
                      node_name="n2", phase=PodPhase.RUNNING, claim_served=(("main", gpu),))
    w.service.on_pod(stale)  # a device-plugin node: the field is stale there, the pod's own GPU counts
    assert sum(core for core, _ in w.used("n2")) == 1000
