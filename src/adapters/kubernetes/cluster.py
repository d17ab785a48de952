"""The cluster port over the official Python client (``kubernetes`` 37.x, and 28–35 through :mod:`.compat`), one
mixin per resource over :class:`~.base.KubernetesApis`: nodes :mod:`.nodes`, pods and bindings :mod:`.pods`, Events
:mod:`.events`, Leases :mod:`.leases`, Jobs :mod:`.jobs`, ConfigMaps :mod:`.configmaps`.

Protocol facts this relies on (core/v1 and coordination.k8s.io/v1 API reference; checked by ``tests/contract`` against a
real kube-apiserver of the live version, 1.37):

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

import threading

from kubernetes import client, config

from domain.kube.events import EventCorrelator

from .compat import require_supported
from .configmaps import KubernetesConfigMaps
from .events import KubernetesEvents
from .jobs import KubernetesJobs
from .leases import KubernetesLeases
from .nodes import KubernetesNodes
from .pods import KubernetesPods

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


class KubernetesCluster(KubernetesNodes, KubernetesPods, KubernetesEvents, KubernetesLeases, KubernetesJobs,
                        KubernetesConfigMaps):
    """:class:`~ports.cluster.ClusterApi` over a configured ``kubernetes.client.ApiClient`` (module docstring; one
    mixin per resource).

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
        super().__init__(api_client, request_timeout=request_timeout)
        self._pod_image = pod_image
        self._component = component
        self._event_lock = threading.Lock()  # one Event write at a time, so a repeat never races its first create
        self._events = EventCorrelator()  # names: the Events' metadata.name

    def with_request_timeout(self, seconds: float) -> KubernetesCluster:
        """A view over the same ``ApiClient`` (same connection pool) whose non-watch calls time out after
        ``seconds``. Raises ValueError unless ``seconds`` > 0."""
        if not seconds > 0:
            raise ValueError(f"request timeout must be > 0 s, not {seconds!r}")
        view = KubernetesCluster(self._api_client, pod_image=self._pod_image, component=self._component,
                                 request_timeout=seconds)
        view._event_lock, view._events = self._event_lock, self._events  # one de-duplication for both
        return view
