"""Smoke test of ``bench/controller_churn.py`` on a small cluster (the full run is not part of the test suite).

Covers: with 20 nodes and 300 unrelated Node updates the controller makes no API write and creates no Job; each
of 5 label flips gets its Job; the closing ``key=value`` lines are printed.
"""

from __future__ import annotations

import pytest

from support.bench_modules import load_bench


def test_small_churn_run(capsys: pytest.CaptureFixture[str]) -> None:
    module = load_bench("controller_churn")
    module.main(["--nodes", "20", "--updates", "300", "--flips", "5"])
    lines = capsys.readouterr().out.splitlines()
    values = dict(line.split("=", 1) for line in lines if "=" in line and " " not in line)
    assert values["api_writes"] == "0"
    assert values["jobs_created"] == "0"
    assert float(values["flip_to_job_p99_ms"]) > 0
    assert any("5 flips" in line for line in lines)
