#!/usr/bin/env python3
"""Generate the committed Python code for every ``.proto`` under ``proto/`` into ``src/adapters/grpc/_pb/``.

Usage: ``python scripts/gen_proto.py`` (regenerate in place; ``make proto``) or ``python scripts/gen_proto.py
--check`` (regenerate into a temporary directory and compare byte for byte with the committed tree; exit 1 and
list the differing files on drift; ``make proto-check``).

Pipeline: assert the pinned generator versions, run
the bundled protoc of ``grpcio-tools`` (no system binary) with ``-I proto`` and the outputs ``--python_out``,
``--grpc_python_out``, ``--mypy_out`` and ``--mypy_grpc_out=only_sync`` (we serve and call synchronously;
plugins passed by absolute path, so PATH does not matter), rewrite the absolute imports of our proto packages
(``ljrk.…``, ``kubelet.…``) to ``adapters.grpc._pb.…``, write ``__init__.py`` files, then swap the tree into
place. protoc's output is deterministic, so two runs give byte-identical files.

The generated ``_pb2.py`` checks at import that the protobuf runtime is at least the protoc version below, and
``_pb2_grpc.py`` that grpcio is at least the grpcio-tools version: pyproject.toml's runtime floors follow these
pins and move together with them.

Exit codes: 0 success (or no drift), 1 drift, 2 wrong generator versions or protoc failure.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROTO_ROOT = REPO / "proto"
OUTPUT = REPO / "src" / "adapters" / "grpc" / "_pb"
TARGET_PACKAGE = "adapters.grpc._pb"

PINS = {"grpcio-tools": "1.85.1", "mypy-protobuf": "5.1.0"}
"""Generator versions; the committed output was produced with exactly these."""

PROTO_PACKAGES = ("ljrk", "kubelet")
"""Top-level packages of the generated modules, which import each other absolutely. The vendored kubelet files
(v1.37.2) import nothing; the gogoproto import of older copies is gone, and with it ``github.com/gogo``."""

OWN_PROTOS = ("ljrk/runtime/v1/runtime.proto", "ljrk/config/v1/config_service.proto")
"""Our own contract files (the compatibility baseline covers these; the kubelet files are vendored)."""

ROOT_INIT = '"""Generated protobuf and gRPC modules (scripts/gen_proto.py). Do not edit."""\n'


class GeneratorError(Exception):
    """Wrong generator versions or a protoc failure; the message says which."""


def check_pins() -> None:
    """Raise :class:`GeneratorError` unless the installed generators are exactly :data:`PINS`."""
    wrong = []
    for name, wanted in PINS.items():
        try:
            found = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found = "not installed"
        if found != wanted:
            wrong.append(f"{name} {found} (need {wanted})")
    if wrong:
        raise GeneratorError(
            "generator version mismatch: " + ", ".join(wrong) + "; install lj-runtimekit[dev] into the venv"
        )


def proto_files() -> list[str]:
    """Every .proto under proto/ except the baseline directory, as sorted paths relative to proto/."""
    files = sorted(
        str(path.relative_to(PROTO_ROOT)) for path in PROTO_ROOT.rglob("*.proto") if "baseline" not in path.parts
    )
    if not files:
        raise GeneratorError(f"no .proto files under {PROTO_ROOT}")
    return files


def _plugin(name: str) -> str:
    path = Path(sys.executable).parent / name
    if not path.exists():
        raise GeneratorError(f"protoc plugin {name} not found next to {sys.executable}")
    return f"--plugin={name}={path}"


def run_protoc(args: list[str]) -> None:
    """Run the bundled protoc (``python -m grpc_tools.protoc`` adds the well-known types' include path) with
    ``-I proto`` and ``args``. Raises :class:`GeneratorError` with protoc's stderr on failure."""
    command = [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_ROOT}", *args]
    result = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO)
    if result.returncode != 0:
        raise GeneratorError(f"protoc failed ({result.returncode}): {result.stderr.strip()}")


_PACKAGES = "|".join(PROTO_PACKAGES)
_IMPORT_LINE = re.compile(rf"^(from|import) ({_PACKAGES})(\.| )", re.MULTILINE)
_MODULE_NAME = re.compile(rf"(BuildTopDescriptorsAndMessages\(DESCRIPTOR, ')({_PACKAGES})\.")


def rewrite(path: Path) -> None:
    """Point absolute imports of our proto packages at :data:`TARGET_PACKAGE`.

    Only ``from/import`` lines at the start of a line change, plus (in ``_pb2.py``) the module name given to the
    descriptor builder, so classes get the right ``__module__``. The serialized descriptor bytes, the gRPC
    method paths such as ``'/ljrk.runtime.v1.Runtime/Allocate'`` and docstrings keep their text. mypy-protobuf
    5 refers to other modules only through ``from … import … as _x`` aliases, so the stubs need nothing more.
    """
    text = _IMPORT_LINE.sub(rf"\1 {TARGET_PACKAGE}.\2\3", path.read_text())
    if path.suffix == ".py":
        text = _MODULE_NAME.sub(rf"\1{TARGET_PACKAGE}.\2.", text)
    path.write_text(text)


def generate(destination: Path) -> None:
    """Generate the whole tree into ``destination`` (created; must not exist). Raises :class:`GeneratorError`."""
    check_pins()
    destination.mkdir(parents=True)
    out = str(destination)
    run_protoc(
        [
            _plugin("protoc-gen-mypy"),
            _plugin("protoc-gen-mypy_grpc"),
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            f"--mypy_out={out}",
            f"--mypy_grpc_out=only_sync:{out}",
            *proto_files(),
        ]
    )
    for path in sorted(destination.rglob("*")):
        if path.suffix in (".py", ".pyi"):
            rewrite(path)
    directories = sorted({p.parent for p in destination.rglob("*.py")} | {destination})
    for directory in directories:
        current = directory
        while current != destination.parent:
            init = current / "__init__.py"
            if not init.exists():
                init.write_text(ROOT_INIT if current == destination else "")
            current = current.parent


def descriptor_set(paths: tuple[str, ...] = OWN_PROTOS) -> bytes:
    """The serialized FileDescriptorSet of ``paths`` (relative to proto/), without imports or source info."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "set.binpb"
        run_protoc([f"--descriptor_set_out={target}", *paths])
        return target.read_bytes()


def diff_trees(expected: Path, actual: Path) -> list[str]:
    """Relative paths that differ between two trees (missing on either side, or different bytes)."""
    def files(root: Path) -> set[str]:
        return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}

    wanted, have = files(expected), files(actual)
    differing = sorted(wanted ^ have)
    differing += sorted(
        name for name in wanted & have if not filecmp.cmp(expected / name, actual / name, shallow=False)
    )
    return differing


def main(argv: list[str] | None = None) -> int:
    """Regenerate (default) or ``--check`` for drift; see the module docstring for exit codes."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed tree, change nothing")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "_pb"
        try:
            generate(fresh)
        except GeneratorError as error:
            print(f"gen_proto: error: {error}", file=sys.stderr)
            return 2
        if args.check:
            drift = diff_trees(fresh, OUTPUT) if OUTPUT.exists() else ["<src/adapters/grpc/_pb missing>"]
            if drift:
                print("gen_proto: generated code is out of date; run `make proto` and commit:", file=sys.stderr)
                for name in drift:
                    print(f"  {name}", file=sys.stderr)
                return 1
            print("gen_proto: generated code is up to date")
            return 0
        if OUTPUT.exists():
            shutil.rmtree(OUTPUT)
        shutil.copytree(fresh, OUTPUT)
    print(f"gen_proto: wrote {OUTPUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
