"""Report files adapter (adapters.reportfiles).

Behaviours covered:
- summary.json is a strict-JSON list with exactly the documented keys and types, in run order; NaN curve points
  become null (never the invalid token NaN);
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

from adapters.reportfiles import CURVES_FILE, SUMMARY_FILE, SUMMARY_KEYS, ReportFiles
from domain.simulation.replay import ReplayConfig, ReplayResult
from ports.report import ReportError


def result(policy: str, seed: int, *, events: int = 131, step: int = 10) -> ReplayResult:
    """A run on a 1-GPU cluster whose arrivals advance ``step`` milli (1 % per 10) per event."""
    arrived = [step * (i + 1) for i in range(events)]
    used = [min(a, 900) for a in arrived]
    idle = [1000 - u for u in used]
    return ReplayResult(
        config=ReplayConfig(policy, seed), total_gpus=1, arrived_milli=arrived, used_milli=used,
        frag_milli=[i / 2 for i in idle], idle_milli=idle, failed_pods=3, wall_seconds=0.123456,
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


def test_write_is_clean_and_overwrites(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b"
    report = ReportFiles(out)
    first = report.write([result("fgd", 1)], workload="w")
    second = report.write([result("fgd", 2)], workload="w")
    assert first == second == [out / SUMMARY_FILE, out / CURVES_FILE]
    assert sorted(p.name for p in out.iterdir()) == sorted([SUMMARY_FILE, CURVES_FILE])
    assert strict_json((out / SUMMARY_FILE).read_text(encoding="utf-8"))[0]["seed"] == 2  # type: ignore[index]


def test_prepare_rejects_a_file(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x", encoding="utf-8")
    with pytest.raises(ReportError, match="not a folder"):
        ReportFiles(target).prepare()
