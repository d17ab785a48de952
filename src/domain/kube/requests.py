"""Each pod's request parsed once: :class:`PodRequests`, :func:`~domain.kube.translate.pod_request` memoised per pod.

A pod's request is a function of its identity (UID, namespace, name), its containers, its GPU selector
annotations and the resources a claim serves (``claim_served``) only, so a pod seen again with the same ones
(another informer update, the listing of a resync, the typical-pod observer, the extender's bind) reuses the
parse, and a pod whose containers, selector and served resources equal those of an already parsed valid pod
(replicas of one template) reuses that parse under its own identity. Invariant: the
memo answers exactly what :func:`pod_request` would, including its error (errors are never shared between pods:
they name the pod); an entry is replaced when any of those inputs changes and dropped when the pod is forgotten.
Pod objects are frozen and their mappings are never changed in place, so the very object seen before is a hit
without comparing its content.
"""

from __future__ import annotations

import attrs

from domain.errors import InvalidRequestError
from domain.kube.objects import PodObject
from domain.kube.protocol import ProtocolConstants
from domain.kube.translate import pod_request
from domain.request import PodRequest

_Key = tuple[object, ...]
_FIELDS = tuple(field.name for field in attrs.fields(PodRequest))
SHARED_TEMPLATES = 4096
"""Most distinct valid pod contents kept for sharing (the table is emptied when full: a bound, not a cache policy)."""


def _renamed(template: PodRequest, pod: PodObject) -> PodRequest:
    """``template`` under ``pod``'s UID, namespace and name. The validation of :class:`PodRequest` is not run
    again: it passed for ``template``, whose content is ``pod``'s, and of the identity it only requires a non-empty
    UID (the caller's condition). Equals ``attrs.evolve(template, uid=..., namespace=..., name=...)``."""
    clone = object.__new__(PodRequest)
    for name in _FIELDS:
        object.__setattr__(clone, name, getattr(template, name))
    object.__setattr__(clone, "uid", pod.uid)
    object.__setattr__(clone, "namespace", pod.namespace)
    object.__setattr__(clone, "name", pod.name)
    return clone


class PodRequests:
    """:func:`pod_request` under ``protocol``, memoised by pod UID and shared across pods of equal content (module
    docstring). Not thread-safe."""

    def __init__(self, protocol: ProtocolConstants) -> None:
        self.protocol = protocol
        keys = protocol.annotations
        self._selector_keys = (keys.pod_gpu_models, keys.pod_gpu_uuids, keys.pod_gpu_uuids_exclude,
                               keys.pod_gpu_topology)
        self._memo: dict[str, tuple[PodObject, _Key, PodRequest | InvalidRequestError]] = {}
        self._shared: dict[_Key, PodRequest] = {}

    def _content(self, pod: PodObject) -> _Key:
        """What :func:`pod_request` reads of ``pod`` besides its identity: containers, selector annotations and the
        resources a claim serves."""
        containers = tuple([(c.name, c.init, tuple(sorted(c.requests.items())), tuple(sorted(c.limits.items())))
                            for c in pod.containers])  # a list first: cheaper than a generator
        get = pod.annotations.get
        models, uuids, excluded, topology = self._selector_keys
        return (containers, (get(models), get(uuids), get(excluded), get(topology)), pod.claim_served)

    def get(self, pod: PodObject) -> PodRequest:
        """The request of ``pod``. Raises :class:`InvalidRequestError` as :func:`pod_request` does."""
        hit = self._memo.get(pod.uid)
        if hit is None or hit[0] is not pod:  # the same (frozen) object needs no comparison
            content = self._content(pod)
            key = (pod.namespace, pod.name, content)
            value = self._parse(pod, content) if hit is None or hit[1] != key else hit[2]
            hit = (pod, key, value)
            if pod.uid:
                self._memo[pod.uid] = hit
        if isinstance(hit[2], InvalidRequestError):
            raise hit[2].with_traceback(None)  # a fresh traceback each time, not one growing per raise
        return hit[2]

    def _parse(self, pod: PodObject, content: _Key) -> PodRequest | InvalidRequestError:
        template = self._shared.get(content)
        if template is not None and pod.uid:  # an empty UID is refused by pod_request itself
            return _renamed(template, pod)
        try:
            value = pod_request(pod, self.protocol)
        except InvalidRequestError as error:
            return error
        if len(self._shared) >= SHARED_TEMPLATES:
            self._shared.clear()
        self._shared[content] = value
        return value

    def forget(self, uid: str) -> None:
        """Drop the entry of pod ``uid`` (deleted, ended or replaced)."""
        self._memo.pop(uid, None)

    def __len__(self) -> int:
        return len(self._memo)
