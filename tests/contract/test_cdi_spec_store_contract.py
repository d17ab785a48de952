"""Contract of the CDI spec store port (``ports.cdi.CdiSpecStore``), run on
:class:`~adapters.memory.cdi.InMemoryCdiSpecStore` (``[memory]``) and :class:`~adapters.cdifiles.CdiSpecDirectory`
(``[directory]``, a temporary CDI spec directory that does not exist yet).

Behaviours covered: nothing written reads None; a written spec reads back equal; a second write replaces the first;
remove forgets it and is idempotent. ``[directory]`` only: the file is ``lj-runtimekit.io-gpu.json``, mode 0644,
valid JSON, and no temporary file is left beside it; a directory that cannot be made raises
:class:`~ports.cdi.CdiSpecError` naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.cdifiles import CdiSpecDirectory
from adapters.memory.cdi import InMemoryCdiSpecStore
from domain.device_plugin.cdi import HostGpuNodes, build_spec
from domain.gpu import Gpu, GpuUuid
from ports.cdi import CdiSpecError, CdiSpecStore

ONE = build_spec([Gpu(0, GpuUuid("GPU-1111"), "T4", 16 << 30)], HostGpuNodes({GpuUuid("GPU-1111"): 0}, ("nvidiactl",)))
TWO = build_spec([Gpu(0, GpuUuid("GPU-1111"), "T4", 16 << 30), Gpu(1, GpuUuid("GPU-2222"), "T4", 16 << 30)],
                 HostGpuNodes())


@pytest.fixture(params=["memory", "directory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> CdiSpecStore:
    return InMemoryCdiSpecStore() if request.param == "memory" else CdiSpecDirectory(tmp_path / "run" / "cdi")


def test_write_read_replace_remove(store: CdiSpecStore) -> None:
    assert store.read() is None
    store.write(ONE)
    assert store.read() == ONE
    store.write(TWO)
    assert store.read() == TWO
    store.remove()
    assert store.read() is None
    store.remove()  # idempotent
    assert store.read() is None


def test_directory_file_is_the_cdi_json_and_nothing_else(tmp_path: Path) -> None:
    directory = CdiSpecDirectory(tmp_path / "cdi")
    directory.write(ONE)
    directory.write(TWO)
    assert sorted(p.name for p in (tmp_path / "cdi").iterdir()) == ["lj-runtimekit.io-gpu.json"]
    assert directory.path.stat().st_mode & 0o777 == 0o644
    assert json.loads(directory.path.read_text())["kind"] == "lj-runtimekit.io/gpu"


def test_directory_unwritable_raises_naming_the_file(tmp_path: Path) -> None:
    blocker = tmp_path / "cdi"
    blocker.write_text("a file where the spec directory should be")  # fails for root too
    with pytest.raises(CdiSpecError, match=r"lj-runtimekit\.io-gpu\.json"):
        CdiSpecDirectory(blocker).write(ONE)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cdi"]
