"""``ljrk runtime --backend simulated`` end to end over a real unix socket.

In-process cases build the entrypoint's own container (``entrypoints.runtime.containers``) with the settings the
command line would give, start it, and talk to it only through ``GrpcNodeRuntime`` / ``GrpcNodeConfig``; the
simulated backend is reached through the container to inject health changes. Subprocess cases run the real
command.

Behaviours covered:
- every RPC of both services round-trips (GetVersion, ListDevices, WatchHealth, Allocate, Release,
  ExporterGetDataList, Enable, Disable, GetStatus), with the simulated usage model visible in the exporter data;
- Allocate is idempotent; Release removes records;
- a restart on the same state directory keeps the Enable/Disable state and the allocation records (and the
  identical repeat still answers while disabled); the state file is JSON written atomically (no temp file left);
- the GetVersion capability check refuses a feature the Runtime lacks, with a clear message (the static MIG strategy
  does not advertise ``mig-dynamic``);
- MIG with ``--mig-strategy dynamic`` over simulated MIG GPUs: an Allocate creates the planned instance and answers
  its ``MIG-…`` UUID, ListDevices and ExporterGetDataList show it with its owner, a restart keeps the record (state
  file) and Release afterwards destroys the created instance; a YAML inventory with ``migInstances`` is served by
  the command and its static instance is handed out;
- a WatchHealth stream sees an injected fault within 1 s; a recovery right after it is held (health damping);
- the command: serves until SIGTERM, exits 0 and removes its socket; ``--backend nvml`` without NVML exits 1 with a
  clear message; a bad ``--simulated-gpus`` (also more than 64 GPUs, there or in ``--simulated-gpus-file``, named
  with the flag) and an over-long socket path exit 2; a corrupt state file exits 1 (one that is not UTF-8 with one
  line naming the file and the byte, the file untouched); a
  simulated YAML inventory is served.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from runtime_node import SPEC, RunningRuntime, start

from adapters.grpc import GrpcNodeRuntime
from adapters.statefile import JsonRuntimeStateStore
from domain.gpu import Health
from domain.mig.gpu import MigOwner, PlacementMode
from domain.runtime.types import ContainerAllocationRequest, HealthChange, PlannedGpu, PlannedMig, RuntimeState
from domain.units import GiB
from entrypoints.runtime.__main__ import main
from entrypoints.runtime.app import RuntimeSettings
from entrypoints.runtime.containers import RuntimeContainer
from ports.runtime import RuntimeDisabledError, UnsupportedFeatureError
from support.polling import wait_for


@pytest.fixture
def running(sock_dir: Path) -> Iterator[RunningRuntime]:
    node = start(sock_dir)
    yield node
    node.stop()


def allocation(running: RunningRuntime, container: str = "main", core: int = 500) -> ContainerAllocationRequest:
    uuid = running.runtime.list_devices()[0].gpu.uuid
    return ContainerAllocationRequest("pod-uid-1", "team-a", "trainer", container,
                                      (PlannedGpu(0, uuid, core_milli=core, memory_bytes=4 * GiB),))


def test_every_rpc_round_trips(running: RunningRuntime) -> None:
    info = running.runtime.get_version()
    assert (info.name, str(info.version), info.backend) == ("ljrk-reference-runtime", "1.2.0", "simulated")
    devices = running.runtime.list_devices()
    assert [(d.gpu.index, d.gpu.model, d.gpu.memory_bytes) for d in devices] == [(0, "A100", 16 * GiB),
                                                                                 (1, "A100", 16 * GiB)]
    stream = running.runtime.watch_health()
    assert [next(stream).uuid for _ in devices] == [d.gpu.uuid for d in devices]
    stream.close()
    assert list(stream) == []
    response = running.runtime.allocate(allocation(running))
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == devices[0].gpu.uuid
    assert response.envs["CUDA_DEVICE_SM_LIMIT"] == "50"
    data = running.runtime.exporter_data()
    assert data.gpus[0].sample.utilization_percent == 40.0  # simulated: 50 % × 0.8
    assert data.gpus[0].sample.memory_used_bytes == 2 * GiB
    assert data.gpus[1].sample.utilization_percent == 0.0
    [row] = data.containers
    assert (row.gpus[0].memory_limit_bytes, row.gpus[0].memory_used_bytes) == (4 * GiB, 2 * GiB)
    assert running.config.disable("test").state is RuntimeState.DISABLED
    assert running.config.enable("test").state is RuntimeState.ENABLED
    assert running.config.status().active_allocations == 1
    assert running.runtime.release("pod-uid-1") == 1


def test_allocate_is_idempotent_and_release_forgets(running: RunningRuntime) -> None:
    first = running.runtime.allocate(allocation(running))
    assert running.runtime.allocate(allocation(running)) == first
    assert len(running.runtime.exporter_data().containers) == 1
    assert running.runtime.release("pod-uid-1", "main") == 1
    assert running.runtime.exporter_data().containers == ()
    assert running.runtime.release("pod-uid-1", "main") == 0


def test_restart_keeps_config_state_and_allocations(sock_dir: Path) -> None:
    node = start(sock_dir)
    try:
        first = node.runtime.allocate(allocation(node))
        node.config.disable("maintenance")
    finally:
        node.stop()
    files = sorted(p.name for p in (sock_dir / "state").iterdir())
    # written atomically: no temporary file left behind; changes after the base went to the journal
    assert files == ["runtime-state.journal", "runtime-state.json"]
    assert json.loads((sock_dir / "state" / "runtime-state.json").read_text())["version"] == 2
    node = start(sock_dir)
    try:
        status = node.config.status()
        assert (status.state, status.reason, status.active_allocations) == (RuntimeState.DISABLED, "maintenance", 1)
        [row] = node.runtime.exporter_data().containers
        assert (row.pod_uid, row.container) == ("pod-uid-1", "main")
        assert node.runtime.allocate(allocation(node)) == first  # same UUIDs (seeded), same answer
        with pytest.raises(RuntimeDisabledError):
            node.runtime.allocate(allocation(node, "second"))
        node.config.enable("done")
        node.runtime.allocate(allocation(node, "second"))
    finally:
        node.stop()


def test_capability_check_refuses_a_missing_feature(running: RunningRuntime) -> None:
    info = running.runtime.get_version()
    info.require("allocate", "health-watch", "exporter-data", "config-service", "hami-core-env")
    info.require("mig-inventory", "mig-allocate", "mig-exporter-data", "mig-partitions")
    with pytest.raises(UnsupportedFeatureError) as caught:
        info.require("mig-dynamic")
    assert str(caught.value).startswith("node Runtime ljrk-reference-runtime 1.2.0 does not advertise feature "
                                        "'mig-dynamic'")
    mig = running.runtime.list_devices()[0]
    with pytest.raises(UnsupportedFeatureError, match="mig-dynamic"):  # refused by the client before sending
        running.runtime.allocate(ContainerAllocationRequest("p", "ns", "n", "c", (), mig=(
            PlannedMig(0, mig.gpu.uuid, "1g.10gb", 0, create=True),)))


MIG_SPEC = "1x80Gi:A100:mig=3g.40gb@0"


def test_dynamic_mig_creates_at_allocate_survives_a_restart_and_destroys_at_release(sock_dir: Path) -> None:
    node = start(sock_dir, MIG_SPEC, PlacementMode.DYNAMIC)
    try:
        node.runtime.require("mig-inventory", "mig-allocate", "mig-dynamic", "mig-exporter-data")
        [gpu] = node.runtime.list_devices()
        [static] = gpu.mig_instances
        assert (static.profile, static.start, static.owner) == ("3g.40gb", 0, None)
        plan = ContainerAllocationRequest("pod-mig", "team-a", "trainer", "main", (), mig=(
            PlannedMig(0, gpu.gpu.uuid, "1g.10gb", 4, create=True),))
        response = node.runtime.allocate(plan)
        [created] = [i for i in node.runtime.list_devices()[0].mig_instances if i.start == 4]
        assert response.envs["NVIDIA_VISIBLE_DEVICES"] == created.uuid
        assert created.uuid.startswith("MIG-")
        assert (created.owner, created.created) == (MigOwner("pod-mig", "main"), True)
        data = node.runtime.exporter_data()
        rows = {row.instance.start: row for row in data.mig}
        assert rows[4].memory_used_bytes == 5 * GiB  # 10 GiB × 0.5 (simulated usage model)
        assert rows[0].memory_used_bytes == 0
        [container] = data.containers
        assert container.mig_uuids == (created.uuid,)
    finally:
        node.stop()
    saved = JsonRuntimeStateStore.in_dir(sock_dir / "state").load()
    assert saved is not None
    assert [(i.start, i.created) for i in saved.allocations[0].mig] == [(4, True)]
    node = start(sock_dir, MIG_SPEC, PlacementMode.DYNAMIC)
    try:
        assert node.config.status().active_allocations == 1
        node.runtime.allocate(ContainerAllocationRequest("pod-mig", "team-a", "trainer", "side", (), mig=(
            PlannedMig(0, node.runtime.list_devices()[0].gpu.uuid, "1g.10gb", 4, create=True),)))
        assert [i.start for i in node.runtime.list_devices()[0].mig_instances] == [0, 4]
        assert node.runtime.release("pod-mig") == 2
        assert [i.start for i in node.runtime.list_devices()[0].mig_instances] == [0]
    finally:
        node.stop()


def test_watch_health_sees_an_injected_change_within_1s(running: RunningRuntime) -> None:
    stream = running.runtime.watch_health()
    received: queue.Queue[HealthChange] = queue.Queue()
    reader = threading.Thread(target=lambda: [received.put(c) for c in stream], daemon=True)
    reader.start()
    try:
        initial = [received.get(timeout=5) for _ in range(2)]
        uuid = initial[1].uuid
        started = time.monotonic()
        running.backend.inject_xid(uuid, 79)
        change = received.get(timeout=1)
        latency = time.monotonic() - started
        assert latency < 1.0
        assert (change.uuid, change.health, change.xid, change.reason) == (uuid, Health.UNHEALTHY, 79, "XID 79")
        running.backend.inject_health(uuid, Health.HEALTHY, "reset")  # held: within --health-hold of the fault
        with pytest.raises(queue.Empty):
            received.get(timeout=0.5)
        listed = running.runtime.list_devices()[initial[1].index]
        assert listed.gpu.health is Health.UNHEALTHY
        assert "held" in listed.health_reason
    finally:
        stream.close()
    reader.join(timeout=5)
    assert not reader.is_alive()


# ----------------------------------------------------------------------------------------------- command
LJRK = [sys.executable, "-c", "import sys; from entrypoints.cli import main; sys.exit(main())"]
"""The ``ljrk`` console script's entry point, run with this interpreter (no dependency on PATH)."""


def test_command_serves_until_sigterm(sock_dir: Path) -> None:
    socket_path = sock_dir / "r.sock"
    command = [*LJRK, "runtime", "--backend", "simulated", "--simulated-gpus", SPEC, "--socket", str(socket_path)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONWARNINGS": "error"})
    try:
        with GrpcNodeRuntime.connect(socket_path, timeout_s=5) as client:
            wait_for(lambda: socket_path.exists() or process.poll() is not None)
            client.wait_ready(10)
            assert client.get_version().backend == "simulated"
            assert len(client.list_devices()) == 2
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert not socket_path.exists()
    assert (sock_dir / "runtime-state.json").exists() is False  # nothing changed, nothing saved
    messages = [json.loads(line)["msg"] for line in stderr.splitlines() if line.startswith("{")]
    assert any(m.startswith("GPU backend: simulated, 2 GPU(s)") for m in messages)
    assert "node Runtime stopped" in messages


def test_nvml_backend_without_nvml_fails_clearly(sock_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("NVML is present on this machine")
    assert main(["--backend", "nvml", "--socket", str(sock_dir / "r.sock")]) == 1
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith("ljrk runtime: error: --backend nvml: NVML is unavailable on this node")
    assert error.endswith("use --backend simulated or auto")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--simulated-gpus", "2x:"], "expected [COUNTx]MEMORY[:MODEL]"),
        (["--backend", "simulated", "--simulated-gpus", "99999999999x16Gi"],
         "error: --simulated-gpus: simulated GPUs '99999999999x16Gi': count 99999999999 is above 64"),
        (["--backend", "simulated", "--simulated-gpus-file", "GPUS_FILE"],
         "error: --simulated-gpus-file: simulated GPUs GPUS_FILE: gpus[0]: count 65 is above 64"),
        (["--socket-too-long"], "at most 107 bytes"),
        (["--backend", "nvml", "--simulated-gpus", SPEC], "need --backend simulated or auto"),
        (["--recovery-quiet-period", "-3"], "must be a finite number of seconds >= 0"),
    ],
)
def test_usage_errors_exit_2(
    sock_dir: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    socket_path = sock_dir / "r.sock"
    if args == ["--socket-too-long"]:
        args, socket_path = [], sock_dir / ("x" * 120) / "r.sock"
    gpus_file = sock_dir / "gpus.yaml"
    gpus_file.write_text("gpus:\n  - {memory: 16Gi, count: 65}\n")
    args = [str(gpus_file) if arg == "GPUS_FILE" else arg for arg in args]
    assert main([*args, "--socket", str(socket_path)]) == 2
    assert message.replace("GPUS_FILE", str(gpus_file)) in capsys.readouterr().err


def test_corrupt_state_exits_1(sock_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (sock_dir / "runtime-state.json").write_text('{"version": 1, "snapshot": {"state": "maybe"}}')
    stop = threading.Event()
    stop.set()
    assert main(["--backend", "simulated", "--socket", str(sock_dir / "r.sock")], stop=stop) == 1
    assert "malformed Runtime state" in capsys.readouterr().err


def test_a_state_file_that_is_not_utf8_exits_1_with_one_line(sock_dir: Path, capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    state = sock_dir / "runtime-state.json"
    state.write_bytes(b"\x00\xffnot json")
    stop = threading.Event()
    stop.set()
    assert main(["--backend", "simulated", "--socket", str(sock_dir / "r.sock")], stop=stop) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if "error:" in line]
    assert line == f"ljrk runtime: error: malformed Runtime state {state}: not UTF-8 text (byte 0xff at offset 1)"
    assert state.read_bytes() == b"\x00\xffnot json"


def test_yaml_inventory_is_served(sock_dir: Path) -> None:
    gpus = sock_dir / "gpus.yaml"
    gpus.write_text("gpus:\n  - {model: H100, memory: 80Gi, uuid: GPU-yaml-0}\n")
    stop = threading.Event()
    result: list[int] = []
    server = threading.Thread(target=lambda: result.append(main(
        ["--backend", "simulated", "--simulated-gpus-file", str(gpus), "--socket", str(sock_dir / "r.sock")],
        stop=stop)))
    server.start()
    try:
        with GrpcNodeRuntime.connect(sock_dir / "r.sock") as client:
            client.wait_ready(10)
            [device] = client.list_devices()
            assert (device.gpu.uuid, device.gpu.model, device.gpu.memory_bytes) == ("GPU-yaml-0", "H100", 80 * GiB)
    finally:
        stop.set()
        server.join(timeout=10)
    assert result == [0]


def test_yaml_mig_inventory_is_served_and_its_instances_handed_out(sock_dir: Path) -> None:
    gpus = sock_dir / "gpus.yaml"
    gpus.write_text("gpus:\n  - model: NVIDIA H100 80GB HBM3\n    memory: 80Gi\n    migMode: enabled\n"
                    "    migInstances: [{profile: 3g.40gb, start: 0}, {profile: 3g.40gb, start: 4}]\n")
    stop = threading.Event()
    result: list[int] = []
    server = threading.Thread(target=lambda: result.append(main(
        ["--backend", "simulated", "--simulated-gpus-file", str(gpus), "--socket", str(sock_dir / "r.sock")],
        stop=stop)))
    server.start()
    try:
        with GrpcNodeRuntime.connect(sock_dir / "r.sock") as client:
            client.wait_ready(10)
            [device] = client.list_devices()
            placed = [(i.profile, i.start, i.size) for i in device.mig_instances]
            assert placed == [("3g.40gb", 0, 4), ("3g.40gb", 4, 4)]
            response = client.allocate(ContainerAllocationRequest("u", "ns", "p", "c", (), mig=(
                PlannedMig(0, device.gpu.uuid, "3g.40gb"),)))
            assert response.envs["NVIDIA_VISIBLE_DEVICES"] == device.mig_instances[0].uuid
            assert response.envs["LJRK_MIG_PROFILE_0"] == "3g.40gb"
    finally:
        stop.set()
        server.join(timeout=10)
    assert result == [0]


def test_a_second_runtime_refuses_a_socket_that_is_still_served(running: RunningRuntime, sock_dir: Path) -> None:
    """A live socket is never taken over (that would strand the first Runtime); a stale one is replaced."""
    settings = RuntimeSettings(socket=sock_dir / "runtime.sock", backend="simulated", simulated_gpus=SPEC,
                               state_dir=sock_dir / "state2", seed="node-1")
    second = RuntimeContainer(settings=settings).app()
    with pytest.raises(OSError, match="served by another process"):
        second.start()
    assert running.runtime.list_devices()  # the first one is still reachable
    stale = sock_dir / "stale.sock"
    import socket as socketlib

    listener = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
    listener.bind(str(stale))
    listener.close()  # leaves a socket file nobody serves, as after SIGKILL
    third = RuntimeContainer(settings=attrs.evolve(settings, socket=stale, state_dir=sock_dir / "state3")).app()
    third.start()
    try:
        client = GrpcNodeRuntime.connect(stale, timeout_s=5)
        client.wait_ready(5)
        assert client.list_devices()
        client.close()
    finally:
        third.stop(0.5)
