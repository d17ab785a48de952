"""``ljrk up``'s command line (entrypoints.up.__main__) before anything starts, and its registration in ``ljrk``.

Covers: ``--help`` exits 0 and names the flags; ``ljrk --help`` lists ``up``; bad input exits 2 with one line
``ljrk up: error: …`` and starts nothing — a non-positive or non-numeric count, ``--duration`` with ``--speedup``,
an unknown policy, a malformed or MIG GPU spec, a missing or malformed workload file, a share that is not a whole
percent, an unknown topology machine or one that does not fit the GPU count; a work folder so deep that the nodes'
unix socket paths would pass 107 bytes exits 1.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from entrypoints.cli import COMMANDS, build_parser
from entrypoints.up.__main__ import main


def test_help_and_registration(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--nodes", "--gpus-per-node", "--workload", "--kubeconfig", "--pods", "--duration", "--hold",
                 "--topology"):
        assert flag in out
    assert "up" in COMMANDS
    assert "up " in build_parser().format_help()


@pytest.mark.parametrize(("argv", "message"), [
    (["--nodes", "0"], "must be > 0"),
    (["--pods", "many"], "is not a number"),
    (["--duration", "5", "--speedup", "10"], "not allowed with argument"),
    (["--policy", "nope"], "nope"),
    (["--gpus-per-node", "two"], "--gpus-per-node 'two'"),
    (["--gpus-per-node", "1x80Gi:A100-SXM4-80GB:mig"], "MIG GPUs are not supported"),
    (["--workload", "/no/such/pods.csv"], "no such file"),
    (["--topology", "torus"], "invalid choice: 'torus'"),
    (["--topology", "nvlink-islands-2x4", "--gpus-per-node", "3x16Gi:A100"], "needs an even number of GPUs"),
])
def test_bad_input_exits_2_with_one_line(argv: list[str], message: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ljrk up: error: "), err
    assert err.count("\n") == 1, err
    assert message in err
    assert not (tmp_path / "out").exists()


def test_bad_workload_file_names_line_and_share(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,1024,1,455\n")
    assert main(["--workload", str(pods), "--output-dir", str(tmp_path / "out")]) == 2
    assert "gpu_milli=455 is not a whole percent" in capsys.readouterr().err
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,lots,1024,1,500\n")
    assert main(["--workload", str(pods), "--output-dir", str(tmp_path / "out")]) == 2
    assert "pods.csv:2:2: column 'cpu_milli'" in capsys.readouterr().err


def test_socket_paths_too_long_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    assert main(["--nodes", "1", "--work-dir", str(deep), "--output-dir", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "longer than 107 bytes" in err
    assert "--work-dir" in err
    assert list(deep.iterdir()) == []
