"""The bench scripts (``bench/<stem>.py``) as modules, for the smoke tests that call their helpers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def load_bench(stem: str) -> ModuleType:
    """Execute ``bench/<stem>.py`` as module ``bench_<stem>`` (registered in ``sys.modules``, so its attrs classes
    and dataclasses resolve) and return it."""
    spec = importlib.util.spec_from_file_location(f"bench_{stem}", BENCH_DIR / f"{stem}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
