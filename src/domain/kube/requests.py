"""Each pod's request parsed once: :class:`PodRequests`, :func:`~domain.kube.translate.pod_request` memoised per pod.

A pod's request is a function of its UID, containers and annotations only, so a pod seen again with the same
ones (another informer update, the listing of a resync, the typical-pod observer, the extender's bind) reuses
the parse. Invariant: the memo answers exactly what :func:`pod_request` would, including its error; an entry is
replaced when any of those inputs changes and dropped when the pod is forgotten.
"""

from __future__ import annotations

from domain.errors import InvalidRequestError
from domain.kube.objects import PodObject
from domain.kube.protocol import ProtocolConstants
from domain.kube.translate import pod_request
from domain.request import PodRequest

_Key = tuple[object, ...]


def _key(pod: PodObject) -> _Key:
    containers = tuple((c.name, c.init, tuple(sorted(c.requests.items())), tuple(sorted(c.limits.items())))
                       for c in pod.containers)
    return (pod.namespace, pod.name, containers, tuple(sorted(pod.annotations.items())))


class PodRequests:
    """:func:`pod_request` under ``protocol``, memoised by pod UID (module docstring). Not thread-safe."""

    def __init__(self, protocol: ProtocolConstants) -> None:
        self.protocol = protocol
        self._memo: dict[str, tuple[_Key, PodRequest | InvalidRequestError]] = {}

    def get(self, pod: PodObject) -> PodRequest:
        """The request of ``pod``. Raises :class:`InvalidRequestError` as :func:`pod_request` does."""
        key = _key(pod)
        hit = self._memo.get(pod.uid)
        if hit is None or hit[0] != key:
            try:
                value: PodRequest | InvalidRequestError = pod_request(pod, self.protocol)
            except InvalidRequestError as error:
                value = error
            hit = (key, value)
            if pod.uid:
                self._memo[pod.uid] = hit
        if isinstance(hit[1], InvalidRequestError):
            raise hit[1].with_traceback(None)  # a fresh traceback each time, not one growing per raise
        return hit[1]

    def forget(self, uid: str) -> None:
        """Drop the entry of pod ``uid`` (deleted, ended or replaced)."""
        self._memo.pop(uid, None)

    def __len__(self) -> int:
        return len(self._memo)
