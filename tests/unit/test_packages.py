"""The five top-level packages resolve inside this repository's ``src/``.

PyPI has distributions named ``entrypoints``, ``adapters`` and ``domain``; if one were installed and shadowed
ours, every import would silently go elsewhere. This test fails in that case.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.parametrize("name", ["domain", "ports", "services", "adapters", "entrypoints"])
def test_top_level_package_resolves_inside_src(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__file__ is not None
    assert Path(module.__file__).resolve().parent == SRC / name
