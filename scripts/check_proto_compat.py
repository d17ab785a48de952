#!/usr/bin/env python3
"""Compatibility check for our own protos: "only add, never change".

Compares the current descriptors of ``proto/ljrk/**`` (built with the bundled protoc, see ``gen_proto.py``)
with the committed baseline ``proto/baseline/runtime_v1.binpb`` (a serialized ``FileDescriptorSet``) and fails on
any change a deployed peer could notice on the wire or in generated code:

* a removed file, or a changed ``package``;
* a removed message or enum; a removed field (by number); a field that changed its name, number (renumbered:
  the same name now has another number), type (scalar kind or message/enum type name), label (singular,
  repeated) or proto3 ``optional`` presence;
* a removed or renamed enum value (by number);
* a removed service or RPC; an RPC whose request or response type, or client/server streaming, changed.

Anything new (files, messages, fields, enum values, services, RPCs) passes. After adding to the contract on
purpose, record the new baseline with ``--write-baseline`` (it refuses while the check fails).

Usage: ``python scripts/check_proto_compat.py [--baseline FILE] [--current FILE] [--write-baseline]``.
Exit codes: 0 compatible (or baseline written), 1 incompatible, 2 usage error or protoc failure.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

from google.protobuf import descriptor_pb2

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_proto  # sibling script; this directory is not a package

BASELINE = gen_proto.REPO / "proto" / "baseline" / "runtime_v1.binpb"

_Field = descriptor_pb2.FieldDescriptorProto
_LABELS = {_Field.LABEL_OPTIONAL: "singular", _Field.LABEL_REPEATED: "repeated", _Field.LABEL_REQUIRED: "required"}


def _messages(
    prefix: str, messages: Iterator[descriptor_pb2.DescriptorProto] | list[descriptor_pb2.DescriptorProto]
) -> Iterator[tuple[str, descriptor_pb2.DescriptorProto]]:
    for message in messages:
        name = f"{prefix}.{message.name}"
        yield name, message
        yield from _messages(name, list(message.nested_type))


def _enums(file: descriptor_pb2.FileDescriptorProto) -> dict[str, descriptor_pb2.EnumDescriptorProto]:
    found = {f"{file.package}.{e.name}": e for e in file.enum_type}
    for name, message in _messages(file.package, list(file.message_type)):
        found.update({f"{name}.{e.name}": e for e in message.enum_type})
    return found


def _field_type(field: descriptor_pb2.FieldDescriptorProto) -> str:
    kind = _Field.Type.Name(field.type).removeprefix("TYPE_").lower()
    return f"{kind} {field.type_name}" if field.type_name else kind


def _label(field: descriptor_pb2.FieldDescriptorProto) -> str:
    label = _LABELS.get(field.label, str(field.label))
    return f"optional {label}" if field.proto3_optional else label


def _compare_message(name: str, old: descriptor_pb2.DescriptorProto, new: descriptor_pb2.DescriptorProto) -> list[str]:
    problems = []
    new_by_number = {f.number: f for f in new.field}
    new_by_name = {f.name: f for f in new.field}
    for field in old.field:
        current = new_by_number.get(field.number)
        moved = new_by_name.get(field.name)
        if moved is not None and moved.number != field.number:
            problems.append(f"field {name}.{field.name} renumbered {field.number} -> {moved.number}")
            continue
        if current is None:
            problems.append(f"field {name}.{field.name} = {field.number} removed")
            continue
        if current.name != field.name:
            problems.append(f"field {name} number {field.number} renamed {field.name} -> {current.name}")
        if _field_type(current) != _field_type(field):
            problems.append(
                f"field {name}.{field.name} = {field.number} changed type {_field_type(field)} -> "
                f"{_field_type(current)}"
            )
        if _label(current) != _label(field):
            problems.append(
                f"field {name}.{field.name} = {field.number} changed label {_label(field)} -> {_label(current)}"
            )
    return problems


def _compare_enum(
    name: str, old: descriptor_pb2.EnumDescriptorProto, new: descriptor_pb2.EnumDescriptorProto
) -> list[str]:
    problems = []
    new_values = {v.number: v.name for v in new.value}
    for value in old.value:
        if value.number not in new_values:
            problems.append(f"enum value {name}.{value.name} = {value.number} removed")
        elif new_values[value.number] != value.name:
            renamed = new_values[value.number]
            problems.append(f"enum value {name} number {value.number} renamed {value.name} -> {renamed}")
    return problems


def _compare_service(
    name: str, old: descriptor_pb2.ServiceDescriptorProto, new: descriptor_pb2.ServiceDescriptorProto
) -> list[str]:
    problems = []
    methods = {m.name: m for m in new.method}
    for method in old.method:
        current = methods.get(method.name)
        if current is None:
            problems.append(f"rpc {name}.{method.name} removed")
            continue
        for part, before, after in (
            ("request type", method.input_type, current.input_type),
            ("response type", method.output_type, current.output_type),
            ("client streaming", method.client_streaming, current.client_streaming),
            ("server streaming", method.server_streaming, current.server_streaming),
        ):
            if before != after:
                problems.append(f"rpc {name}.{method.name} changed {part} {before} -> {after}")
    return problems


def compare(baseline: descriptor_pb2.FileDescriptorSet, current: descriptor_pb2.FileDescriptorSet) -> list[str]:
    """Every incompatible change from ``baseline`` to ``current`` (module docstring), one line each, in a stable
    order; empty when ``current`` only adds."""
    problems: list[str] = []
    files = {f.name: f for f in current.file}
    for old in baseline.file:
        new = files.get(old.name)
        if new is None:
            problems.append(f"file {old.name} removed")
            continue
        if new.package != old.package:
            problems.append(f"file {old.name} changed package {old.package} -> {new.package}")
            continue
        new_messages = dict(_messages(new.package, list(new.message_type)))
        for name, message in _messages(old.package, list(old.message_type)):
            if name not in new_messages:
                problems.append(f"message {name} removed")
            else:
                problems.extend(_compare_message(name, message, new_messages[name]))
        new_enums = _enums(new)
        for name, enum in _enums(old).items():
            if name not in new_enums:
                problems.append(f"enum {name} removed")
            else:
                problems.extend(_compare_enum(name, enum, new_enums[name]))
        new_services = {f"{new.package}.{s.name}": s for s in new.service}
        for service in old.service:
            name = f"{old.package}.{service.name}"
            if name not in new_services:
                problems.append(f"service {name} removed")
            else:
                problems.extend(_compare_service(name, service, new_services[name]))
    return problems


def load(path: Path) -> descriptor_pb2.FileDescriptorSet:
    """Parse a serialized FileDescriptorSet file."""
    result = descriptor_pb2.FileDescriptorSet()
    result.ParseFromString(path.read_bytes())
    return result


def current_set() -> descriptor_pb2.FileDescriptorSet:
    """Descriptors of our own protos (``gen_proto.OWN_PROTOS``) as they are now. Raises GeneratorError."""
    result = descriptor_pb2.FileDescriptorSet()
    result.ParseFromString(gen_proto.descriptor_set())
    return result


def main(argv: list[str] | None = None) -> int:
    """Check (default) or ``--write-baseline``; exit codes in the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, default=BASELINE, help=f"baseline set (default: {BASELINE.name})")
    parser.add_argument("--current", type=Path, help="a FileDescriptorSet to check instead of building one")
    parser.add_argument("--write-baseline", action="store_true", help="record the current protos as the baseline")
    args = parser.parse_args(argv)
    try:
        current = load(args.current) if args.current else current_set()
    except (gen_proto.GeneratorError, OSError) as error:
        print(f"check_proto_compat: error: {error}", file=sys.stderr)
        return 2
    problems = compare(load(args.baseline), current) if args.baseline.exists() else []
    if not args.baseline.exists() and not args.write_baseline:
        print(f"check_proto_compat: error: no baseline at {args.baseline}; create it with --write-baseline",
              file=sys.stderr)
        return 2
    if problems:
        print("check_proto_compat: incompatible proto changes (policy: only add, never change):", file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        return 1
    if args.write_baseline:
        args.baseline.parent.mkdir(parents=True, exist_ok=True)
        args.baseline.write_bytes(current.SerializeToString(deterministic=True))
        print(f"check_proto_compat: wrote {args.baseline}")
        return 0
    print("check_proto_compat: compatible with the baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
