"""protocol.yaml in its two spellings: nested (``resources:`` / ``gpu: …``) and flat dotted (``resources.gpu: …``).

Covers: the documentation's flat example parses as written; every key of the protocol gives the same constants
flat, nested or mixed; a key given both ways, or twice, is refused with the key named; a table of bad inputs,
each tried nested and flat, gets the same error naming the key and the value; a ConfigMap holding the flat form
is found by ``find_protocols`` and agrees with the nested one in ``ljrk protocol check``; a ConfigMap whose
``protocol.yaml`` is a mapping rather than a string is refused with the fix named.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import yaml

from adapters.protocolfile import (
    ProtocolFileError,
    dump_protocol,
    find_protocols,
    known_keys,
    load_protocol,
    parse_protocol,
    protocol_items,
)
from domain.kube.protocol import AnnotationKeys, ProtocolConstants, ResourceNames
from entrypoints.cli import main as ljrk

REPO = Path(__file__).resolve().parents[2]

DOCUMENTED = """\
resources.memory: "alibabacloud.com/gpu-memory.percentage"
resources.core: "alibabacloud.com/gpu-core.percentage"
resources.gpu: "alibabacloud.com/gpu"
"""
"""The example of the product documentation (section 3), verbatim."""

CUSTOM = ProtocolConstants(
    resources=ResourceNames(gpu="example.com/gpu", core="example.com/vcore", memory="example.com/vmem"),
    memory_unit="512Mi",
    node_label="example_enable",
    scheduler_name="example-scheduler",
    annotations=AnnotationKeys(**{f.name: f"example.com/{f.name}" for f in attrs.fields(AnnotationKeys)}),
    inventory_stale_seconds=30,
)
"""A protocol in which every constant differs from the default."""


def flat_text(protocol: ProtocolConstants) -> str:
    return yaml.safe_dump(protocol_items(protocol), sort_keys=False)


def error_of(text: str) -> str:
    with pytest.raises(ProtocolFileError) as error:
        parse_protocol(text, source="p.yaml")
    return str(error.value)


def test_the_documented_flat_example_parses_as_written() -> None:
    protocol = parse_protocol(DOCUMENTED)
    assert protocol.resources == ResourceNames(
        gpu="alibabacloud.com/gpu", core="alibabacloud.com/gpu-core.percentage",
        memory="alibabacloud.com/gpu-memory.percentage",
    )
    assert protocol.annotations == AnnotationKeys()


def test_every_key_reads_the_same_flat_nested_and_mixed() -> None:
    assert ProtocolConstants() != CUSTOM
    flat = flat_text(CUSTOM)
    assert sorted(yaml.safe_load(flat)) == known_keys()  # the flat text spells out every key
    assert parse_protocol(flat) == CUSTOM
    assert parse_protocol(dump_protocol(CUSTOM)) == CUSTOM
    mixed = "\n".join([
        "resources:", "  gpu: example.com/gpu",
        "resources.core: example.com/vcore", "resources.memory: example.com/vmem",
        *(f"{key}: {value}" for key, value in protocol_items(CUSTOM).items() if not key.startswith("resources")),
    ])
    assert parse_protocol(mixed) == CUSTOM
    assert parse_protocol(flat).fingerprint() == CUSTOM.fingerprint()


def test_the_committed_protocol_file_flattened_is_the_default() -> None:
    nested = load_protocol(REPO / "deploy" / "protocol.yaml")
    assert parse_protocol(flat_text(nested)) == nested == ProtocolConstants()


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("resources.memory: a.percentage\nresources:\n  memory: b\n", "resources.memory"),
        ("resources: {gpu: example.com/gpu}\nresources.gpu: example.com/gpu\n", "resources.gpu"),  # same value
        ("annotations.pod-plan: x/plan\nannotations:\n  pod-plan: y/plan\n  node-state: y/state\n",
         "annotations.pod-plan"),
    ],
)
def test_a_key_given_both_ways_is_refused_naming_it(text: str, key: str) -> None:
    message = error_of(text)
    assert message.startswith(f"p.yaml: {key}=")
    assert f"flat as '{key}' and nested under '{key.partition('.')[0]}:'" in message
    assert "write it one way only" in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("resources.gpu: a/gpu\nresources.gpu: b/gpu\n", "p.yaml: resources.gpu: given twice (lines 1 and 2)"),
        ("resources:\n  gpu: a/gpu\n  gpu: b/gpu\n", "p.yaml: gpu: given twice (lines 2 and 3)"),
        ("memory-unit: 1Gi\nmemory-unit: 2Gi\n", "p.yaml: memory-unit: given twice (lines 1 and 2)"),
    ],
)
def test_a_key_given_twice_is_refused_not_resolved_to_the_last(text: str, expected: str) -> None:
    assert expected in error_of(text)


BAD_VALUES = [
    # (key, YAML value, expected message after "p.yaml: ")
    ("resources.gpu", '""', "resources.gpu='': must be a non-empty name without whitespace"),
    ("resources.core", "example.com/gpu core", "resources.core='example.com/gpu core': must be a non-empty name"),
    ("resources.memory", "[a, b]", "resources.memory=['a', 'b']: must be a string"),
    ("resources.core", "alibabacloud.com/gpu", "resources.core='alibabacloud.com/gpu': same name as resources.gpu"),
    ("resources.memory", "~", "resources.memory=None: must be a string"),
    ("annotations.pod-plan", "5", "annotations.pod-plan=5: must be a string"),
    ("annotations.pod-plan", "lj-runtimekit.io/gpu-models",
     "annotations.pod-gpu-models='lj-runtimekit.io/gpu-models': same name as annotations.pod-plan"),
    ("annotations.node-state", "yes", "annotations.node-state=True: must be a string (quote it"),
    ("resources.gpuu", "x", "resources.gpuu='x': unknown key; the resources keys are resources.core, resources.gpu"),
    ("annotations.extra", "x", "annotations.extra='x': unknown key; the annotations keys are annotations.node-"),
]


@pytest.mark.parametrize(("key", "value", "expected"), BAD_VALUES)
@pytest.mark.parametrize("form", ["flat", "nested"])
def test_bad_values_get_the_same_error_in_either_form(form: str, key: str, value: str, expected: str) -> None:
    section, _, sub = key.partition(".")
    text = f"{key}: {value}\n" if form == "flat" else f"{section}:\n  {sub}: {value}\n"
    assert error_of(text).startswith(f"p.yaml: {expected}")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("colour: blue\n", "colour='blue': unknown key; known keys: annotations.*, dra.*, enforcement-label, "
                            "inventory-stale-seconds"),
        ("memory-unit.x: 1\n", "memory-unit.x=1: unknown key"),
        ("resources.gpu.x: a\n", "resources.gpu.x='a': unknown key"),
        ("resources: example.com/gpu\n", "resources='example.com/gpu': must be a mapping of core, gpu, memory"),
        ("annotations:\n", "annotations=None: must be a mapping of"),
        ("1: x\n", "key=1: keys must be strings"),
        ("memory-unit: 1.5\n", "memory-unit=1.5: must be a string"),
        ("memory-unit: 0.5Gi\n", "memory-unit='0.5Gi': must be a non-negative integer quantity"),
        ("memory-unit: 1%\nresources.memory: example.com/mem\n",
         "resources.memory='example.com/mem': memory-unit 1% needs a name ending in .percentage"),
        ("inventory-stale-seconds: true\n", "inventory-stale-seconds=True: must be an integer"),
        ("inventory-stale-seconds: 1.5\n", "inventory-stale-seconds=1.5: must be an integer"),
        ("inventory-stale-seconds: 0\n", "inventory-stale-seconds=0: must be > 0"),
        ("version: 2\n", "version=2: this build speaks protocol 1"),
        ("node-label: ''\n", "node-label='': must be a non-empty name"),
        ("scheduler-name: [a]\n", "scheduler-name=['a']: must be a string"),
    ],
)
def test_bad_top_level_input_names_the_key_and_value(text: str, expected: str) -> None:
    assert error_of(text).startswith(f"p.yaml: {expected}")


def test_memory_unit_may_be_a_plain_integer() -> None:
    assert parse_protocol("memory-unit: 1048576\n").memory_unit_bytes == 2**20


def configmap(name: str, protocol: str) -> str:
    body = "\n".join("    " + line for line in protocol.splitlines())
    return f"kind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: kube-system\ndata:\n  protocol.yaml: |\n{body}\n"


def test_flat_and_nested_configmaps_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flat = flat_text(ProtocolConstants())
    text = "---\n".join([configmap("flat", flat), configmap("nested", dump_protocol(ProtocolConstants()))])
    found = find_protocols(text, source="m.yaml")
    assert [protocol for _, protocol in found] == [ProtocolConstants(), ProtocolConstants()]
    (tmp_path / "m.yaml").write_text(text)
    assert ljrk(["protocol", "check", str(tmp_path / "m.yaml")]) == 0
    assert "2 protocol(s) agree" in capsys.readouterr().out


def test_ljrk_protocol_show_reads_the_flat_form(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.yaml").write_text(DOCUMENTED)
    assert ljrk(["protocol", "show", "--protocol", str(tmp_path / "p.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# fingerprint: {parse_protocol(DOCUMENTED).fingerprint()}\n")
    assert "memory: alibabacloud.com/gpu-memory.percentage" in out


def test_a_configmap_whose_protocol_is_a_mapping_names_the_fix() -> None:
    text = "kind: ConfigMap\nmetadata: {name: cm, namespace: kube-system}\ndata:\n  protocol.yaml:\n" + "".join(
        "    " + line + "\n" for line in DOCUMENTED.splitlines())
    with pytest.raises(ProtocolFileError) as error:
        find_protocols(text, source="m.yaml")
    assert str(error.value) == ("m.yaml: ConfigMap kube-system/cm: data.protocol.yaml must be a string, got dict: "
                                "write 'protocol.yaml: |' and the keys indented under it")
