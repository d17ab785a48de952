"""Runtime clients across a Runtime restart (adapters/grpc/client.py), over a real unix socket.

Found under the real kubelet: after a Runtime restart the device plugin's channel sat in gRPC's default reconnect
backoff (growing towards 120 s) and failed every Allocate although the Runtime was back. Covers: a client that kept
failing for 6 s while the Runtime was down answers within 1.5 s of the Runtime serving again (the default backoff
would have grown past 4 s by then); an Allocate sent while the Runtime is down and answered once it is back within
the 5 s deadline succeeds instead of failing kubelet's admission; a Runtime down past the deadline fails it with
the contract's unavailable error, naming the Runtime.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from adapters.grpc import GrpcNodeRuntime
from domain.runtime.types import ContainerAllocationRequest, ContainerAllocationResponse, PlannedGpu
from domain.units import GiB
from entrypoints.runtime.app import RuntimeApp, RuntimeSettings
from entrypoints.runtime.containers import RuntimeContainer
from ports.runtime import NodeRuntimeError


def serve(directory: Path) -> RuntimeApp:
    settings = RuntimeSettings(socket=directory / "runtime.sock", backend="simulated", simulated_gpus="1x16Gi:A100",
                               state_dir=directory / "state", seed="node-1")
    app = RuntimeContainer(settings=settings).app()
    app.start()
    return app


def request(client: GrpcNodeRuntime) -> ContainerAllocationRequest:
    uuid = client.list_devices()[0].gpu.uuid
    return ContainerAllocationRequest("pod-1", "ns", "p", "main", (PlannedGpu(0, uuid, 300, 2 * GiB),))


def test_a_client_that_kept_failing_answers_within_a_second_of_the_runtime_coming_back(sock_dir: Path) -> None:
    app = serve(sock_dir)
    client = GrpcNodeRuntime.connect(sock_dir / "runtime.sock", timeout_s=1)
    try:
        client.wait_ready(5)
        client.list_devices()
        app.stop(0.2)
        failing_until = time.monotonic() + 6
        while time.monotonic() < failing_until:
            with pytest.raises(NodeRuntimeError):
                client.list_devices()
            time.sleep(0.2)
        app = serve(sock_dir)
        back = time.monotonic()
        while True:
            try:
                client.list_devices()
                break
            except NodeRuntimeError:
                assert time.monotonic() - back < 1.5, "still failing 1.5 s after the Runtime came back"
                time.sleep(0.05)
    finally:
        client.close()
        app.stop(0.2)


def test_allocate_rides_out_a_restart_shorter_than_its_deadline(sock_dir: Path) -> None:
    app = serve(sock_dir)
    client = GrpcNodeRuntime.connect(sock_dir / "runtime.sock", timeout_s=5)
    try:
        client.wait_ready(5)
        planned = request(client)
        app.stop(0.2)
        answers: list[ContainerAllocationResponse | Exception] = []

        def allocate() -> None:
            try:
                answers.append(client.allocate(planned))
            except NodeRuntimeError as error:
                answers.append(error)

        caller = threading.Thread(target=allocate)
        caller.start()
        time.sleep(1.5)
        app = serve(sock_dir)
        caller.join(10)
        [answer] = answers
        assert isinstance(answer, ContainerAllocationResponse), answer
        assert answer.envs["LJRK_POD_UID"] == "pod-1"
    finally:
        client.close()
        app.stop(0.2)


def test_allocate_past_its_deadline_fails_naming_the_runtime(sock_dir: Path) -> None:
    app = serve(sock_dir)
    client = GrpcNodeRuntime.connect(sock_dir / "runtime.sock", timeout_s=1)
    try:
        client.wait_ready(5)
        planned = request(client)
        app.stop(0.2)
        started = time.monotonic()
        with pytest.raises(NodeRuntimeError, match="Runtime"):
            client.allocate(planned)
        assert 0.9 <= time.monotonic() - started < 3
    finally:
        client.close()
