"""MIG books: per-GPU geometry checks and the per-node ledger (reserve, observe, release, layout updates).

Behaviours covered:

* exact placements from the guide's diagrams: valid A100 layouts (4g+2g+1g, 3g+3g, 3g+2g+1g, 2g×3+1g, 1g×7,
  1g.10gb×4, 7g) build; invalid ones are refused naming GPU, start and profile (1g at 7, 2g at 6, 3g at 2, 4g
  at 4, 3g at 0 with 1g at 3, a second ``+me``, an eighth 1g, a profile of another model); A30 4/4 geometry;
* ``free_starts`` on an empty GPU equals the placements and shrinks as instances are added;
* static GPUs: ``assign`` takes a free instance, ``release`` gives it back free, nothing is ever created;
  dynamic GPUs: ``create`` books a new instance that ``release`` removes;
* node ledger: ``reserve`` is all-or-nothing across GPUs and idempotent for an identical record, refuses a
  different plan for a booked pod, another node's record, a booking on a missing GPU, a static booking without
  an instance and a dynamic one over taken slices; ``release`` is idempotent; ``observe`` twice counts once,
  replaces a changed record, and parks a conflicting one (the node stops admitting until the blocker leaves);
* ``update_gpus`` keeps records (a created instance listed by the Runtime is matched, then dropped at
  release); a static instance that vanished parks its record; ``verify`` finds nothing after any sequence;
* property (hypothesis): random reserve / observe / release sequences on a static and a dynamic GPU never
  overlap slices (checked from scratch), keep records equal to a shadow, and releasing everything restores the
  base layout.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.errors import InvalidRequestError, LedgerCorruptedError
from domain.gpu import Gpu, GpuUuid, MigMode
from domain.mig.errors import MigPlacementError, NoMigCapacityError, UnknownMigProfileError
from domain.mig.ledger import (
    MigBooking,
    MigGpu,
    MigInstance,
    MigNodeLedger,
    MigOwner,
    MigPodAllocation,
    PlacementMode,
)
from domain.mig.profiles import MIG_MODELS, resolve_profile
from domain.units import GiB

A100 = MIG_MODELS["A100-40GB"]
STATIC, DYNAMIC = PlacementMode.STATIC, PlacementMode.DYNAMIC


def gpu(
    layout: list[tuple[str, int]], *, mode: PlacementMode = STATIC, index: int = 0, model: str = "A100-40GB"
) -> MigGpu:
    return MigGpu.from_layout(index, f"GPU-{index}", model, mode=mode, layout=layout)


@pytest.mark.parametrize(
    "layout",
    [
        [("4g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)],
        [("3g.20gb", 0), ("3g.20gb", 4)],
        [("3g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)],
        [("2g.10gb", 0), ("2g.10gb", 2), ("2g.10gb", 4), ("1g.5gb", 6)],
        [("1g.5gb", s) for s in range(7)],
        [("1g.10gb", s) for s in (0, 2, 4, 6)],
        [("7g.40gb", 0)],
        [("4g.20gb", 0), ("1g.5gb+me", 4), ("1g.5gb", 5), ("1g.5gb", 6)],
        [("3g.20gb", 4), ("1g.10gb", 0), ("1g.5gb", 2), ("1g.5gb", 3)],
    ],
)
def test_valid_a100_layouts(layout: list[tuple[str, int]]) -> None:
    built = gpu(layout)
    assert [(i.profile.name, i.start) for i in built.instances] == sorted(layout, key=lambda x: x[1])


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ([("1g.5gb", 7)], r"instance\[7\].*start 7 is not a placement of 1g\.5gb"),
        ([("2g.10gb", 6)], r"start 6 is not a placement of 2g\.10gb \(0, 2, 4\)"),
        ([("3g.20gb", 2)], r"start 2 is not a placement"),
        ([("4g.20gb", 4)], r"start 4 is not a placement"),
        ([("3g.20gb", 0), ("1g.5gb", 3)], r"gpu\[0\]\.instance\[3\].*overlaps"),
        ([("7g.40gb", 0), ("1g.5gb", 6)], "overlaps"),
        ([("1g.5gb+me", 0), ("1g.5gb+me", 1)], r"more than 1 instances"),
    ],
)
def test_invalid_a100_layouts(layout: list[tuple[str, int]], message: str) -> None:
    with pytest.raises(MigPlacementError, match=message):
        gpu(layout)


def test_profile_of_another_model_and_unknown_name() -> None:
    with pytest.raises(MigPlacementError, match="not a profile of A100-40GB"):
        MigGpu(0, "GPU-0", A100, STATIC, (MigInstance(resolve_profile("H100-80GB", "1g.10gb"), 0),))
    with pytest.raises(UnknownMigProfileError, match="valid profiles"):
        gpu([("1g.6gb", 0)])


def test_a30_geometry() -> None:
    a30 = gpu([("2g.12gb", 0), ("1g.6gb", 2), ("1g.6gb+me", 3)], model="A30-24GB")
    assert a30.memory_used == 0b1111
    with pytest.raises(MigPlacementError, match="not a placement"):
        gpu([("2g.12gb", 1)], model="A30-24GB")
    assert gpu([], model="A30-24GB", mode=DYNAMIC).free_starts(resolve_profile("A30-24GB", "4g.24gb")) == (0,)


def test_free_starts() -> None:
    empty = gpu([], mode=DYNAMIC)
    for profile in A100.profiles:
        assert empty.free_starts(profile) == profile.placements
    partial = gpu([("3g.20gb", 4)], mode=DYNAMIC)
    assert partial.free_starts(resolve_profile(A100, "1g.5gb")) == (0, 1, 2, 3)
    assert partial.free_starts(resolve_profile(A100, "2g.10gb")) == (0, 2)
    assert partial.free_starts(resolve_profile(A100, "4g.20gb")) == (0,)
    assert partial.free_starts(resolve_profile(A100, "3g.20gb")) == (0,)
    assert partial.free_starts(resolve_profile(A100, "7g.40gb")) == ()
    me = gpu([("1g.5gb+me", 0)], mode=DYNAMIC)
    assert me.free_starts(resolve_profile(A100, "1g.5gb+me")) == ()


def test_static_gpu_assign_and_release() -> None:
    owner = MigOwner("pod-a", "main")
    layout = gpu([("3g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)])
    taken = layout.assign(4, owner)
    assert taken.instance_at(4) == MigInstance(resolve_profile(A100, "2g.10gb"), 4, owner)
    assert taken.free_instances(resolve_profile(A100, "2g.10gb")) == ()
    assert taken.owned_by("pod-a") == (taken.instance_at(4),)
    with pytest.raises(MigPlacementError, match="already held by pod pod-a"):
        taken.assign(4, MigOwner("pod-b", "main"))
    with pytest.raises(MigPlacementError, match="no instance starts here"):
        taken.assign(2, owner)
    with pytest.raises(MigPlacementError, match="only in dynamic mode"):
        layout.create(resolve_profile(A100, "1g.5gb"), 5, owner)
    with pytest.raises(MigPlacementError, match="only has pre-created"):
        layout.assign(6, owner, created=True)
    assert taken.release("pod-a") == layout
    with pytest.raises(MigPlacementError, match="held by pod pod-a"):
        taken.without(4)
    assert layout.without(6).instance_at(6) is None


def test_dynamic_gpu_create_and_release() -> None:
    owner = MigOwner("pod-a", "main")
    empty = gpu([], mode=DYNAMIC)
    made = empty.create(resolve_profile(A100, "3g.20gb"), 4, owner)
    assert made.memory_used == 0b1111_0000
    assert made.compute_used == 0b111_0000
    assert made.release("pod-a") == empty
    with pytest.raises(MigPlacementError, match="overlaps"):
        made.create(resolve_profile(A100, "2g.10gb"), 4, MigOwner("pod-b", "c"))
    with pytest.raises(MigPlacementError, match="needs an owner"):
        MigGpu(0, "GPU-0", A100, DYNAMIC, (MigInstance(resolve_profile(A100, "1g.5gb"), 0, created=True),))


def test_from_gpu_needs_mig_mode() -> None:
    plain = Gpu(0, GpuUuid("GPU-0"), "NVIDIA A100-SXM4-40GB", 40 * GiB)
    with pytest.raises(InvalidRequestError, match=r"gpu\[0\]\.mig_mode='disabled'"):
        MigGpu.from_gpu(plain, mode=DYNAMIC)
    mig = Gpu(1, GpuUuid("GPU-1"), "NVIDIA A100-SXM4-40GB", 40 * GiB, mig_mode=MigMode.ENABLED)
    assert MigGpu.from_gpu(mig, mode=STATIC, layout=[("7g.40gb", 0)]).model is A100


# ---------------------------------------------------------------------------------------------- node ledger
def booking(index: int, profile: str, start: int, *, create: bool = False, container: str = "main") -> MigBooking:
    return MigBooking(index, profile, start, container, create)


def owner_at(node: MigNodeLedger, index: int, start: int) -> MigOwner | None:
    instance = node.gpu(index).instance_at(start)
    assert instance is not None
    return instance.owner


def static_dynamic_node() -> MigNodeLedger:
    return MigNodeLedger(
        "node-a",
        [gpu([("3g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)], index=0), gpu([], mode=DYNAMIC, index=1)],
    )


def test_reserve_all_or_nothing() -> None:
    node = static_dynamic_node()
    before, version = node.gpus(), node.version
    bad = MigPodAllocation("pod-a", "node-a", (booking(0, "3g.20gb", 0), booking(0, "1g.5gb", 5)))
    with pytest.raises(NoMigCapacityError, match=r"bookings\[1\]: no free 1g\.5gb instance at start 5 on gpu 0"):
        node.reserve(bad)
    assert (node.gpus(), node.version, node.records()) == (before, version, {})
    over = MigPodAllocation(
        "pod-a", "node-a", (booking(1, "4g.20gb", 0, create=True), booking(1, "1g.5gb", 3, create=True))
    )
    with pytest.raises(NoMigCapacityError, match="overlaps taken slices"):
        node.reserve(over)
    assert node.gpus() == before
    good = MigPodAllocation("pod-a", "node-a", (booking(0, "3g.20gb", 0), booking(1, "7g.40gb", 0, create=True)))
    node.reserve(good)
    node.reserve(good)
    assert node.records() == {"pod-a": good}
    assert owner_at(node, 0, 0) == MigOwner("pod-a", "main")
    created = node.gpu(1).instance_at(0)
    assert created is not None
    assert created.created
    assert node.verify() == []


def test_reserve_refusals() -> None:
    node = static_dynamic_node()
    node.reserve(MigPodAllocation("pod-a", "node-a", (booking(0, "1g.5gb", 6),)))
    with pytest.raises(InvalidRequestError, match="already booked with a different plan"):
        node.reserve(MigPodAllocation("pod-a", "node-a", (booking(0, "2g.10gb", 4),)))
    with pytest.raises(InvalidRequestError, match=r"pod\[pod-b\]\.node='node-b'"):
        node.reserve(MigPodAllocation("pod-b", "node-b", (booking(0, "2g.10gb", 4),)))
    with pytest.raises(MigPlacementError, match=r"bookings\[0\]\.gpu_index=5"):
        node.reserve(MigPodAllocation("pod-b", "node-a", (booking(5, "2g.10gb", 4),)))
    with pytest.raises(NoMigCapacityError, match=r"no free 1g\.5gb instance at start 6"):
        node.reserve(MigPodAllocation("pod-b", "node-a", (booking(0, "1g.5gb", 6),)))
    with pytest.raises(NoMigCapacityError, match=r"no free 1g\.5gb instance at start 0"):
        node.reserve(MigPodAllocation("pod-b", "node-a", (booking(1, "1g.5gb", 0),)))
    with pytest.raises(InvalidRequestError, match="two bookings share one instance"):
        MigPodAllocation("pod-c", "node-a", (booking(0, "1g.5gb", 6), booking(0, "1g.5gb", 6, container="x")))
    with pytest.raises(InvalidRequestError, match=r"node\.name"):
        MigNodeLedger("")
    with pytest.raises(InvalidRequestError, match="must be unique"):
        MigNodeLedger("n", [gpu([]), gpu([])])


def test_release_idempotent_and_restores() -> None:
    node = static_dynamic_node()
    base = node.gpus()
    allocation = MigPodAllocation("pod-a", "node-a", (booking(0, "2g.10gb", 4), booking(1, "3g.20gb", 4, create=True)))
    node.reserve(allocation)
    assert node.release("pod-a") == allocation
    assert node.release("pod-a") is None
    assert node.gpus() == base
    assert "pod-a" not in node


def test_observe_idempotent_replaces_and_parks() -> None:
    node = static_dynamic_node()
    first = MigPodAllocation("pod-a", "node-a", (booking(1, "4g.20gb", 0, create=True),))
    assert node.observe(first)
    assert not node.observe(first)
    moved = MigPodAllocation("pod-a", "node-a", (booking(1, "3g.20gb", 4, create=True),))
    assert node.observe(moved)
    assert node.record("pod-a") == moved
    assert [(i.profile.name, i.start) for i in node.gpu(1).instances] == [("3g.20gb", 4)]
    clash = MigPodAllocation("pod-b", "node-a", (booking(1, "2g.10gb", 4, create=True),))
    assert node.observe(clash)
    assert not node.admitting
    assert "pod-b" in node.conflicts
    assert "overlaps taken slices" in node.conflicts["pod-b"]
    with pytest.raises(LedgerCorruptedError, match="parked MIG records"):
        node.reserve(MigPodAllocation("pod-c", "node-a", (booking(0, "1g.5gb", 6),)))
    node.release("pod-a")
    assert node.admitting
    assert owner_at(node, 1, 4) == MigOwner("pod-b", "main")
    assert node.verify() == []
    with pytest.raises(InvalidRequestError, match="node-z"):
        node.observe(MigPodAllocation("pod-z", "node-z", ()))


def test_observed_record_with_a_profile_of_another_model_is_parked_not_raised() -> None:
    node = static_dynamic_node()  # A100-40GB GPUs: 1g.6gb is an A30 profile
    stray = MigPodAllocation("pod-x", "node-a", (booking(1, "1g.6gb", 0, create=True),))
    assert node.observe(stray)
    assert "pod-x" in node.conflicts
    assert "profile" in node.conflicts["pod-x"]
    assert node.record("pod-x") == stray
    assert node.release("pod-x") == stray
    assert node.admitting
    assert node.verify() == []


def test_update_gpus_keeps_records() -> None:
    node = static_dynamic_node()
    node.reserve(MigPodAllocation("pod-a", "node-a", (booking(0, "2g.10gb", 4), booking(1, "3g.20gb", 4, create=True))))
    # The Runtime now lists the created 3g instance on GPU 1 (unowned in its listing); records keep owning it.
    listing = [
        gpu([("3g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)], index=0),
        gpu([("3g.20gb", 4)], mode=DYNAMIC, index=1),
    ]
    node.update_gpus(listing)
    assert node.admitting
    assert owner_at(node, 1, 4) == MigOwner("pod-a", "main")
    assert owner_at(node, 0, 4) == MigOwner("pod-a", "main")
    node.release("pod-a")
    assert node.gpu(1).instances == ()  # the Runtime destroys what was created for the pod
    assert owner_at(node, 0, 4) is None
    assert node.verify() == []
    # A static instance that vanished while held parks the record until the layout brings it back.
    node.reserve(MigPodAllocation("pod-b", "node-a", (booking(0, "1g.5gb", 6),)))
    node.update_gpus([gpu([("3g.20gb", 0), ("2g.10gb", 4)], index=0), gpu([], mode=DYNAMIC, index=1)])
    assert "pod-b" in node.conflicts
    node.update_gpus([gpu([("3g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)], index=0), gpu([], mode=DYNAMIC, index=1)])
    assert node.admitting
    assert node.verify() == []


def test_dynamic_reuses_a_listed_free_instance() -> None:
    node = MigNodeLedger("node-a", [gpu([("2g.10gb", 0)], mode=DYNAMIC)])
    reuse = MigPodAllocation("pod-a", "node-a", (booking(0, "2g.10gb", 0),))
    node.reserve(reuse)
    node.release("pod-a")
    assert node.gpu(0).free_instances(resolve_profile(A100, "2g.10gb"))  # pre-existing: stays, free again


# ---------------------------------------------------------------------------------------------- property
PROFILES = [p.name for p in A100.profiles]
steps = st.lists(
    st.tuples(
        st.sampled_from(["reserve", "observe", "release"]),
        st.integers(0, 5),  # pod
        st.lists(st.tuples(st.integers(0, 1), st.sampled_from(PROFILES), st.integers(0, 7), st.booleans()), max_size=3),
    ),
    max_size=40,
)


def _overlap_free(node: MigNodeLedger) -> None:
    for g in node.gpus():
        memory = compute = 0
        for instance in g.instances:
            p, s = instance.profile, instance.start
            assert s in p.placements
            m = sum(1 << i for i in range(s, s + p.memory_slices))
            c = sum(1 << i for i in range(s, s + p.compute_slices))
            assert not memory & m
            assert not compute & c
            assert s + p.memory_slices <= 8
            assert s + p.compute_slices <= 7
            memory, compute = memory | m, compute | c


@settings(max_examples=200, deadline=None)
@given(steps)
def test_random_sequences_keep_books_sound(sequence: list[tuple[str, int, list[tuple[int, str, int, bool]]]]) -> None:
    node = static_dynamic_node()
    base = node.gpus()
    shadow: dict[str, MigPodAllocation] = {}
    for action, pod, raw in sequence:
        uid = f"pod-{pod}"
        if action == "release":
            node.release(uid)
            shadow.pop(uid, None)
            continue
        bookings = tuple(dict.fromkeys((i, p, s, c) for i, p, s, c in raw))
        places = [(i, s) for i, _, s, _ in bookings]
        if len(set(places)) != len(places):
            continue
        allocation = MigPodAllocation(uid, "node-a", tuple(booking(i, p, s, create=c) for i, p, s, c in bookings))
        if action == "observe":
            node.observe(allocation)
            shadow[uid] = allocation
        else:
            before = (node.gpus(), node.records())
            try:
                node.reserve(allocation)
            except (NoMigCapacityError, MigPlacementError, InvalidRequestError, LedgerCorruptedError):
                assert (node.gpus(), node.records()) == before
            else:
                shadow[uid] = allocation
        assert node.records() == shadow
        assert node.verify() == []
        _overlap_free(node)
        assert set(node.conflicts) <= set(shadow)
    for uid in list(shadow):
        node.release(uid)
    assert node.gpus() == base
    assert node.admitting
