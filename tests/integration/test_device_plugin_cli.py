"""``ljrk device-plugin`` end to end in-process: the reference Runtime (``ljrk runtime --backend simulated``) on a
unix socket, the plugin's ``main`` with the hidden ``--in-memory`` cluster, and the fake kubelet.

Covers: the command registers all three resources with counts from the Runtime's inventory and ``--memory-unit``,
serves /readyz, /healthz and /metrics (protocol fingerprint, registrations) on ``--listen``, stops cleanly
(exit 0, sockets removed) on its stop event; bad flags exit 2; an unreachable Runtime exits 1.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_kubelet import FakeKubelet

from domain.kube.protocol import ProtocolConstants
from entrypoints.cli import main as ljrk
from entrypoints.device_plugin.__main__ import main as device_plugin
from entrypoints.runtime.__main__ import main as runtime_main


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ljdpcli", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_command_registers_with_reference_runtime(root: Path) -> None:
    rt_stop, dp_stop = threading.Event(), threading.Event()
    codes: dict[str, int] = {}
    runtime = threading.Thread(target=lambda: codes.setdefault("rt", runtime_main(
        ["--socket", str(root / "rt.sock"), "--backend", "simulated", "--simulated-gpus", "2x16Gi:A100",
         "--state-dir", str(root)], stop=rt_stop)))
    kubelet = FakeKubelet(root / "dp")
    kubelet.start()
    port = _free_port()
    plugin = threading.Thread(target=lambda: codes.setdefault("dp", device_plugin(
        ["--node-name", "n1", "--runtime-socket", str(root / "rt.sock"), "--device-plugin-dir", str(root / "dp"),
         "--memory-unit", "2Gi", "--in-memory", "--log-level", "WARNING", "--listen", f"127.0.0.1:{port}",
         "--cdi-dir", str(root / "cdi")],  # never the host's /var/run/cdi
        stop=dp_stop)))
    runtime.start()
    plugin.start()
    try:
        assert kubelet.wait_for(lambda: len(kubelet.devices) == 3, 10), codes
        assert (root / "cdi" / "lj-runtimekit.io-gpu.json").is_file(), "the CDI spec went to --cdi-dir"
        counts = sorted(len(d) for d in kubelet.devices.values())
        assert counts == [2, 16, 200]  # gpu, memory (2 x 16 GiB / 2 GiB), core
        assert kubelet.wait_for(lambda: _get(port, "/readyz")[0] == 200, 5)
        assert _get(port, "/healthz") == (200, "ok\n")
        status, page = _get(port, "/metrics")
        assert status == 200
        protocol = ProtocolConstants(memory_unit="2Gi")  # --memory-unit changes the fingerprint
        fingerprint = protocol.fingerprint()
        assert f'lj_runtimekit_protocol_info{{component="device-plugin",fingerprint="{fingerprint}"}} 1.0' in page
        assert f'lj_runtimekit_device_plugin_resource_registered{{resource="{protocol.resources.core}"}} 1.0' in page
        assert 'lj_runtimekit_device_plugin_gpus{health="Healthy"} 2.0' in page
        assert "lj_runtimekit_device_plugin_registrations_total 3.0" in page
    finally:
        dp_stop.set()
        plugin.join(10)
        rt_stop.set()
        runtime.join(10)
        kubelet.stop()
    assert codes == {"rt": 0, "dp": 0}
    assert not list((root / "dp").glob("ljrk-*.sock"))


def test_bad_flags_and_missing_runtime(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert device_plugin(["--runtime-socket", "x"]) == 2
    assert ljrk(["device-plugin", "--node-name", "n1", "--runtime-socket", str(root / "none.sock"),
                 "--memory-unit", "0.5Gi", "--in-memory"]) == 2
    started = time.monotonic()
    code = device_plugin(["--node-name", "n1", "--runtime-socket", str(root / "none.sock"), "--in-memory",
                          "--device-plugin-dir", str(root), "--runtime-wait", "0.5"], stop=threading.Event())
    assert code == 1
    assert time.monotonic() - started < 10
    assert "node Runtime" in capsys.readouterr().err
