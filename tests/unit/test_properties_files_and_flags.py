"""Property tests at the boundaries that read files and flags: whatever the input, the result is a
valid value or the boundary's own typed error naming the file (and line, key or item) or the flag, never another
exception.

Behaviours covered:

* ``protocol.yaml`` (``adapters.protocolfile``): any mapping of known and unknown keys to any YAML values, any text,
  and ConfigMap manifests with any ``metadata`` give constants or :class:`ProtocolFileError` naming the source;
  YAML nested too deep (was ``RecursionError``), a List holding itself, and ``metadata`` that is not a mapping
  (was ``AttributeError``) are such errors;
* trace CSVs (``adapters.csvtrace``): any cells under the node and pod headers give nodes and pods or a
  :class:`TraceFormatError` naming file and line; a cell of 5000 digits (was ``ValueError``) and a node of 10^8 GPUs
  (was a memory blow-up) are such errors;
* Runtime state files (``adapters.statefile``): a valid base and journal with fields replaced by any JSON value or
  removed, or any bytes, give a snapshot or a :class:`StateStoreError` naming the file; a ``generation`` of
  ``1e400`` (was ``OverflowError``) is such an error;
* simulated GPUs (``adapters.simulated``): any ``--simulated-gpus`` spec or YAML file (also not UTF-8, was
  ``UnicodeDecodeError``) gives an inventory or a :class:`SpecError`; a GPU above 1 PiB (now refused by the domain)
  is a ``SpecError``;
* flags of ``ljrk scheduler`` and ``ljrk runtime``: any values of any flags give settings or a usage/settings error
  naming the flag; ``main(argv)`` turns such an error into one ``error:`` line and exit code 2; infinite, huge or
  NaN periods (which only failed later, in a wait) are refused.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_statefile import Model

import entrypoints.runtime.__main__ as runtime_cli
import entrypoints.scheduler.__main__ as scheduler_cli
from adapters.csvtrace import NODE_COLUMNS, POD_COLUMNS, CsvTraceReader
from adapters.protocolfile import ProtocolFileError, find_protocols, known_keys, parse_protocol
from adapters.simulated.spec import SpecError, build_inventory, load_file, parse_spec
from adapters.statefile import JsonRuntimeStateStore
from domain.errors import DomainError
from entrypoints._shared.cli import UsageError
from entrypoints.runtime.app import RuntimeSettings
from entrypoints.runtime.app import SettingsError as RuntimeSettingsError
from entrypoints.scheduler.app import MAX_SECONDS, SchedulerSettings
from entrypoints.scheduler.app import SettingsError as SchedulerSettingsError
from ports.runtime_state import StateStoreError
from ports.trace import TraceError
from support.boundary_inputs import mutated, raised

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.function_scoped_fixture])


# ---------------------------------------------------------------------------------------------- protocol.yaml
yaml_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=8),
                      st.sampled_from(["1Gi", "1%", "x.percentage", "a b", "", "1e400", "99999999999999999999999"]))
yaml_value = st.recursive(yaml_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.one_of(st.sampled_from(known_keys()), st.text(max_size=4)), inner,
                                                 max_size=3)), max_leaves=6)
protocol_doc = st.dictionaries(st.sampled_from([*known_keys(), "resources", "annotations", "bogus", "version"]),
                               yaml_value, max_size=5)
config_map = st.fixed_dictionaries({"kind": st.sampled_from(["ConfigMap", "List"]), "metadata": yaml_value,
                                    "data": st.one_of(yaml_value, protocol_doc.map(
                                        lambda d: {"protocol.yaml": yaml.safe_dump(d)}))})
protocol_text = st.one_of(protocol_doc.map(yaml.safe_dump), config_map.map(yaml.safe_dump), st.text(max_size=40),
                          st.text(alphabet="[]{}:,- \n&*!|>'\"#?ab1", max_size=40))
DEEP = "[" * 1000  # beyond the recursion limit of PyYAML's composer
SELF_LIST = "&l {kind: List, items: [*l]}"
BAD_METADATA = "kind: ConfigMap\nmetadata: [1]\ndata:\n  protocol.yaml: 'memory-unit: 1Gi'\n"


@FAST
@given(protocol_text)
@example(DEEP)  # was RecursionError
@example(SELF_LIST)
@example(BAD_METADATA)  # was AttributeError: 'list' object has no attribute 'get'
def test_any_protocol_text_is_constants_or_an_error_naming_the_source(text: str) -> None:
    error = raised(lambda: parse_protocol(text, source="p.yaml"), ProtocolFileError)
    assert error is None or str(error).startswith("p.yaml: ")
    error = raised(lambda: find_protocols(text, source="m.yaml"), ProtocolFileError)
    assert error is None or str(error).startswith("m.yaml")


def test_deep_yaml_and_a_self_holding_list_are_one_error_line() -> None:
    with pytest.raises(ProtocolFileError, match="nested too deep"):
        parse_protocol(DEEP, source="p.yaml")
    with pytest.raises(ProtocolFileError, match="nests itself"):
        find_protocols(SELF_LIST, source="m.yaml")
    [(where, _)] = find_protocols(BAD_METADATA, source="m.yaml")
    assert where == "m.yaml: ConfigMap default/?"


# ---------------------------------------------------------------------------------------------- trace CSVs
cell = st.one_of(st.integers(-5, 10**20).map(str), st.sampled_from(["", "1000", "T4", "G2|T4", "0", "64", "65"]),
                 st.text(alphabet="0123456789,\"\n x-+", max_size=8), st.text(max_size=6))
rows = st.lists(st.lists(cell, min_size=4, max_size=6), max_size=4)


def write_csv(directory: Path, header: tuple[str, ...], body: list[list[str]]) -> Path:
    path = directory / "trace.csv"
    path.write_text("\n".join([",".join(header), *(",".join(r) for r in body)]) + "\n")
    return path


@FAST
@given(rows, st.sampled_from(["nodes", "pods"]))
@example([["n1", "9" * 5000, "1", "1", "T4"]], "nodes")  # was ValueError: Exceeds the limit (4300 digits)
@example([["n1", "1", "1", "100000000", "T4"]], "nodes")  # was 10^8 Gpu objects (the process was killed)
@example([["0", "0", "0", "1", ""]], "nodes")  # was InvalidRequestError from Gpu: a GPU without a model
def test_any_trace_cells_are_rows_or_an_error_naming_file_and_line(tmp_path_factory: pytest.TempPathFactory,
                                                                   body: list[list[str]], kind: str) -> None:
    path = write_csv(tmp_path_factory.mktemp("trace"), NODE_COLUMNS if kind == "nodes" else (*POD_COLUMNS, "gpu_spec"),
                     body)
    reader = CsvTraceReader()

    def read() -> None:
        if kind == "nodes":
            for node in reader.read_nodes(path):
                node.inventory()
        else:
            for number, pod in enumerate(reader.read_pods(path)):
                pod.request(f"uid-{number}")
            reader.read_pod_times(path)

    error = raised(read, TraceError)
    assert error is None or str(error).startswith(str(path))


# ---------------------------------------------------------------------------------------------- Runtime state files
def saved_state() -> tuple[str, list[str]]:
    """A base file and its journal lines after a few saves."""
    with tempfile.TemporaryDirectory() as directory:
        store, model = JsonRuntimeStateStore.in_dir(Path(directory)), Model()
        model.step(("allocate", 1))
        store.save(model.snapshot())
        for step in (("allocate", 2), ("toggle", 0), ("release", 1)):
            model.step(step)
            store.save(model.snapshot())
        return store.path.read_text(), store.journal_path.read_text().splitlines()


BASE, JOURNAL = saved_state()
HUGE_GENERATION = json.dumps({**json.loads(BASE), "generation": 1e400}).replace("Infinity", "1e400")


@FAST
@given(st.one_of(mutated(BASE), st.binary(max_size=30).map(lambda b: b.decode("latin-1"))),
       st.one_of(st.none(), st.lists(st.one_of(*(mutated(line) for line in JOURNAL), st.text(max_size=10)),
                                     max_size=2)))
@example(HUGE_GENERATION, None)  # was OverflowError: cannot convert float infinity to integer
def test_any_state_file_is_a_snapshot_or_an_error_naming_the_file(tmp_path_factory: pytest.TempPathFactory,
                                                                  base: str, journal: list[str] | None) -> None:
    store = JsonRuntimeStateStore.in_dir(tmp_path_factory.mktemp("state"))
    store.path.write_bytes(base.encode("utf-8", "surrogateescape"))
    if journal is not None:
        store.journal_path.write_text("".join(f"{line}\n" for line in journal))
    error = raised(store.load, StateStoreError)
    assert error is None or store.path.name.removesuffix(".json") in str(error)


# ---------------------------------------------------------------------------------------------- simulated GPUs
spec_text = st.one_of(st.text(alphabet="0123456789xX:,@/=.migGKMPTiA1g0b +-", max_size=30), st.text(max_size=16),
                      st.from_regex(r"[0-9]{0,3}x[0-9]{1,30}(Gi|Pi|P)?(:A100(:mig(=[0-9a-z.]+@[0-9]{1,30})?)?)?",
                                    fullmatch=True))
gpu_file_value = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 10**30), st.text(max_size=6),
              st.sampled_from(["16Gi", "2P", "A100", "enabled", "Unhealthy", "3g.40gb"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(
        ["model", "memory", "count", "uuid", "health", "migMode", "migInstances", "profile", "start", "x"]), inner,
        max_size=4)), max_leaves=8)


@FAST
@given(spec_text)
@example("2P")  # 2·10^15 bytes per GPU: above 1 PiB, now refused by the domain's Gpu
@example("1x80Gi:A100:mig=3g.40gb@" + "9" * 5000)
def test_any_simulated_gpu_spec_is_an_inventory_or_a_spec_error(text: str) -> None:
    error = raised(lambda: build_inventory(parse_spec(text), seed="s"), SpecError)
    assert error is None or str(error).startswith("simulated GPU")


@FAST
@given(st.one_of(st.dictionaries(st.sampled_from(["gpus", "x"]), gpu_file_value, max_size=2).map(yaml.safe_dump),
                 st.binary(max_size=20).map(lambda b: b.decode("latin-1"))), st.booleans())
@example("gpus: [{memory: 16Gi}]\n# \xff\n", True)  # not UTF-8: was UnicodeDecodeError
def test_any_simulated_gpu_file_is_an_inventory_or_a_spec_error(tmp_path_factory: pytest.TempPathFactory, text: str,
                                                                latin1: bool) -> None:
    path = tmp_path_factory.mktemp("gpus") / "gpus.yaml"
    path.write_bytes(text.encode("latin-1", "replace") if latin1 else text.encode())
    error = raised(lambda: build_inventory(load_file(path), seed="s"), SpecError)
    assert error is None or str(path) in str(error)


# ---------------------------------------------------------------------------------------------- flags
flag_value = st.one_of(st.text(max_size=10).filter(lambda t: not t.startswith("-")),
                       st.sampled_from(["0", "-1", "nan", "inf", "1e309", "1e300", "5", "0.5", ":8080", "[::1]:1",
                                        "h:99999", "never", "static", "extender", "fgd", "DEBUG", "x"]))
SCHEDULER_FLAGS = ("--mode", "--listen", "--policy", "--lease-namespace", "--lease-name", "--identity",
                   "--mig-strategy", "--admission-hold", "--resync-seconds", "--tick-seconds", "--assumed-ttl-seconds",
                   "--watch-timeout-seconds", "--lease-duration", "--renew-deadline", "--retry-period", "--tie-break",
                   "--log-level")
PERIODS = ("resync_seconds", "tick_seconds", "assumed_ttl_seconds", "watch_timeout_seconds", "lease_duration",
           "renew_deadline", "retry_period")
RUNTIME_FLAGS = ("--backend", "--simulated-gpus", "--initial-state", "--recovery-quiet-period", "--dev-root",
                 "--hami-core-library", "--mig-strategy", "--log-level")


def names_a_flag(message: str, flags: dict[str, str]) -> bool:
    spellings = [s for flag in flags for s in (flag, flag[2:], flag[2:].replace("-", "_"))]
    return any(s in message for s in spellings) or "leader timings" in message or "port" in message


def run_main(main: Any, argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


@FAST
@given(st.dictionaries(st.sampled_from(SCHEDULER_FLAGS), flag_value, max_size=3))
@example({"--resync-seconds": "inf"})  # accepted before: a wait of inf seconds raises OverflowError later
@example({"--lease-duration": "1e300", "--renew-deadline": "10", "--retry-period": "2"})
def test_any_scheduler_flags_are_settings_or_one_error_line(flags: dict[str, str]) -> None:
    argv = [x for flag, value in {"--mode": "extender", "--listen": "127.0.0.1:0", **flags}.items()
            for x in (flag, value)]
    built: list[SchedulerSettings] = []
    error = raised(lambda: built.append(scheduler_cli.settings_from_args(scheduler_cli.build_parser().parse_args(
        argv))), (UsageError, SchedulerSettingsError, DomainError))
    for valid in built:  # every period usable by a wait and a Lease
        assert all(0 < getattr(valid, name) <= MAX_SECONDS for name in PERIODS), valid
    if error is not None:
        assert names_a_flag(str(error), flags), error
        code, stderr = run_main(scheduler_cli.main, argv)  # main stops at the same error: nothing starts
        assert code == 2
        assert stderr.count("\n") == 1
        assert stderr.startswith("ljrk scheduler: error: ")


@FAST
@given(st.dictionaries(st.sampled_from(RUNTIME_FLAGS), flag_value, max_size=3))
@example({"--recovery-quiet-period": "nan"})  # accepted before: a GPU that never recovers, silently
def test_any_runtime_flags_are_settings_or_one_error_line(flags: dict[str, str]) -> None:
    argv = [x for flag, value in {"--socket": "/tmp/ljrk-property.sock", **flags}.items() for x in (flag, value)]
    built: list[RuntimeSettings] = []
    error = raised(lambda: built.append(runtime_cli.settings_from_args(runtime_cli.build_parser().parse_args(argv))),
                   (UsageError, RuntimeSettingsError))
    for valid in built:
        assert valid.recovery_quiet_period_s is None or 0 <= valid.recovery_quiet_period_s < math.inf
    if error is not None:
        assert names_a_flag(str(error), flags), error
        code, stderr = run_main(runtime_cli.main, argv)
        assert code == 2
        assert stderr.count("\n") == 1
        assert stderr.startswith("ljrk runtime: error: ")


@pytest.mark.parametrize("value", ["inf", "1e300", "nan"])
@pytest.mark.parametrize("flag", ["--resync-seconds", "--tick-seconds", "--watch-timeout-seconds", "--lease-duration"])
def test_an_endless_or_huge_scheduler_period_is_refused_with_the_flag_named(flag: str, value: str) -> None:
    code, stderr = run_main(scheduler_cli.main, ["--mode", "extender", "--listen", "127.0.0.1:0", flag, value])
    assert code == 2
    assert flag[2:].replace("-", "_") in stderr


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_quiet_period_that_is_no_finite_number_is_refused(value: str) -> None:
    code, stderr = run_main(runtime_cli.main, ["--socket", "/tmp/ljrk-property.sock", "--recovery-quiet-period", value])
    assert code == 2
    assert "--recovery-quiet-period" in stderr
