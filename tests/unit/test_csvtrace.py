"""CSV trace reader (adapters.csvtrace).

Behaviours covered:
- valid node and pod lists load in file order with the right values; extra columns are ignored, ``gpu_spec`` is
  optional and split on ``|`` (empty tokens dropped, duplicates kept); blank lines and a UTF-8 BOM are accepted;
- every malformed input raises TraceFormatError / TraceFileError whose message names file, 1-based line
  (header = 1) and 1-based column: missing column, non-numeric, negative, gpu_milli > 1000, multi-GPU share,
  duplicate name, empty file, header only, short/long row, duplicate header, empty name, non-UTF-8, missing file,
  directory;
- domain InvalidRequestError from TracePod construction (gpu_milli > 1000, a multi-GPU share) is translated
  into the same positioned form;
- the real Alibaba trace files load with the published counts, fast (skipped without ../shared/traces/openb).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.csvtrace import CsvTraceReader
from domain.simulation.workload import TraceNode, TracePod
from ports.trace import TraceFileError, TraceFormatError

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "openb"
needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason=f"trace folder {TRACES} not present")

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn1,32000,131072,2,T4\nn2,8000,32768,0,\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
    "p1,4000,8192,1,500,,LS\n"
    "p2,12000,16384,2,1000,V100M16||V100M32|V100M32,BE\n"
    "p3,1000,1024,0,0,,LS\n"
)


def write(tmp_path: Path, text: str | bytes, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_nodes_load_in_file_order(tmp_path: Path) -> None:
    nodes = CsvTraceReader().read_nodes(write(tmp_path, NODES))
    assert nodes == [TraceNode("n1", 32000, 131072, 2, "T4"), TraceNode("n2", 8000, 32768, 0, "")]


def test_pods_load_with_gpu_spec_split_and_extra_columns_ignored(tmp_path: Path) -> None:
    pods = CsvTraceReader().read_pods(write(tmp_path, PODS))
    assert pods == [
        TracePod("p1", 4000, 8192, 1, 500),
        TracePod("p2", 12000, 16384, 2, 1000, ("V100M16", "V100M32", "V100M32")),
        TracePod("p3", 1000, 1024, 0, 0),
    ]


def test_gpu_spec_column_is_optional(tmp_path: Path) -> None:
    text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,1,1000\n"
    pods = CsvTraceReader().read_pods(write(tmp_path, text))
    assert pods == [TracePod("p", 1000, 1024, 1, 1000)]


def test_blank_lines_bom_and_crlf_are_accepted(tmp_path: Path) -> None:
    text = "\ufeffsn,cpu_milli,memory_mib,gpu,model\r\n\r\nn1,1000,1024,1,T4\r\n\r\n"
    assert CsvTraceReader().read_nodes(write(tmp_path, text)) == [TraceNode("n1", 1000, 1024, 1, "T4")]


NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"

BAD_NODES = [
    ("missing column", "sn,cpu_milli,memory_mib,model\nn1,1,1,T4\n", ":1: missing required column 'gpu'"),
    ("non-numeric", NODE_HEADER + "n1,1000,1024,two,T4\n", ":2:4: column 'gpu': 'two' is not a whole number"),
    ("decimal", NODE_HEADER + "n1,1000.5,1024,2,T4\n", ":2:2: column 'cpu_milli': '1000.5' is not a whole number"),
    ("empty value", NODE_HEADER + "n1,,1024,2,T4\n", ":2:2: column 'cpu_milli': empty"),
    ("negative", NODE_HEADER + "n1,1000,-5,2,T4\n", ":2:3: column 'memory_mib': -5 is negative"),
    ("duplicate", NODE_HEADER + "n1,1,1,1,T4\nn2,1,1,1,T4\nn1,1,1,1,T4\n",
     ":4:1: column 'sn': duplicate node name 'n1' (first on line 2)"),
    ("empty file", "", ":1: empty file"),
    ("header only", NODE_HEADER, ":2: no data rows"),
    ("short row", NODE_HEADER + "n1,1000,1024\n", ":2:4: column 'gpu': missing value"),
    ("long row", NODE_HEADER + "n1,1000,1024,1,T4,extra\n", ":2:6: unexpected extra field"),
    ("duplicate header", "sn,cpu_milli,memory_mib,gpu,model,gpu\nn1,1,1,1,T4,1\n",
     ":1:6: column 'gpu': appears twice in the header"),
    ("empty name", NODE_HEADER + " ,1000,1024,1,T4\n", ":2:1: column 'sn': is empty"),
]


@pytest.mark.parametrize(("text", "expected"), [(t, e) for _, t, e in BAD_NODES], ids=[i for i, _, _ in BAD_NODES])
def test_bad_node_list_names_file_line_and_column(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text, "nodes.csv")
    with pytest.raises(TraceFormatError) as caught:
        CsvTraceReader().read_nodes(path)
    assert str(caught.value).startswith(f"{path}:")
    assert expected in str(caught.value)


BAD_PODS = [
    ("missing column", "name,cpu_milli,memory_mib,gpu_milli\np,1,1,0\n", ":1: missing required column 'num_gpu'"),
    ("non-numeric", POD_HEADER + "p1,1000,1024,1,lots,\n", ":2:5: column 'gpu_milli': 'lots' is not a whole number"),
    ("negative", POD_HEADER + "p1,-1000,1024,1,500,\n", ":2:2: column 'cpu_milli': -1000 is negative"),
    ("gpu_milli over 1000", POD_HEADER + "p1,1000,1024,1,500,\np2,1000,1024,1,1500,\n",
     ":3:5: column 'gpu_milli': 1500: must be 0..1000"),
    ("multi-GPU share", POD_HEADER + "p1,1000,1024,2,500,\n",
     ":2:5: column 'gpu_milli': 500: num_gpu=2 needs gpu_milli=1000"),
    ("multi-GPU zero share", POD_HEADER + "p1,1000,1024,8,0,\n",
     ":2:5: column 'gpu_milli': 0: num_gpu=8 needs gpu_milli ≥ 1"),
    ("one GPU with zero milli", POD_HEADER + "p1,1000,1024,1,0,\n",
     ":2:5: column 'gpu_milli': 0: num_gpu=1 needs gpu_milli ≥ 1"),
    ("CPU-only pod with GPU milli", POD_HEADER + "p1,1000,1024,0,500,\n",
     ":2:5: column 'gpu_milli': 500: a CPU-only pod (num_gpu=0) must have gpu_milli=0"),
    ("duplicate", POD_HEADER + "p1,1,1,0,0,\np1,1,1,0,0,\n", ":3:1: column 'name': duplicate pod name 'p1'"),
    ("empty file", "", ":1: empty file"),
    ("header only", POD_HEADER + "\n\n", ":2: no data rows"),
]


@pytest.mark.parametrize(("text", "expected"), [(t, e) for _, t, e in BAD_PODS], ids=[i for i, _, _ in BAD_PODS])
def test_bad_pod_list_names_file_line_and_column(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text, "pods.csv")
    with pytest.raises(TraceFormatError) as caught:
        CsvTraceReader().read_pods(path)
    assert expected in str(caught.value)
    assert str(path) in str(caught.value)


def test_error_carries_position_attributes(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError) as caught:
        CsvTraceReader().read_pods(write(tmp_path, POD_HEADER + "p1,1,1,1,1,\np2,1,x,1,1,\n"))
    assert (caught.value.line, caught.value.column, caught.value.column_name) == (3, 3, "memory_mib")


def test_non_utf8_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, NODE_HEADER.encode() + b"n1,1,1,1,T4\nn\xff2,1,1,1,T4\n")
    with pytest.raises(TraceFormatError, match=r":3: not UTF-8"):
        CsvTraceReader().read_nodes(path)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceFileError, match="no such file"):
        CsvTraceReader().read_nodes(tmp_path / "absent.csv")
    with pytest.raises(TraceFileError, match="is a directory"):
        CsvTraceReader().read_pods(tmp_path)


@needs_traces
def test_real_node_list_loads_with_published_counts() -> None:
    nodes = CsvTraceReader().read_nodes(TRACES / "openb_node_list_gpu_node.csv")
    assert len(nodes) == 1213
    assert sum(n.gpus for n in nodes) == 6212
    assert sum(n.cpu_milli for n in nodes) == 107_018_000


@needs_traces
def test_real_default_pod_list_loads() -> None:
    pods = CsvTraceReader().read_pods(TRACES / "openb_pod_list_default.csv")
    assert len(pods) == 8152
    assert sum(p.total_gpu_milli for p in pods) == 6_086_800
    assert sum(1 for p in pods if p.num_gpu == 0) == 1088


@needs_traces
def test_real_five_column_multigpu_list_loads() -> None:
    path = TRACES / "openb_pod_list_multigpu30.csv"
    assert path.read_text(encoding="utf-8").splitlines()[0].count(",") == 4
    pods = CsvTraceReader().read_pods(path)
    assert len(pods) == 8508
    assert all(p.gpu_spec == () for p in pods)
    assert sum(1 for p in pods if p.num_gpu > 1) == 431
