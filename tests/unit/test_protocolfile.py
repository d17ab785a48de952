"""protocol.yaml loading (adapters.protocolfile).

Covers: the committed deploy/protocol.yaml equals the embedded defaults (components can never disagree by
default); round trip dump → parse; overrides of resource names and the memory unit (incl. percentage mode);
unknown keys, bad units, claim-quota label keys that are no qualified label key or equal, wrong versions and
non-mappings are rejected with the file and key named; the
fingerprint changes when any constant changes and is stable otherwise.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.protocolfile import ProtocolFileError, dump_protocol, load_protocol, parse_protocol
from domain.kube.protocol import ProtocolConstants

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "protocol.yaml"


def test_committed_protocol_file_equals_the_embedded_defaults() -> None:
    assert load_protocol(DEPLOY) == ProtocolConstants()
    assert load_protocol(None) == ProtocolConstants()


def test_round_trip_keeps_every_constant() -> None:
    custom = parse_protocol("memory-unit: 512Mi\nresources: {core: example.com/vcore}\nnode-label: gpu_on\n")
    assert parse_protocol(dump_protocol(custom)) == custom
    assert custom.memory_unit_bytes == 512 * 2**20
    assert custom.resources.core == "example.com/vcore"
    assert custom.resources.gpu == ProtocolConstants().resources.gpu


def test_percentage_mode_needs_a_percentage_memory_name() -> None:
    text = "memory-unit: 1%\nresources: {memory: alibabacloud.com/gpu-memory.percentage}\n"
    protocol = parse_protocol(text)
    assert protocol.percent_mode
    assert protocol.memory_unit_bytes is None
    with pytest.raises(ProtocolFileError, match=r"resources\.memory"):
        parse_protocol("memory-unit: 1%\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("colour: blue\n", "colour"),
        ("resources: {gpuu: x}\n", "gpuu"),
        ("annotations: {pod-plan: x, extra: y}\n", "extra"),
        ("memory-unit: 0.5Gi\n", "memory-unit='0.5Gi'"),
        ("version: 2\n", "version=2"),
        ("- a\n- b\n", "must be a mapping"),
        ("a: [\n", "not valid YAML"),
        ("dra: {claim-quota-cores: no-prefix}\n", "dra.claim-quota-cores='no-prefix': must be a qualified label key"),
        ("dra: {claim-quota-memory: Example.com/m}\n", "dra.claim-quota-memory='Example.com/m'"),
        ("dra: {claim-quota-memory: example.com/has space}\n", "dra.claim-quota-memory"),
        ("dra: {claim-quota-cores: a.io/q, claim-quota-memory: a.io/q}\n",
         "dra.claim-quota-memory='a.io/q': same key as dra.claim-quota-cores"),
        ("dra: {claim-migrate: migrate}\n", "dra.claim-migrate='migrate': must be a qualified label key"),
        ("dra: {claim-quota-cores: a.io/q, claim-migrate: a.io/q}\n",
         "dra.claim-migrate='a.io/q': same key as a dra.claim-quota-* key"),
    ],
)
def test_bad_files_name_the_key(text: str, expected: str, tmp_path: Path) -> None:
    path = tmp_path / "protocol.yaml"
    path.write_text(text)
    with pytest.raises(ProtocolFileError) as error:
        load_protocol(path)
    assert str(path) in str(error.value)
    assert expected in str(error.value)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ProtocolFileError, match="cannot read"):
        load_protocol(tmp_path / "absent.yaml")


def test_fingerprint_tracks_every_constant() -> None:
    base = ProtocolConstants()
    assert base.fingerprint() == ProtocolConstants().fingerprint()
    assert len(base.fingerprint()) == 16
    changed = [
        parse_protocol("memory-unit: 2Gi\n"),
        parse_protocol("node-label: other\n"),
        parse_protocol("annotations: {pod-plan: example.com/plan}\n"),
        parse_protocol("resources: {gpu: example.com/gpu}\n"),
    ]
    prints = {p.fingerprint() for p in changed}
    assert base.fingerprint() not in prints
    assert len(prints) == len(changed)


def test_claim_quota_label_keys_load_and_change_the_fingerprint() -> None:
    custom = parse_protocol("dra: {claim-quota-cores: quota.example.com/gpu-cores}\n")
    assert custom.dra.claim_quota_cores == "quota.example.com/gpu-cores"
    assert custom.dra.claim_quota_memory == ProtocolConstants().dra.claim_quota_memory
    assert custom.fingerprint() != ProtocolConstants().fingerprint()


def test_claim_migrate_label_key_loads_and_changes_the_fingerprint() -> None:
    assert ProtocolConstants().dra.claim_migrate == "lj-runtimekit.io/dra-migrate"
    custom = parse_protocol("dra: {claim-migrate: example.com/dra-migrate}\n")
    assert custom.dra.claim_migrate == "example.com/dra-migrate"
    assert custom.fingerprint() != ProtocolConstants().fingerprint()
