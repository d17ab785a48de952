"""``ljrk simulate`` end to end (in process through ``main(argv)``, plus two subprocess runs of the installed script).

Behaviours covered:
- a tiny trace pair runs: exit 0, summary.json (exact keys, types, one object per policy × seed), curves.csv
  (published header, 131 x-columns, workload = pods file stem), failures.csv (one row per run and size class,
  ending at each class's failed_by_size), a stdout table whose numbers equal summary.json;
- the embedded default: no --nodes/--pods → synthetic workload, the six published policies, seed 42, output in
  ./out/simulate;
- --seeds 42 | 42,43 | 42-51 grammar, and its rejections;
- bad input → exit 2, ONE stderr line naming file, line and column, and no output written: every malformed CSV
  case, a missing file, --nodes without --pods, an unknown policy (message lists the known ones), bad --seeds,
  bad --tune;
- --plot writes a non-empty PNG, three panels wide when fgd and fgd-plus both ran (their difference), two
  otherwise; without matplotlib it fails fast (exit 2) with the pip install hint;
- with fgd and fgd-plus, stdout states the failure check's verdict (the paired sign rule);
- determinism: two runs give identical numbers (except wall_seconds) and byte-identical curves.csv;
- the container wires every port (check_dependencies, every provider resolves);
- the tqdm adapter draws on its stream only when enabled;
- the top-level ``ljrk`` dispatches subcommands; the installed script's ``simulate --help`` and a real run work.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dependency_injector import providers

from adapters.matplotlib_plot import INSTALL_HINT
from adapters.reportfiles import SUMMARY_KEYS
from adapters.tqdm_progress import TqdmProgress
from domain.scheduling.registry import POLICIES, PUBLISHED_POLICIES
from entrypoints import cli
from entrypoints.simulate.__main__ import main, parse_seeds
from entrypoints.simulate.app import SimulateSettings, Simulation
from entrypoints.simulate.containers import SimulateContainer

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn1,32000,131072,2,T4\nn2,32000,131072,2,V100M16\nn3,16000,65536,1,T4\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
    "p1,4000,8192,1,500,\n"
    "p2,4000,8192,1,1000,T4\n"
    "p3,2000,4096,0,0,\n"
    "p4,8000,16384,2,1000,\n"
    "p5,4000,8192,1,250,V100M16|T4\n"
    "p6,3000,8192,1,810,\n"
)


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "tiny_pods.csv"
    nodes.write_text(NODES, encoding="utf-8")
    pods.write_text(PODS, encoding="utf-8")
    return nodes, pods


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["--no-progress", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def trace_args(trace: tuple[Path, Path], out: Path, *extra: str) -> list[str]:
    return ["--nodes", str(trace[0]), "--pods", str(trace[1]), "--output-dir", str(out), *extra]


def summary(out: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return rows


def test_tiny_trace_writes_summary_curves_and_table(
    trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code, stdout, err = run(trace_args(trace, out, "--policy", "best-fit,fgd", "--seeds", "42,43"), capsys)
    assert code == 0, err
    rows = summary(out)
    assert [(r["policy"], r["seed"]) for r in rows] == [("best-fit", 42), ("best-fit", 43), ("fgd", 42), ("fgd", 43)]
    for row in rows:
        assert tuple(row) == SUMMARY_KEYS
        assert all(type(row[k]) is int for k in ("seed", "arrivals", "failed_pods"))
        assert all(isinstance(row[k], float | None) for k in ("alloc_at_100", "alloc_at_130", "frag_ratio_at_80"))
        assert isinstance(row["wall_seconds"], float)
    with (out / "curves.csv").open(encoding="utf-8", newline="") as handle:
        table = list(csv.reader(handle))
    assert table[0][:5] == ["workload", "sc_policy", "tune", "seed", "total_gpus"]
    assert table[0][5:] == [str(x) for x in range(131)]
    assert [r[:5] for r in table[1:]] == [
        ["tiny_pods", p, "1.3", str(s), "5"] for p in ("best-fit", "fgd") for s in (42, 43)
    ]
    lines = stdout.splitlines()
    assert lines[0].startswith("workload tiny_pods: alloc@X = milli-GPU allocated")
    assert lines[1].split()[:2] == ["policy", "seed"]
    for row, line in zip(rows, lines[2:6], strict=True):
        cells = line.split()
        assert cells[:2] == [row["policy"], str(row["seed"])]
        assert cells[2] == "-" if row["alloc_at_100"] is None else float(cells[2]) == row["alloc_at_100"]
        assert int(cells[5]) == row["arrivals"]
        assert int(cells[6]) == row["failed_pods"]
        assert cells[8] == "-" if row["alloc_auc"] is None else float(cells[8]) == round(row["alloc_auc"], 2)
        by_size = row["failed_by_size"]
        assert isinstance(by_size, dict)
        assert sum(by_size.values()) == row["failed_pods"]
        assert cells[9] == (",".join(f"{c}:{n}" for c, n in by_size.items() if n) or "-")
    with (out / "failures.csv").open(encoding="utf-8", newline="") as handle:
        failures = list(csv.reader(handle))
    assert failures[0][:5] == ["workload", "sc_policy", "tune", "seed", "size_class"]
    assert len(failures) == 1 + 4 * 7
    for row in rows:
        ends = {r[4]: int(r[-1]) for r in failures[1:] if (r[1], r[3]) == (row["policy"], str(row["seed"]))}
        by_size = row["failed_by_size"]
        assert isinstance(by_size, dict)
        assert list(ends) == list(by_size)  # x = 130 misses only a tuned pod that overshot the target
        assert all(ends[c] <= by_size[c] for c in ends)
    assert f"wrote {out / 'summary.json'}" in stdout
    assert f"wrote {out / 'failures.csv'}" in stdout


def test_embedded_default_runs_published_policies_into_default_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["--scale", "0.01"], capsys)
    assert code == 0, err
    rows = summary(tmp_path / "out" / "simulate")
    assert [r["policy"] for r in rows] == list(PUBLISHED_POLICIES)
    assert {r["seed"] for r in rows} == {42}
    curves = (tmp_path / "out" / "simulate" / "curves.csv").read_text(encoding="utf-8").splitlines()
    assert all(line.startswith("synthetic,") for line in curves[1:])


@pytest.mark.parametrize(
    ("text", "seeds"),
    [("42", (42,)), ("42,43", (42, 43)), ("42-51", tuple(range(42, 52))), (" 1, 5-7 ,5", (1, 5, 6, 7))],
)
def test_seeds_grammar(text: str, seeds: tuple[int, ...]) -> None:
    assert parse_seeds(text) == seeds


def test_seed_range_reaches_the_runs(
    trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(trace_args(trace, tmp_path / "o", "--policy", "spread", "--seeds", "42-51"), capsys)
    assert code == 0, err
    assert [r["seed"] for r in summary(tmp_path / "o")] == list(range(42, 52))


NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"

BAD_FILES = [
    ("nodes missing column", "nodes", "sn,cpu_milli,gpu,model\nn1,1,1,T4\n",
     ":1: missing required column 'memory_mib'"),
    ("pods missing column", "pods", "name,cpu_milli,memory_mib,gpu_milli\np,1,1,1\n",
     ":1: missing required column 'num_gpu'"),
    ("non-numeric", "nodes", NODE_HEADER + "n1,many,1024,1,T4\n",
     ":2:2: column 'cpu_milli': 'many' is not a whole number"),
    ("negative", "pods", POD_HEADER + "p1,1000,1024,-1,0,\n", ":2:4: column 'num_gpu': -1 is negative"),
    ("gpu_milli over 1000", "pods", POD_HEADER + "p1,1000,1024,1,1001,\n",
     ":2:5: column 'gpu_milli': 1001: must be 0..1000"),
    ("multi-GPU share", "pods", POD_HEADER + "p0,1,1,0,0,\np1,1000,1024,4,500,\n",
     ":3:5: column 'gpu_milli': 500: num_gpu=4 needs gpu_milli=1000"),
    ("duplicate node", "nodes", NODE_HEADER + "a,1,1,1,T4\na,1,1,1,T4\n",
     ":3:1: column 'sn': duplicate node name 'a'"),
    ("duplicate pod", "pods", POD_HEADER + "q,1,1,0,0,\nq,1,1,0,0,\n", ":3:1: column 'name': duplicate pod name 'q'"),
    ("empty nodes", "nodes", "", ":1: empty file"),
    ("pods without rows", "pods", POD_HEADER, ":2: no data rows"),
]


@pytest.mark.parametrize(("which", "text", "expected"), [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES])
def test_bad_trace_exits_2_with_one_positioned_line(
    trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str, text: str, expected: str
) -> None:
    bad = trace[0] if which == "nodes" else trace[1]
    bad.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    code, stdout, err = run(trace_args(trace, out), capsys)
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith("ljrk simulate: error: ")
    assert f"{bad}{expected}" in err
    assert stdout == ""
    assert not (out / "summary.json").exists()


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code, stdout, err = run(argv, capsys)
    assert code == 2
    assert stdout == ""
    assert err.count("\n") == 1
    assert err.startswith("ljrk simulate: error: ")
    return err


def test_missing_file(trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    absent = tmp_path / "absent.csv"
    err = usage_error(["--nodes", str(absent), "--pods", str(trace[1]), "--output-dir", str(tmp_path / "o")], capsys)
    assert f"{absent}: no such file" in err


def test_nodes_and_pods_go_together(trace: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert "--nodes needs --pods" in usage_error(["--nodes", str(trace[0])], capsys)
    assert "--pods needs --nodes" in usage_error(["--pods", str(trace[1])], capsys)


def test_unknown_policy_is_rejected_before_any_run(
    trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    err = usage_error(trace_args(trace, out, "--policy", "best-fit,tetris"), capsys)
    assert "'tetris'" in err
    assert all(name in err for name in POLICIES)
    assert not out.exists()


@pytest.mark.parametrize("seeds", ["x", "42-", "51-42", "42,,43", "-3"])
def test_bad_seeds(trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], seeds: str) -> None:
    assert "--seeds" in usage_error(trace_args(trace, tmp_path / "o", f"--seeds={seeds}"), capsys)


@pytest.mark.parametrize("tune", ["fast", "0", "-1", "nan"])
def test_bad_tune(trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], tune: str) -> None:
    assert "tune" in usage_error(trace_args(trace, tmp_path / "o", f"--tune={tune}"), capsys)


def test_plot_writes_png(trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "charts" / "alloc.png"
    code, stdout, err = run(trace_args(trace, tmp_path / "o", "--policy", "best-fit,random", "--seeds", "1,2",
                                       "--plot", str(png)), capsys)
    assert code == 0, err
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 1000
    assert f"wrote {png}" in stdout
    assert png_width(data) == 2 * 780  # two panels of 6.5 in at 120 dpi
    code, stdout, err = run(trace_args(trace, tmp_path / "o2", "--policy", "fgd,fgd-plus", "--seeds", "1,2",
                                       "--plot", str(png)), capsys)
    assert code == 0, err
    assert png_width(png.read_bytes()) == 3 * 780  # and fgd-plus − fgd with its seed band


def png_width(data: bytes) -> int:
    """Pixel width from a PNG's IHDR chunk."""
    return int.from_bytes(data[16:20], "big")


def test_plot_without_matplotlib_fails_before_running(
    trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what `import matplotlib` sees when it is not installed
    out = tmp_path / "o"
    err = usage_error(trace_args(trace, out, "--plot", str(tmp_path / "a.png")), capsys)
    assert INSTALL_HINT in err
    assert not out.exists()


def test_same_inputs_same_numbers(trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        code, _, err = run(trace_args(trace, out, "--policy", "random,fgd", "--seeds", "7-8"), capsys)
        assert code == 0, err

    def numbers(out: Path) -> list[dict[str, object]]:
        return [{k: v for k, v in row.items() if k != "wall_seconds"} for row in summary(out)]

    assert numbers(outs[0]) == numbers(outs[1])
    assert (outs[0] / "curves.csv").read_bytes() == (outs[1] / "curves.csv").read_bytes()


def test_container_wires_every_port(tmp_path: Path) -> None:
    container = SimulateContainer(settings=SimulateSettings(output_dir=tmp_path, progress=False))
    container.check_dependencies()
    for provider in container.traverse(types=[providers.Provider]):
        provider()  # every provider resolves
    assert isinstance(container.app(), Simulation)


def test_tqdm_progress_draws_only_when_enabled() -> None:
    shown, hidden = io.StringIO(), io.StringIO()
    for stream, enabled in ((shown, True), (hidden, False)):
        bar = TqdmProgress(enabled=enabled, stream=stream)
        bar.start(10, unit="pod")
        bar.describe("fgd seed 42")
        bar.advance(4)
        bar.finish()
        bar.finish()
    assert "fgd seed 42" in shown.getvalue()
    assert hidden.getvalue() == ""


def test_cli_dispatches_simulate(trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["simulate", "--no-progress", *trace_args(trace, tmp_path / "o", "--policy", "binpack")])
    assert code == 0
    assert summary(tmp_path / "o")[0]["policy"] == "binpack"
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    assert "simulate" in capsys.readouterr().out


LJRK = shutil.which("ljrk", path=str(Path(sys.executable).parent))
needs_script = pytest.mark.skipif(LJRK is None, reason="the ljrk console script is not installed next to python")


@needs_script
def test_installed_script_help() -> None:
    assert LJRK is not None
    done = subprocess.run([LJRK, "simulate", "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0
    assert "--nodes" in done.stdout
    assert "--seeds" in done.stdout
    assert "--scale" not in done.stdout


@needs_script
def test_installed_script_runs_a_tiny_trace(trace: tuple[Path, Path], tmp_path: Path) -> None:
    assert LJRK is not None
    out = tmp_path / "o"
    done = subprocess.run(
        [LJRK, "simulate", *trace_args(trace, out, "--policy", "best-fit", "--seeds", "42")],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # stderr is not a terminal: no progress bar
    assert summary(out)[0]["policy"] == "best-fit"
    assert "best-fit" in done.stdout


def test_output_dir_that_is_a_file_is_a_usage_error_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "taken"
    blocker.write_text("x")
    code = main(["--scale", "0.01", "--policy", "best-fit", "--output-dir", str(blocker), "--no-progress"])
    assert code == 2
    assert f"--output-dir {blocker}: exists and is not a folder" in capsys.readouterr().err


def test_unwritable_plot_path_fails_before_the_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    out = tmp_path / "out"
    code = main(["--scale", "0.01", "--policy", "best-fit", "--output-dir", str(out), "--no-progress",
                 "--plot", str(blocker / "x.png")])
    assert code == 2
    assert f"--plot {blocker / 'x.png'}: cannot be written there" in capsys.readouterr().err
    assert not (out / "summary.json").exists()


def test_typical_online_runs_fgd_plus_and_records_the_mode(
    trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "online"
    code, stdout, err = run(trace_args(trace, out, "--policy", "fgd,fgd-plus", "--typical", "online"), capsys)
    assert code == 0, err
    assert [line for line in stdout.splitlines() if line.startswith("fgd-plus vs fgd: ")]
    assert [(r["policy"], r["typical"]) for r in summary(out)] == [("fgd", "online"), ("fgd-plus", "online")]
    code, _, err = run(trace_args(trace, tmp_path / "bad", "--typical", "oracle"), capsys)
    assert code == 2
    assert "--typical" in err
    assert "oracle" in err


def test_topology_machine_reported_per_run(
    trace: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code, stdout, err = run(trace_args(trace, out, "--policy", "fgd", "--topology", "nvswitch8"), capsys)
    assert code == 0, err
    (row,) = summary(out)
    topology = row["topology"]
    assert isinstance(topology, dict)
    # n1 and n2 have 2 GPUs (one NVSwitch island each); n3 has one GPU, so no topology
    assert (topology["machine"], topology["known"], topology["islands"]) == ("nvswitch8", True, 2)
    assert topology["placed"]["2"] == {"nvlink": 1}  # p4: the trace's only 2-GPU pod, on one island
    assert "fgd seed 42 (nvswitch8, topology known): 2-GPU pods 1 placed, 100.0 % NVLink-connected" in stdout
    code, _, _ = run(trace_args(trace, tmp_path / "plain", "--policy", "fgd"), capsys)
    assert code == 0
    assert summary(tmp_path / "plain")[0]["topology"] is None


def test_topology_blind_needs_a_machine(trace: tuple[Path, Path], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(trace_args(trace, tmp_path / "out", "--topology-blind"), capsys)
    assert code == 2
    assert err.strip().splitlines() == ["ljrk simulate: error: topology-blind: needs --topology MACHINE (the machine "
                                        "the placements are judged on)"]
    assert not (tmp_path / "out").exists()
    code, _, err = run(trace_args(trace, tmp_path / "out", "--topology", "torus"), capsys)
    assert code == 2
    assert "--topology: invalid choice: 'torus'" in err
