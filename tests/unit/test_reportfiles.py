"""Report files adapter (adapters.reportfiles).

Behaviours covered:
- summary.json is a strict-JSON list with exactly the documented keys and types, in run order; NaN curve points
  become null (never the invalid token NaN); ``alloc_auc`` is the trapezoid mean of the allocation curve (58.85 for
  the hand-made run) and null when the run stops short of x = 130; ``failed_by_size`` counts every class, in order;
- failures.csv has one row per run and size class (header workload,sc_policy,tune,seed,size_class,0..130) with the
  cumulative failed pods of that class at each x (known steps at the failures' x);
- curves.csv has the published header (workload,sc_policy,tune,seed,total_gpus,0..130), one row per run, 131
  x-columns, NaN as an empty cell, and round-trips the curve values exactly;
- writing leaves no temporary files and overwrites earlier outputs; prepare() creates the folder and rejects a
  path that is a file.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from adapters.reportfiles import CURVES_FILE, FAILURES_FILE, SUMMARY_FILE, SUMMARY_KEYS, ReportFiles
from domain.simulation.breakdown import SIZE_CLASSES
from domain.simulation.replay import ReplayConfig, ReplayResult
from ports.report import ReportError


def result(policy: str, seed: int, *, events: int = 131, step: int = 10) -> ReplayResult:
    """A run on a 1-GPU cluster whose arrivals advance ``step`` milli (1 % per 10) per event; allocation is
    min(x, 90) %. Three pods failed: a share at event 4 (x = 5 with step 10), 8-GPU pods at events 95 and 120
    (x = 96, 121), when the run has those events."""
    arrived = [step * (i + 1) for i in range(events)]
    used = [min(a, 900) for a in arrived]
    idle = [1000 - u for u in used]
    failures = [(i, cls) for i, cls in ((4, "share"), (95, "8"), (120, "8")) if i < events]
    return ReplayResult(
        config=ReplayConfig(policy, seed), total_gpus=1, arrived_milli=arrived, used_milli=used,
        frag_milli=[i / 2 for i in idle], idle_milli=idle, wall_seconds=0.123456,
        failures=failures,
    )


def strict_json(text: str) -> object:
    def reject(token: str) -> object:
        raise AssertionError(f"invalid JSON token {token}")

    return json.loads(text, parse_constant=reject)


def test_summary_has_exact_keys_and_types(tmp_path: Path) -> None:
    ReportFiles(tmp_path).write([result("best-fit", 42), result("fgd", 43)], workload="w")
    rows = strict_json((tmp_path / SUMMARY_FILE).read_text(encoding="utf-8"))
    assert isinstance(rows, list)
    assert [(r["policy"], r["seed"]) for r in rows] == [("best-fit", 42), ("fgd", 43)]
    for row in rows:
        assert tuple(row) == SUMMARY_KEYS
        assert isinstance(row["policy"], str)
        for key in ("seed", "arrivals", "failed_pods"):
            assert type(row[key]) is int
        for key in ("alloc_at_100", "alloc_at_130", "frag_ratio_at_80", "wall_seconds"):
            assert isinstance(row[key], float)
    first = rows[0]
    assert first["alloc_at_100"] == 90.0
    assert first["alloc_at_130"] == 90.0
    assert first["frag_ratio_at_80"] == 50.0
    assert first["arrivals"] == 131
    assert first["failed_pods"] == 3
    assert first["wall_seconds"] == 0.123
    # (1/130)·[x 0→1 at 1 % (curve[0] falls back to x = 1): 1; 1→90 rising: (90² − 1)/2; 90→130 flat: 40 × 90]
    assert first["alloc_auc"] == round((1 + (90**2 - 1) / 2 + 40 * 90) / 130, 3) == 58.85
    assert first["failed_by_size"] == {"cpu": 0, "share": 1, "1": 0, "2": 0, "4": 0, "8": 2, ">8": 0}
    assert list(first["failed_by_size"]) == list(SIZE_CLASSES)


def test_nan_points_are_written_as_null(tmp_path: Path) -> None:
    short = result("random", 1, events=50, step=10)  # arrivals end at x = 50: no point at 80, 100, 130
    assert math.isnan(short.allocation_curve()[100])
    ReportFiles(tmp_path).write([short], workload="w")
    text = (tmp_path / SUMMARY_FILE).read_text(encoding="utf-8")
    assert "NaN" not in text
    row = strict_json(text)[0]  # type: ignore[index]
    assert row["alloc_at_100"] is None
    assert row["alloc_at_130"] is None
    assert row["frag_ratio_at_80"] is None
    assert row["alloc_auc"] is None
    assert row["failed_by_size"]["share"] == row["failed_pods"] == 1


def test_curves_csv_has_published_layout(tmp_path: Path) -> None:
    runs = [result("best-fit", 42), result("best-fit", 43), result("random", 42, events=50)]
    ReportFiles(tmp_path).write(runs, workload="openb_pod_list_default")
    with (tmp_path / CURVES_FILE).open(encoding="utf-8", newline="") as handle:
        table = list(csv.reader(handle))
    header, rows = table[0], table[1:]
    assert header == ["workload", "sc_policy", "tune", "seed", "total_gpus", *(str(x) for x in range(131))]
    assert len(rows) == 3
    assert all(len(row) == 5 + 131 for row in rows)
    assert rows[0][:5] == ["openb_pod_list_default", "best-fit", "1.3", "42", "1"]
    assert [float(v) for v in rows[0][5:]] == runs[0].allocation_curve()
    assert rows[2][5 + 130] == ""  # NaN point


def test_failures_csv_has_cumulative_counts_per_size_class(tmp_path: Path) -> None:
    runs = [result("fgd", 42), result("fgd-plus", 42, events=50)]
    ReportFiles(tmp_path).write(runs, workload="w")
    with (tmp_path / FAILURES_FILE).open(encoding="utf-8", newline="") as handle:
        table = list(csv.reader(handle))
    header, rows = table[0], table[1:]
    assert header == ["workload", "sc_policy", "tune", "seed", "size_class", *(str(x) for x in range(131))]
    assert [r[:5] for r in rows] == [["w", p, "1.3", "42", c] for p in ("fgd", "fgd-plus") for c in SIZE_CLASSES]
    counts = {(r[1], r[4]): [int(v) for v in r[5:]] for r in rows}
    assert counts["fgd", "share"] == [0] * 5 + [1] * 126
    assert counts["fgd", "8"] == [0] * 96 + [1] * 25 + [2] * 10
    assert counts["fgd-plus", "8"] == [0] * 131  # its run ends at x = 50, before the 8-GPU failures
    assert all(counts[p, c] == [0] * 131 for p in ("fgd", "fgd-plus") for c in ("cpu", "1", "2", "4", ">8"))


def test_write_is_clean_and_overwrites(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b"
    report = ReportFiles(out)
    first = report.write([result("fgd", 1)], workload="w")
    second = report.write([result("fgd", 2)], workload="w")
    assert first == second == [out / SUMMARY_FILE, out / CURVES_FILE, out / FAILURES_FILE]
    assert sorted(p.name for p in out.iterdir()) == sorted([SUMMARY_FILE, CURVES_FILE, FAILURES_FILE])
    assert strict_json((out / SUMMARY_FILE).read_text(encoding="utf-8"))[0]["seed"] == 2  # type: ignore[index]


def test_prepare_rejects_a_file(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x", encoding="utf-8")
    with pytest.raises(ReportError, match="not a folder"):
        ReportFiles(target).prepare()
