"""The cluster port over the official Python client (``kubernetes`` 37.x, and 28–35 through :mod:`.compat`):
CoreV1Api (ConfigMaps in :mod:`.configmaps`), CoordinationV1Api and (in :mod:`.jobs`) BatchV1Api.

Protocol facts this relies on (core/v1 and coordination.k8s.io/v1 API reference; checked by ``tests/contract`` against a
real kube-apiserver of the live version, 1.37):

* **binding** — ``create_namespaced_pod_binding`` is called with ``_preload_content=False``: the server answers 201
  with a ``Status`` that 37.x would try to parse as ``V1Binding`` and raise after the pod was bound. The binding
  carries the pod's UID; current servers reject a mismatch with 409 (1.20 ignored it). Its ``metadata.annotations``
  are merged into the pod's in the same update that sets ``spec.nodeName`` (checked by the contract test
  ``test_bind_pod_with_annotations_writes_them_with_the_node``).
* **patches** are JSON merge patches (``application/merge-patch+json``; the client would otherwise pick
  strategic merge), sent by :func:`.compat.merge_patch` on every supported client: null deletes a key,
  ``metadata.resourceVersion`` makes the patch conditional (409 when stale).
* **watches** use ``timeout_seconds`` (server side; nothing retries) and ``_request_timeout`` (client socket) a
  little longer. Too-old RVs come back as HTTP 410 or as an ``ERROR`` event with code 410: both become
  :class:`GoneError`. Node and pod LISTs and watches are read as raw JSON (:mod:`.rawjson`, our own line reader);
  Jobs go through ``kubernetes.watch.Watch``, which raises ``ERROR`` events as ``ApiException``.
* **errors** — ``ApiException`` 404/409/410 become NotFound/Conflict/GoneError, any other HTTP status a
  :class:`ClusterError` with that status; transport failures (``urllib3.exceptions.HTTPError`` — connect and
  read timeouts, ``MaxRetryError``, protocol errors of a broken stream — and ``OSError``, ``TimeoutError``
  included) become :class:`UnavailableError`. All chained with ``raise … from``; nothing else escapes a call
  or a watch iterator.
* **timeouts** — ``request_timeout`` is the client's total timeout of one non-watch request (connect + read,
  urllib3 ``Timeout(total=…)``; on 28–35 see :func:`.compat.wire_timeout`);
  :meth:`KubernetesCluster.with_request_timeout` gives a view with another one over the same ``ApiClient`` (the
  scheduler caps its commit calls with it). It is a client-side bound: a request the server already received
  may still be applied after the client gave up.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import attrs
from kubernetes import client, config, watch

from domain.kube.events import EventCorrelator, SeenEvent
from domain.kube.objects import (
    ClusterEvent,
    ContainerTermination,
    EventType,
    LeaseRecord,
    Listing,
    NodeObject,
    PodObject,
    PodPhase,
    WatchEvent,
)
from ports.cluster import ClusterError

from .compat import EVENT, MERGE_PATCH, NODE, POD, POD_STATUS, merge_patch, require_supported, wire_timeout
from .configmaps import KubernetesConfigMaps
from .corejson import node_from_json, pod_from_json
from .errors import api_errors as _api_errors
from .jobs import KubernetesJobs
from .rawjson import WATCH_SOCKET_SLACK, list_json, watch_json
from .translate import (
    event_repeat_patch,
    event_to_v1,
    lease_from_v1,
    lease_to_v1,
    metadata_patch,
    node_from_v1,
    node_to_v1,
    pod_from_v1,
    pod_status_patch,
    pod_to_v1,
)

DEFAULT_POD_IMAGE = "registry.k8s.io/pause:3.9"
"""Image of every container in pods made by :meth:`KubernetesCluster.create_pod` (the domain has no images)."""

DEFAULT_REQUEST_TIMEOUT = 30.0
"""Client socket timeout (s) of non-watch calls."""

CONNECTION_POOL_MAXSIZE = 32
"""Lower bound :func:`from_kubeconfig` puts on its client's pool size: how many connections to the API server
urllib3 keeps for reuse (``PoolManager(maxsize=…)``, an upper bound on idle connections kept, not a number held
open; the client's default is 5 per CPU, 10 on a 2-CPU host). Every watch holds one for its
whole stream, and kube-scheduler calls the extender's ``bind`` from one goroutine per pod, so a burst of binds
needs one connection each: beyond the pool's size urllib3 opens a fresh TLS connection for the request and
discards it afterwards (a full handshake per bind)."""


_T = TypeVar("_T")


def from_kubeconfig(path: str | None = None, *, context: str | None = None) -> client.ApiClient:
    """An ``ApiClient`` from the kubeconfig at ``path`` (``context`` or its current one), or from the pod's
    in-cluster service account when ``path`` is None, keeping at least :data:`CONNECTION_POOL_MAXSIZE` connections.
    Raises ``kubernetes.config.ConfigException`` (outside a cluster with no ``path``: a message saying to pass
    ``--kubeconfig``)."""
    configuration = client.Configuration()
    if path is None:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException as error:
            raise config.ConfigException(
                f"no --kubeconfig given and not running in a cluster ({error}); pass --kubeconfig FILE"
            ) from error
    else:
        config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, CONNECTION_POOL_MAXSIZE)
    return client.ApiClient(configuration)


class KubernetesCluster(KubernetesJobs, KubernetesConfigMaps):
    """:class:`~ports.cluster.ClusterApi` over a configured ``kubernetes.client.ApiClient`` (module docstring;
    Jobs in :mod:`.jobs`, ConfigMaps in :mod:`.configmaps`).

    ``pod_image`` — image used by :meth:`create_pod`; ``component`` — ``source.component`` of Events;
    ``request_timeout`` — client timeout (s) of one non-watch call. The caller owns and closes ``api_client``.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        pod_image: str = DEFAULT_POD_IMAGE,
        component: str = "lj-runtimekit",
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        require_supported()
        self._api_client = api_client
        self._core = client.CoreV1Api(api_client)
        self._coordination = client.CoordinationV1Api(api_client)
        self._batch = client.BatchV1Api(api_client)
        self._pod_image = pod_image
        self._component = component
        self._seconds = request_timeout
        self._timeout = wire_timeout(request_timeout)  # what the client takes (compat: 28-35 drop a float)
        self._event_lock = threading.Lock()  # one Event write at a time, so a repeat never races its first create
        self._events = EventCorrelator()  # names: the Events' metadata.name

    @property
    def request_timeout(self) -> float:
        """Client timeout (s) of one non-watch call."""
        return self._seconds

    def with_request_timeout(self, seconds: float) -> KubernetesCluster:
        """A view over the same ``ApiClient`` (same connection pool) whose non-watch calls time out after
        ``seconds``. Raises ValueError unless ``seconds`` > 0."""
        if not seconds > 0:
            raise ValueError(f"request timeout must be > 0 s, not {seconds!r}")
        view = KubernetesCluster(self._api_client, pod_image=self._pod_image, component=self._component,
                                 request_timeout=seconds)
        view._event_lock, view._events = self._event_lock, self._events  # one de-duplication for both
        return view

    # ------------------------------------------------------------------ nodes
    def list_nodes(self) -> Listing[NodeObject]:
        """All nodes and the list's resourceVersion (read raw: :mod:`.rawjson`). Raises ClusterError."""
        nodes, rv = list_json(self._core.list_node, node_from_json, "list nodes", _request_timeout=self._timeout)
        return Listing(nodes, rv)

    def watch_nodes(self, *, resource_version: str, timeout_seconds: float) -> Iterator[WatchEvent[NodeObject]]:
        """Node changes after ``resource_version`` for about ``timeout_seconds`` (s, rounded up to whole seconds
        as the API takes them; read raw: :mod:`.rawjson`). The iterator raises GoneError (410) and ClusterError."""
        return watch_json(self._core.list_node, node_from_json, resource_version, timeout_seconds, "watch nodes")

    def get_node(self, name: str) -> NodeObject:
        """One node. Raises NotFoundError."""
        with _api_errors(f"get node {name[:100]}"):
            return node_from_v1(self._core.read_node(name, _request_timeout=self._timeout))

    def create_node(self, node: NodeObject) -> NodeObject:
        """Create a node with its allocatable in ``status``. Raises ConflictError if it exists.

        The server's ``TaintNodesByCondition`` admission adds ``node.kubernetes.io/not-ready:NoSchedule``
        until a kubelet reports Ready; it is in the returned object."""
        with _api_errors(f"create node {node.name[:100]}"):
            return node_from_v1(self._core.create_node(node_to_v1(node), _request_timeout=self._timeout))

    def delete_node(self, name: str) -> None:
        """Delete a node. Raises NotFoundError."""
        with _api_errors(f"delete node {name[:100]}"):
            self._core.delete_node(name, _request_timeout=self._timeout)

    def patch_node_metadata(
        self,
        name: str,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
        resource_version: str | None = None,
    ) -> NodeObject:
        """Merge-patch labels/annotations (None deletes). Raises NotFoundError, ConflictError (stale RV)."""
        body = metadata_patch(labels=labels, annotations=annotations, resource_version=resource_version)
        with _api_errors(f"patch node {name[:100]}"):
            node = merge_patch(
                lambda: self._core.patch_node(name, body, _content_type=MERGE_PATCH, _request_timeout=self._timeout),
                self._api_client, NODE, body, timeout=self._timeout, path={"name": name})
        return node_from_v1(node)

    # ------------------------------------------------------------------ pods
    def list_pods(
        self, *, field_selector: str = "", label_selector: str = "", namespace: str = ""
    ) -> Listing[PodObject]:
        """Pods of all namespaces (of ``namespace`` only, when given) matching ``field_selector`` and
        ``label_selector`` (read raw: :mod:`.rawjson`). Raises ClusterError (400 for a bad selector)."""
        selectors: dict[str, Any] = {"field_selector": field_selector or None,
                                     "label_selector": label_selector or None, "_request_timeout": self._timeout}
        if namespace:
            selectors["namespace"] = namespace
        call = self._core.list_namespaced_pod if namespace else self._core.list_pod_for_all_namespaces
        pods, rv = list_json(call, pod_from_json, "list pods", **selectors)
        return Listing(pods, rv)

    def watch_pods(
        self, *, resource_version: str, timeout_seconds: float, field_selector: str = ""
    ) -> Iterator[WatchEvent[PodObject]]:
        """Pod changes after ``resource_version`` seen through ``field_selector``, for about ``timeout_seconds``
        (s, rounded up; read raw: :mod:`.rawjson`). The iterator raises GoneError (410) and ClusterError."""
        return watch_json(self._core.list_pod_for_all_namespaces, pod_from_json, resource_version, timeout_seconds,
                          "watch pods", field_selector=field_selector or None)

    def get_pod(self, namespace: str, name: str) -> PodObject:
        """One pod. Raises NotFoundError."""
        with _api_errors(f"get pod {namespace[:64]}/{name[:100]}"):
            return pod_from_v1(self._core.read_namespaced_pod(name, namespace, _request_timeout=self._timeout))

    def create_pod(self, pod: PodObject) -> PodObject:
        """Create a pod (containers run ``pod_image``); the server assigns uid and RV and sets phase Pending.
        Raises ConflictError if it exists, NotFoundError if the namespace does not, ClusterError (422) if invalid."""
        with _api_errors(f"create pod {pod.namespace[:64]}/{pod.name[:100]}"):
            created = self._core.create_namespaced_pod(
                pod.namespace, pod_to_v1(pod, image=self._pod_image), _request_timeout=self._timeout
            )
        return pod_from_v1(created)

    def delete_pod(self, namespace: str, name: str, *, grace_period_seconds: int | None = None) -> None:
        """Delete a pod; ``grace_period_seconds`` (s) None = the pod's own (30 s by default); the server deletes
        unbound or finished pods at once and marks the others terminating. Raises NotFoundError."""
        with _api_errors(f"delete pod {namespace[:64]}/{name[:100]}"):
            self._core.delete_namespaced_pod(
                name, namespace, grace_period_seconds=grace_period_seconds, _request_timeout=self._timeout
            )

    def set_pod_phase(
        self, namespace: str, name: str, phase: PodPhase, *, terminations: Sequence[ContainerTermination] = ()
    ) -> PodObject:
        """Merge-patch ``status.phase`` (and ``containerStatuses`` with ``terminations``) through the status
        subresource. Raises NotFoundError."""
        body = pod_status_patch(phase, terminations)
        with _api_errors(f"set phase of pod {namespace[:64]}/{name[:100]}"):
            pod = merge_patch(
                lambda: self._core.patch_namespaced_pod_status(
                    name, namespace, body, _content_type=MERGE_PATCH, _request_timeout=self._timeout),
                self._api_client, POD_STATUS, body, timeout=self._timeout, path={"name": name, "namespace": namespace})
        return pod_from_v1(pod)

    def patch_pod_annotations(
        self, namespace: str, name: str, changes: Mapping[str, str | None], *, resource_version: str | None = None
    ) -> PodObject:
        """Merge-patch annotations (None deletes). Raises NotFoundError, ConflictError (stale RV)."""
        body = metadata_patch(annotations=changes, resource_version=resource_version)
        with _api_errors(f"patch pod {namespace[:64]}/{name[:100]}"):
            pod = merge_patch(
                lambda: self._core.patch_namespaced_pod(
                    name, namespace, body, _content_type=MERGE_PATCH, _request_timeout=self._timeout),
                self._api_client, POD, body, timeout=self._timeout, path={"name": name, "namespace": namespace})
        return pod_from_v1(pod)

    def bind_pod(
        self, namespace: str, name: str, *, uid: str, node: str, annotations: Mapping[str, str] | None = None
    ) -> None:
        """POST pods/binding (``_preload_content=False``, see module docstring); ``annotations`` travel as the
        Binding's ``metadata.annotations``, which the server merges into the pod's in the same write. Raises
        ConflictError (already bound or terminating; UID mismatch), NotFoundError."""
        body = client.V1Binding(
            api_version="v1",
            kind="Binding",
            metadata=client.V1ObjectMeta(name=name, namespace=namespace, uid=uid or None,
                                         annotations=dict(annotations) if annotations else None),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        with _api_errors(f"bind pod {namespace[:64]}/{name[:100]} to {node[:100]}"):
            response: Any = self._core.create_namespaced_pod_binding(
                name, namespace, body, _preload_content=False, _request_timeout=self._timeout
            )
            try:
                response.read()
            finally:
                response.release_conn()

    # ------------------------------------------------------------------ events and leases
    def create_event(self, event: ClusterEvent) -> None:
        """Create a core/v1 Event in ``event.namespace``, or, for a repeat of an Event this adapter created
        (:mod:`domain.kube.events`), merge-patch that Event's ``count`` and ``lastTimestamp`` as client-go's
        recorder does; a repeat whose Event cannot be patched — gone (expired after the server's event TTL, 1 h by
        default) or not patchable under an older release's RBAC (create only) — creates a new one. Raises
        ClusterError (best effort: the caller logs)."""
        what = f"event {event.reason[:64]} for {event.kind}/{event.name[:100]}"
        with self._event_lock:
            now = time.time()
            seen = self._events.seen(event)
            if seen is not None:
                repeat = seen.repeated(now=now)
                try:
                    with _api_errors(f"patch {what}"):
                        patch = event_repeat_patch(count=repeat.count, now=repeat.last)
                        merge_patch(
                            lambda: self._core.patch_namespaced_event(
                                seen.name, event.namespace, patch, _content_type=MERGE_PATCH,
                                _request_timeout=self._timeout),
                            self._api_client, EVENT, patch, timeout=self._timeout,
                            path={"name": seen.name, "namespace": event.namespace})
                except ClusterError:  # expired (404), or no patch right (403, RBAC of an older release): create
                    self._events.forget(event)
                else:
                    self._events.record(event, repeat)
                    return
            body = event_to_v1(event, component=self._component, now=now)
            with _api_errors(f"create {what}"):
                created: Any = self._core.create_namespaced_event(event.namespace, body,
                                                                   _request_timeout=self._timeout)
            name = getattr(getattr(created, "metadata", None), "name", None)
            if isinstance(name, str) and name:
                self._events.record(event, SeenEvent(name, 1, now, now))

    def get_lease(self, namespace: str, name: str) -> LeaseRecord:
        """A Lease. Raises NotFoundError."""
        with _api_errors(f"get lease {namespace[:64]}/{name[:100]}"):
            lease = self._coordination.read_namespaced_lease(name, namespace, _request_timeout=self._timeout)
        return lease_from_v1(lease)

    def create_lease(self, lease: LeaseRecord) -> LeaseRecord:
        """Create a Lease. Raises ConflictError if it exists."""
        body = lease_to_v1(attrs.evolve(lease, resource_version=""))  # a create must carry no RV
        with _api_errors(f"create lease {lease.namespace[:64]}/{lease.name[:100]}"):
            created = self._coordination.create_namespaced_lease(lease.namespace, body, _request_timeout=self._timeout)
        return lease_from_v1(created)

    def update_lease(self, lease: LeaseRecord) -> LeaseRecord:
        """PUT a Lease. ``resource_version`` must be current: stale → ConflictError, empty → ClusterError 422. A
        missing Lease is created (the server allows create-on-PUT for Leases)."""
        with _api_errors(f"update lease {lease.namespace[:64]}/{lease.name[:100]}"):
            replaced = self._coordination.replace_namespaced_lease(
                lease.name, lease.namespace, lease_to_v1(lease), _request_timeout=self._timeout
            )
        return lease_from_v1(replaced)

    # ------------------------------------------------------------------ watch
    def _watch(
        self,
        list_fn: Callable[..., Any],
        convert: Callable[[Any], _T],
        resource_version: str,
        timeout_seconds: float,
        what: str,
        **kwargs: Any,
    ) -> Iterator[WatchEvent[_T]]:
        server_timeout = max(1, math.ceil(timeout_seconds))
        watcher = watch.Watch()
        stream = watcher.stream(
            list_fn,
            resource_version=resource_version,
            timeout_seconds=server_timeout,
            allow_watch_bookmarks=True,
            _request_timeout=wire_timeout(server_timeout + WATCH_SOCKET_SLACK),
            **kwargs,
        )
        try:
            with _api_errors(f"{what} from resourceVersion {resource_version[:40]}"):
                for raw in stream:
                    kind = EventType(raw["type"])
                    if kind is EventType.BOOKMARK:
                        metadata = raw["raw_object"].get("metadata", {})
                        yield WatchEvent(kind, None, str(metadata.get("resourceVersion", "")))
                        continue
                    obj = raw["object"]
                    yield WatchEvent(kind, convert(obj), obj.metadata.resource_version or "")
        finally:
            watcher.stop()
            stream.close()
