"""The pod half of :class:`~adapters.kubernetes.cluster.KubernetesCluster` over ``CoreV1Api``, bindings included (a
mixin over :class:`~.base.KubernetesApis`).

* LISTs and watches are read as raw JSON (:mod:`.rawjson`, :func:`.corejson.pod_from_json`); reads and writes go
  through the client's models (:mod:`.translate`).
* Annotation and status writes are JSON merge patches (:func:`.compat.merge_patch`; the status through the
  ``pods/status`` subresource), except a condition: ``status.conditions`` is a list, which a merge patch would
  replace whole, so it is read, then written by a strategic merge patch (the list merges by ``type``) that carries
  the read's resourceVersion (409 if the pod changed in between).
* **binding** — ``create_namespaced_pod_binding`` is called with ``_preload_content=False``: the server answers 201
  with a ``Status`` that 37.x would try to parse as ``V1Binding`` and raise after the pod was bound. The binding
  carries the pod's UID; current servers reject a mismatch with 409 (1.20 ignored it). Its ``metadata.annotations``
  are merged into the pod's in the same update that sets ``spec.nodeName`` (checked by the contract test
  ``test_bind_pod_with_annotations_writes_them_with_the_node``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from kubernetes import client

from domain.kube.objects import ContainerTermination, Listing, PodObject, PodPhase, WatchEvent
from domain.kube.podconditions import PodCondition, with_condition
from ports.cluster import ConflictError

from .base import KubernetesApis
from .compat import MERGE_PATCH, POD, POD_STATUS, STRATEGIC_MERGE_PATCH, PatchRoute, merge_patch
from .corejson import pod_from_json
from .errors import api_errors
from .rawjson import list_json, watch_json
from .translate import metadata_patch, pod_condition_patch, pod_from_v1, pod_status_patch, pod_to_v1


class KubernetesPods(KubernetesApis):
    """The pod methods of :class:`~adapters.kubernetes.cluster.KubernetesCluster` (module docstring); containers of
    pods it creates run ``_pod_image``."""

    _pod_image: str

    def list_pods(self, *, field_selector: str = "", label_selector: str = "",
                  namespace: str = "") -> Listing[PodObject]:
        """Pods of all namespaces (of ``namespace`` only, when given) matching ``field_selector`` and
        ``label_selector`` (read raw: :mod:`.rawjson`). Raises ClusterError (400 for a bad selector)."""
        selectors: dict[str, Any] = {"field_selector": field_selector or None,
                                     "label_selector": label_selector or None, "_request_timeout": self._timeout}
        if namespace:
            selectors["namespace"] = namespace
        call = self._core.list_namespaced_pod if namespace else self._core.list_pod_for_all_namespaces
        pods, rv = list_json(call, pod_from_json, "list pods", **selectors)
        return Listing(pods, rv)

    def watch_pods(self, *, resource_version: str, timeout_seconds: float,
                   field_selector: str = "") -> Iterator[WatchEvent[PodObject]]:
        """Pod changes after ``resource_version`` seen through ``field_selector``, for about ``timeout_seconds``
        (s, rounded up; read raw: :mod:`.rawjson`). The iterator raises GoneError (410) and ClusterError."""
        return watch_json(self._core.list_pod_for_all_namespaces, pod_from_json, resource_version, timeout_seconds,
                          "watch pods", field_selector=field_selector or None)

    def get_pod(self, namespace: str, name: str) -> PodObject:
        """One pod. Raises NotFoundError."""
        with api_errors(f"get pod {namespace[:64]}/{name[:100]}"):
            return pod_from_v1(self._core.read_namespaced_pod(name, namespace, _request_timeout=self._timeout))

    def create_pod(self, pod: PodObject) -> PodObject:
        """Create a pod (containers run ``pod_image``); the server assigns uid and RV and sets phase Pending.
        Raises ConflictError if it exists, NotFoundError if the namespace does not, ClusterError (422) if invalid."""
        with api_errors(f"create pod {pod.namespace[:64]}/{pod.name[:100]}"):
            created = self._core.create_namespaced_pod(
                pod.namespace, pod_to_v1(pod, image=self._pod_image), _request_timeout=self._timeout
            )
        return pod_from_v1(created)

    def delete_pod(self, namespace: str, name: str, *, grace_period_seconds: int | None = None,
                   uid: str | None = None) -> None:
        """Delete a pod; ``grace_period_seconds`` (s) None = the pod's own (30 s by default); the server deletes
        unbound or finished pods at once and marks the others terminating. ``uid``: sent as the DeleteOptions'
        precondition, so the server refuses (409) a pod of another UID under the name. Raises NotFoundError,
        ConflictError."""
        body = None
        if uid is not None:
            body = client.V1DeleteOptions(grace_period_seconds=grace_period_seconds,
                                          preconditions=client.V1Preconditions(uid=uid))
        with api_errors(f"delete pod {namespace[:64]}/{name[:100]}"):
            self._core.delete_namespaced_pod(
                name, namespace, grace_period_seconds=grace_period_seconds, body=body, _request_timeout=self._timeout
            )

    def set_pod_phase(self, namespace: str, name: str, phase: PodPhase, *,
                      terminations: Sequence[ContainerTermination] = ()) -> PodObject:
        """Merge-patch ``status.phase`` (and ``containerStatuses`` with ``terminations``) through the status
        subresource. Raises NotFoundError."""
        return self._patch_pod(f"set phase of pod {namespace[:64]}/{name[:100]}",
                               self._core.patch_namespaced_pod_status, POD_STATUS, namespace, name,
                               pod_status_patch(phase, terminations))

    def patch_pod_annotations(self, namespace: str, name: str, changes: Mapping[str, str | None], *,
                              resource_version: str | None = None) -> PodObject:
        """Merge-patch annotations (None deletes). Raises NotFoundError, ConflictError (stale RV)."""
        return self._patch_pod(f"patch pod {namespace[:64]}/{name[:100]}", self._core.patch_namespaced_pod, POD,
                               namespace, name, metadata_patch(annotations=changes, resource_version=resource_version))

    def nominate_pod(self, namespace: str, name: str, node: str) -> PodObject:
        """Merge-patch ``status.nominatedNodeName`` (null when ``node`` is empty) through the status subresource.
        Raises NotFoundError."""
        return self._patch_pod(f"nominate pod {namespace[:64]}/{name[:100]}",
                               self._core.patch_namespaced_pod_status, POD_STATUS, namespace, name,
                               {"status": {"nominatedNodeName": node or None}})

    def set_pod_condition(self, namespace: str, name: str, condition: PodCondition, *,
                          uid: str | None = None) -> PodObject:
        """Read the pod, then strategic-merge-patch the condition of ``condition``'s type through the status
        subresource with the read's resourceVersion (module docstring; transition time from this host's clock);
        a pod that changed after the read (the kubelet updates its status often) is read and written once more.
        Nothing is written when nothing would change. ``uid``: only the pod of that UID. Raises NotFoundError,
        ConflictError (another UID; the pod changed after both reads)."""
        for attempt in (1, 2):
            pod = self.get_pod(namespace, name)
            if uid is not None and uid != pod.uid:
                raise ConflictError(f'pods "{name[:100]}": precondition failed: UID in precondition: {uid!r}, UID '
                                    f"in object meta: {pod.uid!r}")
            conditions = with_condition(pod.conditions, condition, time.time())
            if conditions is None:
                return pod
            written = next(c for c in conditions if c.type == condition.type)
            try:
                return self._patch_pod(f"set condition {condition.type[:64]} of pod {namespace[:64]}/{name[:100]}",
                                       self._core.patch_namespaced_pod_status, POD_STATUS, namespace, name,
                                       pod_condition_patch(written, [c.type for c in conditions],
                                                           resource_version=pod.resource_version),
                                       content_type=STRATEGIC_MERGE_PATCH)
            except ConflictError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")  # the loop returns or raises

    def _patch_pod(self, what: str, method: Callable[..., Any], route: PatchRoute, namespace: str, name: str,
                   body: Mapping[str, object], *, content_type: str = MERGE_PATCH) -> PodObject:
        """One patch of pod ``namespace/name`` (``method`` is the client's, ``route`` its path; ``content_type``:
        a merge patch unless told otherwise) → the pod."""
        with api_errors(what):
            pod = merge_patch(
                lambda: method(name, namespace, body, _content_type=content_type, _request_timeout=self._timeout),
                self._api_client, route, body, timeout=self._timeout, path={"name": name, "namespace": namespace},
                content_type=content_type)
        return pod_from_v1(pod)

    def bind_pod(self, namespace: str, name: str, *, uid: str, node: str,
                 annotations: Mapping[str, str] | None = None) -> None:
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
        with api_errors(f"bind pod {namespace[:64]}/{name[:100]} to {node[:100]}"):
            response: Any = self._core.create_namespaced_pod_binding(
                name, namespace, body, _preload_content=False, _request_timeout=self._timeout
            )
            try:
                response.read()
            finally:
                response.release_conn()
