"""MIG profile tables, model matching, profile-name resolution and memory → profile mapping.

Behaviours covered:

* the tables hold, per model, exactly the guide's profiles with their compute and memory slices, instance
  limits and placements (A100-40GB, A100-80GB, H100-80GB, H200-141GB, A30-24GB);
* every placement is a multiple of the memory size and inside the GPU; the canonical name's ``<n>gb`` is the
  nominal memory rounded half up; nominal memory is memory slices × slice size (H200: 17.625 GiB per slice);
* the table constructor refuses an unaligned placement, an instance limit above the placements, and a spelling
  that names two profiles;
* NVML product names map to their model (SXM/PCIe/HBM3 spellings, keys case-insensitively); H100 NVL, GH200 and
  H200 NVL are refused; a bare ``A100`` needs the memory size, which must be within 10 %;
* names resolve case-insensitively, with ``mig-``/``MIG `` prefixes and ``.me``; truncated and explicit
  aliases (``3g.70gb``, ``7g.140gb``) give the canonical profile;
* B30: an unknown name raises ``UnknownMigProfileError`` naming model, name and every valid name, with a hint
  when another model has that profile;
* memory → profile: boundaries inclusive (exactly 5 GiB → ``1g.5gb``, one byte more → ``1g.10gb``), equal
  memory prefers fewer compute slices, ``+me`` never chosen, oversize, zero, negative and bool requests refused.
"""

from __future__ import annotations

import pytest

from domain.errors import InvalidRequestError
from domain.mig.errors import UnknownMigModelError, UnknownMigProfileError
from domain.mig.profiles import (
    MIG_MODELS,
    MigGpuModel,
    MigProfile,
    mig_model,
    nominal_gb,
    normalise_profile_name,
    profile_for_memory,
    resolve_profile,
)
from domain.units import GiB, MiB

SEVEN = (0, 1, 2, 3, 4, 5, 6)
# (name, compute slices, memory slices, max instances, placements) per model, from the guide's tables.
EXPECTED = {
    "A100-40GB": [
        ("1g.5gb", 1, 1, 7, SEVEN),
        ("1g.5gb+me", 1, 1, 1, SEVEN),
        ("1g.10gb", 1, 2, 4, (0, 2, 4, 6)),
        ("2g.10gb", 2, 2, 3, (0, 2, 4)),
        ("3g.20gb", 3, 4, 2, (0, 4)),
        ("4g.20gb", 4, 4, 1, (0,)),
        ("7g.40gb", 7, 8, 1, (0,)),
    ],
    "A100-80GB": [
        ("1g.10gb", 1, 1, 7, SEVEN),
        ("1g.10gb+me", 1, 1, 1, SEVEN),
        ("1g.20gb", 1, 2, 4, (0, 2, 4, 6)),
        ("2g.20gb", 2, 2, 3, (0, 2, 4)),
        ("3g.40gb", 3, 4, 2, (0, 4)),
        ("4g.40gb", 4, 4, 1, (0,)),
        ("7g.80gb", 7, 8, 1, (0,)),
    ],
    "H100-80GB": [
        ("1g.10gb", 1, 1, 7, SEVEN),
        ("1g.10gb+me", 1, 1, 1, SEVEN),
        ("1g.20gb", 1, 2, 4, (0, 2, 4, 6)),
        ("2g.20gb", 2, 2, 3, (0, 2, 4)),
        ("3g.40gb", 3, 4, 2, (0, 4)),
        ("4g.40gb", 4, 4, 1, (0,)),
        ("7g.80gb", 7, 8, 1, (0,)),
    ],
    "H200-141GB": [
        ("1g.18gb", 1, 1, 7, SEVEN),
        ("1g.18gb+me", 1, 1, 1, SEVEN),
        ("1g.35gb", 1, 2, 4, (0, 2, 4, 6)),
        ("2g.35gb", 2, 2, 3, (0, 2, 4)),
        ("3g.71gb", 3, 4, 2, (0, 4)),
        ("4g.71gb", 4, 4, 1, (0,)),
        ("7g.141gb", 7, 8, 1, (0,)),
    ],
    "A30-24GB": [
        ("1g.6gb", 1, 1, 4, (0, 1, 2, 3)),
        ("1g.6gb+me", 1, 1, 1, (0, 1, 2, 3)),
        ("2g.12gb", 2, 2, 2, (0, 2)),
        ("2g.12gb+me", 2, 2, 1, (0, 2)),
        ("4g.24gb", 4, 4, 1, (0,)),
    ],
}


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_tables_match_the_guide(key: str) -> None:
    model = MIG_MODELS[key]
    rows = [(p.name, p.compute_slices, p.memory_slices, p.max_instances, p.placements) for p in model.profiles]
    assert rows == EXPECTED[key]
    assert (model.compute_slots, model.memory_slots) == ((4, 4) if key == "A30-24GB" else (7, 8))
    assert {p.media_extensions for p in model.profiles if p.name.endswith("+me")} == {True}


@pytest.mark.parametrize("model", list(MIG_MODELS.values()), ids=list(MIG_MODELS))
def test_placement_rule_and_nominal_memory(model: MigGpuModel) -> None:
    slice_bytes = model.memory_bytes // model.memory_slots
    for profile in model.profiles:
        assert profile.memory_bytes == profile.memory_slices * slice_bytes
        for start in profile.placements:
            assert start % profile.memory_slices == 0
            assert start + profile.memory_slices <= model.memory_slots
            assert start + profile.compute_slices <= model.compute_slots
        rounded, _ = nominal_gb(profile.memory_bytes)
        base = profile.name.removesuffix("+me")
        assert base == f"{profile.compute_slices}g.{rounded}gb"


def test_nominal_memory_values() -> None:
    assert resolve_profile("A100-40GB", "1g.5gb").memory_bytes == 5 * GiB
    assert resolve_profile("A100-40GB", "7g.40gb").memory_bytes == 40 * GiB
    assert resolve_profile("H200-141GB", "1g.18gb").memory_bytes == 17 * GiB + 640 * MiB
    assert resolve_profile("H200-141GB", "3g.71gb").memory_bytes == 70 * GiB + 512 * MiB
    assert resolve_profile("A30-24GB", "2g.12gb").memory_bytes == 12 * GiB
    assert nominal_gb(70 * GiB + 512 * MiB) == (71, 70)


def test_masks() -> None:
    three = resolve_profile("A100-40GB", "3g.20gb")
    assert three.memory_mask(4) == 0b1111_0000
    assert three.compute_mask(4) == 0b111_0000
    assert three.size == (3, 4)


def _profile(
    name: str, compute: int, memory: int, count: int, placements: tuple[int, ...], aliases: tuple[str, ...] = ()
) -> MigProfile:
    return MigProfile("T", name, compute, memory, memory * GiB, count, placements, aliases=aliases)


def test_table_constructor_refuses_bad_tables() -> None:
    with pytest.raises(ValueError, match="unaligned"):
        MigGpuModel("T", 7, 8, 8 * GiB, (_profile("2g.2gb", 2, 2, 1, (1,)),))
    with pytest.raises(ValueError, match="max_instances"):
        MigGpuModel("T", 7, 8, 8 * GiB, (_profile("4g.4gb", 4, 4, 2, (0,)),))
    with pytest.raises(ValueError, match="names two profiles"):
        MigGpuModel(
            "T", 7, 8, 8 * GiB, (_profile("1g.1gb", 1, 1, 1, (0,)), _profile("2g.2gb", 2, 2, 1, (0,), ("1g.1gb",)))
        )
    with pytest.raises(ValueError, match="belongs to"):
        MigGpuModel("U", 7, 8, 8 * GiB, (_profile("1g.1gb", 1, 1, 1, (0,)),))
    with pytest.raises(ValueError, match="memory"):
        MigGpuModel("T", 7, 8, 16 * GiB, (_profile("1g.1gb", 1, 1, 1, (0,)),))
    with pytest.raises(ValueError, match="ascending"):
        MigGpuModel("T", 7, 8, 8 * GiB, (_profile("1g.1gb", 1, 1, 2, (1, 0)),))


@pytest.mark.parametrize(
    ("product", "key"),
    [
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100-PCIE-40GB", "A100-40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-80GB"),
        ("NVIDIA H100 PCIe", "H100-80GB"),
        ("NVIDIA H200", "H200-141GB"),
        ("NVIDIA A30", "A30-24GB"),
        ("h100-80gb", "H100-80GB"),
        ("A30-24GB", "A30-24GB"),
    ],
)
def test_product_names(product: str, key: str) -> None:
    assert mig_model(product).key == key


@pytest.mark.parametrize(
    "product", ["NVIDIA H100 NVL", "NVIDIA H100 94GB", "NVIDIA GH200 480GB", "NVIDIA H200 NVL", "NVIDIA L4", "", "A300"]
)
def test_unknown_products(product: str) -> None:
    with pytest.raises(UnknownMigModelError, match="known models: A100-40GB, A100-80GB, A30-24GB, H100-80GB"):
        mig_model(product)


def test_memory_settles_names_without_size() -> None:
    with pytest.raises(UnknownMigModelError, match="ambiguous"):
        mig_model("NVIDIA A100")
    assert mig_model("NVIDIA A100", memory_bytes=40536 * MiB).key == "A100-40GB"
    assert mig_model("A100", memory_bytes=81920 * MiB).key == "A100-80GB"
    assert mig_model("NVIDIA H200", memory_bytes=143771 * MiB).key == "H200-141GB"
    assert mig_model("NVIDIA A30", memory_bytes=24 * GiB).key == "A30-24GB"
    with pytest.raises(UnknownMigModelError, match="matches no known size"):
        mig_model("NVIDIA H100", memory_bytes=94 * GiB)
    with pytest.raises(UnknownMigModelError, match="matches no known size"):
        mig_model("A100", memory_bytes=16 * GiB)


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [("1G.5GB", "1g.5gb"), (" mig-2g.10gb ", "2g.10gb"), ("MIG 7g.40gb", "7g.40gb"), ("mig_1g.5gb.me", "1g.5gb+me")],
)
def test_spellings(spelling: str, canonical: str) -> None:
    assert resolve_profile("A100-40GB", spelling).name == canonical


def test_aliases_resolve_to_the_canonical_profile() -> None:
    h200 = MIG_MODELS["H200-141GB"]
    assert resolve_profile(h200, "3g.70gb") is resolve_profile(h200, "3g.71gb")
    assert resolve_profile(h200, "MIG 7g.140gb").name == "7g.141gb"
    assert resolve_profile(h200, "4g.70gb").name == "4g.71gb"
    assert resolve_profile(h200, "1g.17gb+me").name == "1g.18gb+me"
    assert normalise_profile_name("MIG 1g.18gb.me") == "1g.18gb+me"
    with pytest.raises(InvalidRequestError, match="must be a string"):
        normalise_profile_name(7)  # type: ignore[arg-type]


def test_b30_unknown_profile_message() -> None:
    with pytest.raises(UnknownMigProfileError) as caught:
        resolve_profile("H100-80GB", "7g.141gb")
    error = caught.value
    assert error.model == "H100-80GB"
    assert error.name == "7g.141gb"
    assert error.valid == ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
    assert str(error) == (
        "mig profile='7g.141gb': unknown profile for H100-80GB; '7g.141gb' is a profile of H200-141GB; "
        "valid profiles: 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"
    )
    with pytest.raises(UnknownMigProfileError, match=r"profile='8g\.90gb': unknown profile for A30-24GB; valid"):
        resolve_profile("NVIDIA A30", "8g.90gb")


@pytest.mark.parametrize(
    ("model", "memory", "name"),
    [
        ("A100-40GB", 1, "1g.5gb"),
        ("A100-40GB", 5 * GiB, "1g.5gb"),
        ("A100-40GB", 5 * GiB + 1, "1g.10gb"),
        ("A100-40GB", 10 * GiB, "1g.10gb"),
        ("A100-40GB", 20 * GiB, "3g.20gb"),
        ("A100-40GB", 20 * GiB + 1, "7g.40gb"),
        ("A100-40GB", 40 * GiB, "7g.40gb"),
        ("H100-80GB", 10 * GiB, "1g.10gb"),
        ("H100-80GB", 10 * GiB + 1, "1g.20gb"),
        ("H200-141GB", 17 * GiB + 640 * MiB, "1g.18gb"),
        ("H200-141GB", 18 * GiB, "1g.35gb"),
        ("H200-141GB", 141 * GiB, "7g.141gb"),
        ("A30-24GB", 6 * GiB, "1g.6gb"),
        ("A30-24GB", 6 * GiB + 1, "2g.12gb"),
    ],
)
def test_profile_for_memory_boundaries_inclusive(model: str, memory: int, name: str) -> None:
    assert profile_for_memory(model, memory).name == name


def test_profile_for_memory_refusals() -> None:
    with pytest.raises(InvalidRequestError, match=r"exceeds the largest MIG profile of A100-40GB: 7g\.40gb \(40Gi\)"):
        profile_for_memory("A100-40GB", 40 * GiB + 1)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(InvalidRequestError, match="memory_bytes"):
            profile_for_memory("A100-40GB", bad)  # type: ignore[arg-type]
