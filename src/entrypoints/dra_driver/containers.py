"""Composition root of ``ljrk dra-driver``: which adapter implements each port.

The Runtime is the gRPC client on ``--runtime-socket`` (as the device plugin's); the cluster (the Node, for the
owner reference) and the ResourceSlices are the Kubernetes API (``--kubeconfig``, else in-cluster) over one
``ApiClient``, or with the hidden ``--in-memory`` flag an InMemoryCluster holding this node and
InMemoryResourceSlices. The kubelet DRA plugin reads claims from the same API (in memory: InMemoryResourceClaims),
keeps its checkpoint in ``<plugins_dir>/<driver>/checkpoint.json``, writes per-claim CDI specs
``<cdi_dir>/lj-runtimekit.io-claim-<uid>.json`` (with the Runtime's enforcement mounts the settings allow) and
reads device minors from the host driver. Providers are
annotated with their port types so mypy checks conformance.
"""

from __future__ import annotations

import attrs
from dependency_injector import containers, providers

from adapters.cdifiles import CdiSpecDirectory, ProcfsGpuDevices
from adapters.grpc import GrpcNodeRuntime
from adapters.grpc.dra_plugin import DraPluginServer, dra_socket, registration_socket
from adapters.kubernetes import KubernetesCluster, from_kubeconfig
from adapters.kubernetes.resourceclaims import KubernetesResourceClaims
from adapters.kubernetes.resourceslices import KubernetesResourceSlices
from adapters.memory.cluster import InMemoryCluster
from adapters.memory.resource_claims import InMemoryResourceClaims
from adapters.memory.resource_slices import InMemoryResourceSlices
from adapters.protocolfile import load_protocol
from adapters.statefile.dra_checkpoint import CHECKPOINT_FILE, JsonPreparedClaims
from domain.kube.objects import NodeObject
from domain.kube.protocol import ProtocolConstants
from ports.cdi import CdiSpecStore
from ports.cluster import NodesApi
from ports.resource_claims import ResourceClaimsApi
from ports.resource_slices import ResourceSlicesApi
from ports.runtime import NodeRuntime
from services._shared.logs import configure_logging
from services.dra.plugin import ClaimPreparer
from services.dra.publisher import SlicePublisher

from .app import DraDriverApp, DraDriverSettings


@attrs.frozen
class ApiAccess:
    """The API access of the command: the nodes, the slices and the claims (over one ``ApiClient``)."""

    nodes: NodesApi
    slices: ResourceSlicesApi
    claims: ResourceClaimsApi


def make_api(settings: DraDriverSettings) -> ApiAccess:
    """The cluster and slice adapters (module docstring). Raises the client's ConfigException for a bad
    kubeconfig."""
    if settings.in_memory:
        cluster = InMemoryCluster()
        cluster.create_node(NodeObject(settings.node_name))
        return ApiAccess(cluster, InMemoryResourceSlices(), InMemoryResourceClaims())
    api_client = from_kubeconfig(None if settings.kubeconfig is None else str(settings.kubeconfig))
    return ApiAccess(KubernetesCluster(api_client, component="ljrk-dra-driver"),
                     KubernetesResourceSlices(api_client), KubernetesResourceClaims(api_client))


def connect_runtime(settings: DraDriverSettings) -> NodeRuntime:
    """A Runtime client on ``--runtime-socket``, waited for up to ``runtime_wait_s`` s. Raises
    ``ports.runtime.RuntimeUnavailableError``."""
    runtime = GrpcNodeRuntime.connect(settings.runtime_socket)
    try:
        runtime.wait_ready(settings.runtime_wait_s)
    except Exception:
        runtime.close()
        raise
    return runtime


def make_publisher(settings: DraDriverSettings, runtime: NodeRuntime, api: ApiAccess,
                   protocol: ProtocolConstants) -> SlicePublisher:
    """The slice publisher of this node."""
    return SlicePublisher(node=settings.node_name, runtime=runtime, slices=api.slices, nodes=api.nodes,
                          protocol=protocol, unhealthy=settings.unhealthy_policy)


def make_preparer(settings: DraDriverSettings, runtime: NodeRuntime, api: ApiAccess,
                  protocol: ProtocolConstants) -> ClaimPreparer:
    """The claim preparer of this node (module docstring). Raises ``ports.resource_claims.CheckpointError`` for
    an unreadable checkpoint and ``UnsupportedFeatureError`` for a Runtime without Allocate/Release."""
    driver = protocol.dra.driver
    host = ProcfsGpuDevices()

    def spec_store(uid: str) -> CdiSpecStore:
        return CdiSpecDirectory(settings.cdi_dir, file_name=f"lj-runtimekit.io-claim-{uid}.json")

    preparer = ClaimPreparer(driver=driver, node=settings.node_name, runtime=runtime, claims=api.claims,
                             checkpoint=JsonPreparedClaims(settings.plugins_dir / driver / CHECKPOINT_FILE),
                             spec_store=spec_store, host=host.scan, allowed=settings.allowed_mounts)
    preparer.check_runtime()
    return preparer


def make_plugin(settings: DraDriverSettings, preparer: ClaimPreparer, protocol: ProtocolConstants) -> (
        DraPluginServer):
    """The kubelet plugin's servers on the configured sockets."""
    driver = protocol.dra.driver
    return DraPluginServer(driver=driver, handler=preparer, dra_path=dra_socket(settings.plugins_dir, driver),
                           registration_path=registration_socket(settings.plugins_registry, driver))


class DraDriverContainer(containers.DeclarativeContainer):
    """``settings`` (required) → protocol, API access, runtime, publisher, claim preparer, plugin, app."""

    settings: providers.Dependency[DraDriverSettings] = providers.Dependency(instance_of=DraDriverSettings)
    logging = providers.Resource(configure_logging, level=settings.provided.log_level)
    protocol: providers.Provider[ProtocolConstants] = providers.Singleton(load_protocol,
                                                                         settings.provided.protocol_file)
    api: providers.Provider[ApiAccess] = providers.Singleton(make_api, settings=settings)
    runtime: providers.Provider[NodeRuntime] = providers.Singleton(connect_runtime, settings=settings)
    publisher: providers.Provider[SlicePublisher] = providers.Singleton(make_publisher, settings, runtime, api,
                                                                        protocol)
    preparer: providers.Provider[ClaimPreparer] = providers.Singleton(make_preparer, settings, runtime, api, protocol)
    plugin: providers.Provider[DraPluginServer] = providers.Singleton(make_plugin, settings, preparer, protocol)
    app: providers.Provider[DraDriverApp] = providers.Singleton(DraDriverApp, publisher, plugin,
                                                                  settings.provided.resync_s)
