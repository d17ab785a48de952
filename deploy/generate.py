#!/usr/bin/env python3
"""Propagate ``deploy/protocol.yaml`` into every component's manifests and stamp the config checksums.

``python3 deploy/generate.py`` rewrites, in place and only where something changed:

1. the ``protocol.yaml`` key of every ``deploy/<component>/02-configmap.yaml``: a verbatim copy of
   ``deploy/protocol.yaml`` (the one file a platform engineer edits), so every component loads the same constants;
2. every manifest line ending in ``# protocol: KEY`` (``KEY`` as in protocol.yaml, dotted for nested keys, e.g.
   ``node-label``, ``scheduler-name``): its value becomes the protocol's value — the DaemonSets' node-affinity
   label key and the KubeSchedulerConfiguration's ``schedulerName`` follow the protocol this way;
3. the ``lj-runtimekit.io/config-checksum`` annotation of each component's pod template: the SHA-256 of its
   ``02-configmap.yaml``, so any change of the configuration (protocol or settings) rolls that component's pods on
   the next apply.

``--check`` writes nothing and exits 1 listing the files that are not current (``deploy-all.sh render`` and the
tests run it). ``--adopt`` (``deploy-all.sh deploy`` runs it) first looks for the documented hand edit: a
component's ``02-configmap.yaml`` whose SHA-256 differs from the checksum its workload was stamped with is edited;
if edited copies changed the protocol, they must agree with each other (else exit 1 naming the differing keys, as
the documentation warns inconsistent copies break scheduling and monitoring) and that protocol becomes
``protocol.yaml`` and every copy; then it generates as usual, so exactly the components whose ConfigMap changed get
a new checksum and roll. ``--root DIR`` works on another copy of ``deploy/``. Standard library only (no PyYAML):
protocol.yaml is read with a small parser for nested ``key: scalar`` mappings, which is all it holds; its keys may
be nested (``resources:`` / ``  gpu: …``) or flat and dotted (``resources.gpu: …``), and one given twice, or both
ways, is an error (the components refuse such a file too).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

COMPONENTS = ("runtime", "deviceplugin", "exporter", "scheduler", "controller")
"""Component folders under deploy/, each with 02-configmap.yaml and one workload manifest."""

WORKLOAD_FILES = ("03-daemonset.yaml", "03-deployment.yaml")
CONFIGMAP_FILE = "02-configmap.yaml"
PROTOCOL_KEY_LINE = "  protocol.yaml: |"
"""The ConfigMap data key that holds the protocol (``ljrk protocol check`` finds protocols by this key)."""
BLOCK_INDENT = "    "
CHECKSUM_LINE = re.compile(r'^(?P<head>\s*lj-runtimekit\.io/config-checksum: )"(?P<sum>[0-9a-f]*)"\s*$', re.M)
MARKER_LINE = re.compile(
    r"^(?P<head>.*?:\s+)(?P<value>\"[^\"]*\"|[^\s#\"]+)(?P<tail>\s+#\s*protocol:\s*(?P<key>[\w.-]+)\s*)$"
)


class GenerateError(Exception):
    """Malformed input; the message names the file."""


def _unquote(text: str) -> str:
    return text[1:-1] if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'" else text


def parse_protocol(text: str) -> dict[str, str]:
    """Flatten protocol.yaml's nested ``key: scalar`` mappings into ``{dotted.key: value}`` (quotes stripped);
    flat dotted keys (``resources.gpu: …``) land on the same names. Raises :class:`GenerateError` for a line that
    is not ``key: value`` and for a key given twice (the same way or both ways)."""
    values: dict[str, str] = {}
    lines: dict[str, int] = {}
    stack: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, sep, value = line.strip().partition(":")
        if not sep:
            raise GenerateError(f"protocol.yaml line {number}: not 'key: value': {raw!r}")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = _unquote(key.strip())
        dotted = ".".join([*(name for _, name in stack), key])
        if dotted in lines:
            raise GenerateError(f"protocol.yaml line {number}: key {dotted!r} is already given on line "
                                f"{lines[dotted]}; write each key once (flat or nested, not both)")
        lines[dotted] = number
        value = value.strip()
        if value:
            values[dotted] = _unquote(value)
        else:
            stack.append((indent, key))
    return values


def embed_protocol(configmap: str, protocol: str, where: str) -> str:
    """``configmap`` with the block under ``  protocol.yaml: |`` replaced by ``protocol`` indented four spaces."""
    lines = configmap.splitlines(keepends=True)
    start, end = _protocol_block(configmap, where)
    if not protocol.endswith("\n") or protocol.endswith("\n\n"):
        raise GenerateError("deploy/protocol.yaml must end with exactly one newline (a YAML block keeps one)")
    block = [(BLOCK_INDENT + line if line.strip() else "\n") for line in protocol.splitlines(keepends=True)]
    return "".join([*lines[: start + 1], *block, *lines[end:]])


def _protocol_block(configmap: str, where: str) -> tuple[int, int]:
    """Line range ``[start, end)`` of the block under ``  protocol.yaml: |`` (``start`` is the key line)."""
    lines = configmap.splitlines(keepends=True)
    try:
        start = next(i for i, line in enumerate(lines) if line.rstrip("\n") == PROTOCOL_KEY_LINE)
    except StopIteration:
        raise GenerateError(f"{where}: no line {PROTOCOL_KEY_LINE!r} under data:") from None
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end].startswith(BLOCK_INDENT)):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():  # blank lines before the next key are not ours
        end -= 1
    return start, end


def extract_protocol(configmap: str, where: str) -> str:
    """The protocol.yaml text a ConfigMap file holds (its block, de-indented)."""
    start, end = _protocol_block(configmap, where)
    lines = configmap.splitlines(keepends=True)[start + 1:end]
    return "".join(line[len(BLOCK_INDENT):] if line.startswith(BLOCK_INDENT) else "\n" for line in lines)


def _differing(a: dict[str, str], b: dict[str, str]) -> list[str]:
    return sorted(k for k in {*a, *b} if a.get(k) != b.get(k))


def hand_edit(root: Path) -> tuple[str, str] | None:
    """The protocol edited by hand in component ConfigMaps since the last run, to carry everywhere: ``(its text,
    the files edited)``; None when no copy's protocol was edited (settings-only edits included).

    A ConfigMap counts as edited when its SHA-256 differs from the config checksum stamped in its workload by the
    last run. Raises :class:`GenerateError` naming the differing keys when edited copies disagree with each other,
    or when ``protocol.yaml`` was edited too (the unedited copies no longer match it) and disagrees with them."""
    base = parse_protocol((root / "protocol.yaml").read_text())
    edits: dict[str, tuple[str, dict[str, str]]] = {}
    unedited: dict[str, dict[str, str]] = {}
    for component in COMPONENTS:
        folder = root / component
        configmap_path = folder / CONFIGMAP_FILE
        configmap = configmap_path.read_text()
        text = extract_protocol(configmap, str(configmap_path))
        try:
            parsed = parse_protocol(text)
        except GenerateError as error:
            raise GenerateError(f"{configmap_path}: {error}") from None
        workload = next((folder / n for n in WORKLOAD_FILES if (folder / n).is_file()), None)
        stamp = None if workload is None else CHECKSUM_LINE.search(workload.read_text())
        current = hashlib.sha256(configmap.encode()).hexdigest()
        if stamp is not None and stamp["sum"] == current:
            unedited[component] = parsed
        elif parsed != base:
            edits[str(configmap_path.relative_to(root.parent))] = (text, parsed)
    if not edits:
        return None
    (first, (text, parsed)), *others = edits.items()
    for name, (_, other) in others:
        keys = _differing(parsed, other)
        if keys:
            raise GenerateError(f"hand-edited protocol copies disagree: {first} and {name} differ in "
                                f"{', '.join(keys)}; make every copy the same (or edit deploy/protocol.yaml "
                                "alone and run python3 deploy/generate.py)")
    stale = {c: p for c, p in unedited.items() if p != base}
    if stale:
        keys = _differing(parsed, base)
        raise GenerateError(f"deploy/protocol.yaml and the hand-edited copy {first} were both changed (keys "
                            f"{', '.join(keys)}); keep one of them")
    return text, ", ".join(edits)


def apply_markers(text: str, protocol: dict[str, str], where: str) -> str:
    """Every ``value  # protocol: KEY`` line gets the protocol's value for KEY."""
    out = []
    for line in text.splitlines(keepends=True):
        match = MARKER_LINE.match(line.rstrip("\n"))
        if match is not None:
            key = match["key"]
            if key not in protocol:
                raise GenerateError(f"{where}: '# protocol: {key}' names no key of protocol.yaml")
            value = protocol[key]
            quoted = f'"{value}"' if match["value"].startswith('"') else value
            line = f"{match['head']}{quoted}{match['tail']}" + ("\n" if line.endswith("\n") else "")
        out.append(line)
    return "".join(out)


def stamp_checksum(text: str, checksum: str, where: str) -> str:
    """The ``lj-runtimekit.io/config-checksum`` line set to ``checksum`` (exactly one such line)."""
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if CHECKSUM_LINE.match(line.rstrip("\n"))]
    if len(hits) != 1:
        raise GenerateError(f"{where}: expected one lj-runtimekit.io/config-checksum annotation, found {len(hits)}")
    head = CHECKSUM_LINE.match(lines[hits[0]].rstrip("\n"))
    assert head is not None
    lines[hits[0]] = f'{head["head"]}"{checksum}"\n'
    return "".join(lines)


def generate(root: Path) -> dict[Path, str]:
    """The new text of every file that differs from what is on disk under ``root`` (a deploy/ folder)."""
    protocol_text = (root / "protocol.yaml").read_text()
    protocol = parse_protocol(protocol_text)
    changed: dict[Path, str] = {}
    for component in COMPONENTS:
        folder = root / component
        configmap_path = folder / CONFIGMAP_FILE
        configmap = configmap_path.read_text()
        new_configmap = apply_markers(embed_protocol(configmap, protocol_text, str(configmap_path)), protocol,
                                      str(configmap_path))
        if new_configmap != configmap:
            changed[configmap_path] = new_configmap
        checksum = hashlib.sha256(new_configmap.encode()).hexdigest()
        workloads = [folder / name for name in WORKLOAD_FILES if (folder / name).is_file()]
        if len(workloads) != 1:
            raise GenerateError(f"{folder}: expected one of {WORKLOAD_FILES}")
        for other in sorted(folder.glob("*.yaml")):
            if other in (configmap_path, workloads[0]):
                continue
            text = other.read_text()
            new = apply_markers(text, protocol, str(other))
            if new != text:
                changed[other] = new
        text = workloads[0].read_text()
        new = stamp_checksum(apply_markers(text, protocol, str(workloads[0])), checksum, str(workloads[0]))
        if new != text:
            changed[workloads[0]] = new
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy/generate.py", description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if any file is not current")
    parser.add_argument("--adopt", action="store_true",
                        help="first carry a protocol edited by hand in component ConfigMaps to protocol.yaml and "
                             "every component (exit 1 naming the keys when the edited copies disagree)")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent,
                        help="the deploy/ folder (default: the one holding this script)")
    args = parser.parse_args(argv)
    if args.check and args.adopt:
        parser.error("--check and --adopt exclude each other")
    try:
        edit = hand_edit(args.root) if args.adopt else None
        if edit is not None:
            (args.root / "protocol.yaml").write_text(edit[0])
            print(f"carried the protocol edited in {edit[1]} to deploy/protocol.yaml and every component")
        changed = generate(args.root)
    except GenerateError as error:
        print(f"deploy/generate.py: error: {error}", file=sys.stderr)
        return 1 if args.adopt else 2
    except OSError as error:
        print(f"deploy/generate.py: error: {error}", file=sys.stderr)
        return 2
    if args.check:
        for path in sorted(changed):
            print(f"deploy/generate.py: not current: {path} (run: python3 deploy/generate.py)", file=sys.stderr)
        return 1 if changed else 0
    for path, text in sorted(changed.items()):
        path.write_text(text)
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
