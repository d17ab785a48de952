"""The kubelet DRA plugin of ``ljrk dra-driver`` over its real gRPC servers on unix sockets, with a gRPC client in
the kubelet's place and the reference Runtime (simulated GPUs) behind it; claims come from the in-memory API.

Behaviours covered: ``GetInfo`` on ``<registry>/<driver>-reg.sock`` names the DRA plugin, its endpoint and the
versions ``v1.DRAPlugin``, ``v1beta1.DRAPlugin``, and ``NotifyRegistrationStatus`` is accepted;
``NodePrepareResources`` answers a share with its CDI id and writes the claim's CDI spec with the Runtime's limits;
preparing again answers the same with one grant in the Runtime's book; the v1beta1 service name answers the same;
after a restart (new app, new in-memory API without the claim) the checkpoint answers; a claim with a bad device
gets its own error while the good one is answered; ``NodeUnprepareResources`` empties the Runtime's book and
removes the CDI spec and the checkpoint entry.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import runtime_node
from dependency_injector import providers

from adapters.grpc import unix_channel
from adapters.grpc._pb.kubelet.dra.v1 import api_pb2 as dra
from adapters.grpc._pb.kubelet.dra.v1 import api_pb2_grpc as dra_grpc
from adapters.grpc._pb.kubelet.pluginregistration.v1 import api_pb2 as reg
from adapters.grpc._pb.kubelet.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from adapters.memory.resource_claims import InMemoryResourceClaims
from domain.dra.claims import AllocationResult, ClaimAllocation
from entrypoints.dra_driver.app import DraDriverSettings
from entrypoints.dra_driver.containers import DraDriverContainer

DRIVER = "gpu.lj-runtimekit.io"


class Driver:
    """``ljrk dra-driver``'s container and app, running on a thread until :meth:`stop`."""

    def __init__(self, directory: Path, runtime: runtime_node.RunningRuntime) -> None:
        self.settings = DraDriverSettings(node_name="n1", runtime_socket=directory / "runtime.sock", in_memory=True,
                                          plugins_registry=directory / "reg", plugins_dir=directory / "plugins",
                                          cdi_dir=directory / "cdi")
        self.container = DraDriverContainer(settings=self.settings)
        self.container.runtime.override(providers.Object(runtime.runtime))
        self.app = self.container.app()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.app.run, args=(self.stopping,), daemon=True)
        self.thread.start()
        self.channel = unix_channel(directory / "plugins" / DRIVER / "dra.sock")
        grpc.channel_ready_future(self.channel).result(timeout=10)
        with unix_channel(directory / "reg" / f"{DRIVER}-reg.sock") as registration:  # served after the plugin's
            grpc.channel_ready_future(registration).result(timeout=10)
        self.dra = dra_grpc.DRAPluginStub(self.channel)

    @property
    def claims(self) -> InMemoryResourceClaims:
        claims = self.container.api().claims
        assert isinstance(claims, InMemoryResourceClaims)
        return claims

    def prepare(self, *claims: tuple[str, str]) -> dra.NodePrepareResourcesResponse:
        request = dra.NodePrepareResourcesRequest(claims=[dra.Claim(namespace="ns", uid=u, name=n) for u, n in claims])
        response: dra.NodePrepareResourcesResponse = self.dra.NodePrepareResources(request, timeout=10)
        return response

    def stop(self) -> None:
        self.channel.close()
        self.stopping.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


@pytest.fixture
def runtime(sock_dir: Path) -> Iterator[runtime_node.RunningRuntime]:
    running = runtime_node.start(sock_dir)
    yield running
    running.stop()


def share(device: str, cores: str, memory: str) -> AllocationResult:
    return AllocationResult(request="gpu", driver=DRIVER, pool="n1", device=device,
                            consumed={"cores": cores, "memory": memory}, share_id="share-1")


def booked(runtime: runtime_node.RunningRuntime) -> list[str]:
    return sorted(c.pod_uid for c in runtime.runtime.exporter_data().containers)


def test_registration_prepare_restart_unprepare(sock_dir: Path, runtime: runtime_node.RunningRuntime) -> None:
    driver = Driver(sock_dir, runtime)
    try:
        with unix_channel(sock_dir / "reg" / f"{DRIVER}-reg.sock") as channel:
            registration = reg_grpc.RegistrationStub(channel)
            info = registration.GetInfo(reg.InfoRequest(), timeout=5)
            assert (info.type, info.name, info.endpoint, list(info.supported_versions)) == (
                "DRAPlugin", DRIVER, str(sock_dir / "plugins" / DRIVER / "dra.sock"),
                ["v1.DRAPlugin", "v1beta1.DRAPlugin"])
            registration.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), timeout=5)

        driver.claims.put(ClaimAllocation("ns", "good", "u-good", (share("gpu-0", "30", "4Gi"),)))
        driver.claims.put(ClaimAllocation("ns", "bad", "u-bad", (share("gpu-9", "30", "4Gi"),)))
        first = driver.prepare(("u-good", "good"), ("u-bad", "bad"))
        assert set(first.claims) == {"u-good", "u-bad"}
        assert "this node has no GPU 9" in first.claims["u-bad"].error
        good = first.claims["u-good"]
        assert good.error == ""
        ((device),) = good.devices
        assert (list(device.request_names), device.pool_name, device.device_name, list(device.cdi_device_ids),
                device.share_id) == (["gpu"], "n1", "gpu-0", ["lj-runtimekit.io/claim=u-good-gpu-0"], "share-1")
        spec = json.loads((sock_dir / "cdi" / "lj-runtimekit.io-claim-u-good.json").read_text())
        assert spec["kind"] == "lj-runtimekit.io/claim"
        assert [d["name"] for d in spec["devices"]] == ["u-good-gpu-0"]
        assert "NVIDIA_VISIBLE_DEVICES=" + runtime.runtime.list_devices()[0].gpu.uuid in spec["containerEdits"]["env"]
        assert driver.prepare(("u-good", "good")).claims["u-good"] == good
        assert booked(runtime) == ["u-good"]

        v1beta1 = driver.channel.unary_unary(
            "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources",
            request_serializer=dra.NodePrepareResourcesRequest.SerializeToString,
            response_deserializer=dra.NodePrepareResourcesResponse.FromString)
        again = v1beta1(dra.NodePrepareResourcesRequest(claims=[dra.Claim(namespace="ns", uid="u-good", name="good")]),
                        timeout=10)
        assert again.claims["u-good"] == good
    finally:
        driver.stop()
    assert not (sock_dir / "reg" / f"{DRIVER}-reg.sock").exists()

    restarted = Driver(sock_dir, runtime)  # a fresh in-memory API without the claim: the checkpoint answers
    try:
        assert restarted.prepare(("u-good", "good")).claims["u-good"] == good
        assert booked(runtime) == ["u-good"]
        unprepared = restarted.dra.NodeUnprepareResources(
            dra.NodeUnprepareResourcesRequest(claims=[dra.Claim(namespace="ns", uid="u-good", name="good")]),
            timeout=10)
        assert unprepared.claims["u-good"].error == ""
        assert booked(runtime) == []
        assert not (sock_dir / "cdi" / "lj-runtimekit.io-claim-u-good.json").exists()
        checkpoint = json.loads((sock_dir / "plugins" / DRIVER / "checkpoint.json").read_text())
        assert checkpoint == {"version": 1, "claims": {}}
    finally:
        restarted.stop()
