"""The standalone scheduler's ResourceClaim writes (:class:`~ports.claim_writes.ClaimWritesApi`) over the official
client's ``ResourceV1Api`` (``resource.k8s.io/v1``), on the API server's JSON (:mod:`.rawjson`).

Every write is a read-modify-write of the whole object (``PUT``, the main resource for the finalizer, the
``status`` subresource for allocation and ``reservedFor``) carrying the resourceVersion last read, so the API
server refuses it with 409 when anyone changed the claim in between; ``allocate`` and ``reserve`` start from the
object at the resourceVersion the caller decided on (else :class:`~ports.cluster.ConflictError`): the one ``get``
or the last write returned, kept per claim (at most :data:`KEPT` objects), else read again. So allocating a claim
just read costs two writes, as kube-scheduler's (finalizer, then status).
``unreserve`` (a rollback, idempotent) re-reads and retries up to :data:`UNRESERVE_TRIES` times on a conflict.
Fields the domain does not model are kept as read.
"""

from __future__ import annotations

import collections
import copy
import threading
from collections.abc import Sequence
from typing import Any

from kubernetes import client

from domain.dra.claims import AllocationResult, ClaimAllocation
from ports.claim_writes import DELETE_PROTECTION, Consumer
from ports.cluster import ClusterError, ConflictError, NotFoundError

from .compat import wire_timeout
from .errors import api_errors
from .rawjson import read_json
from .resourceclaims import claim_from_json

KEPT = 4096
"""Claim objects kept between a read and the writes that follow it (the least recently used go first)."""
UNRESERVE_TRIES = 3
"""Read-modify-write attempts of :meth:`KubernetesClaimWrites.unreserve` before a conflict is raised."""


def _result_json(result: AllocationResult) -> dict[str, Any]:
    out: dict[str, Any] = {"request": result.request, "driver": result.driver, "pool": result.pool,
                           "device": result.device}
    if result.consumed:
        out["consumedCapacity"] = dict(result.consumed)
    if result.share_id is not None:
        out["shareID"] = result.share_id
    return out


def _consumer_json(consumer: Consumer) -> dict[str, str]:
    return {"resource": "pods", "name": consumer.name, "uid": consumer.uid}


class KubernetesClaimWrites:
    """ResourceClaim reads and allocation writes through ``api_client`` (module docstring); ``request_timeout``
    in seconds per call. The caller owns and closes ``api_client``."""

    def __init__(self, api_client: client.ApiClient, *, request_timeout: float = 30.0) -> None:
        self._api = client.ResourceV1Api(api_client)
        self._timeout = wire_timeout(request_timeout)
        self._lock = threading.Lock()
        self._kept: collections.OrderedDict[tuple[str, str], dict[str, Any]] = collections.OrderedDict()

    def _keep(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        with self._lock:
            key = (str(meta.get("namespace")), str(meta.get("name")))
            self._kept[key] = copy.deepcopy(obj)
            self._kept.move_to_end(key)
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)
        return obj

    def _what(self, namespace: str, name: str) -> str:
        return f"resourceclaim {namespace[:100]}/{name[:100]}"

    def _read(self, namespace: str, name: str) -> dict[str, Any]:
        what = f"get {self._what(namespace, name)}"
        with api_errors(what):
            body = read_json(self._api.read_namespaced_resource_claim(
                name, namespace, _preload_content=False, _request_timeout=self._timeout), what)
        if not isinstance(body, dict):
            raise ClusterError(f"{what}: the API server sent no object")
        return self._keep(body)

    def _put(self, obj: dict[str, Any], *, status: bool) -> dict[str, Any]:
        meta = obj["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        call = (self._api.replace_namespaced_resource_claim_status if status
                else self._api.replace_namespaced_resource_claim)
        what = f"update {'status of ' if status else ''}{self._what(namespace, name)}"
        with api_errors(what):
            payload: Any = obj  # the client sends a dict body as it is
            body = read_json(call(name, namespace, payload, _preload_content=False, _request_timeout=self._timeout),
                             what)
        if not isinstance(body, dict):
            raise ClusterError(f"{what}: the API server sent no object")
        return self._keep(body)

    def _current(self, claim: ClaimAllocation) -> dict[str, Any]:
        """The claim's object, checked to be the version (and object) ``claim`` was read as: the one kept when it
        is that version, else read again."""
        with self._lock:
            kept = self._kept.get((claim.namespace, claim.name))
            if kept is not None and claim.resource_version and (
                    (kept.get("metadata") or {}).get("resourceVersion"), (kept.get("metadata") or {}).get("uid")
            ) == (claim.resource_version, claim.uid):
                return copy.deepcopy(kept)
        obj = self._read(claim.namespace, claim.name)
        meta = obj.get("metadata") or {}
        if meta.get("uid") != claim.uid:
            raise NotFoundError(f"{self._what(claim.namespace, claim.name)}: UID {claim.uid} is gone "
                                f"(now {meta.get('uid')})")
        if claim.resource_version and meta.get("resourceVersion") != claim.resource_version:
            raise ConflictError(f"{self._what(claim.namespace, claim.name)}: changed since it was read "
                                f"(resourceVersion {claim.resource_version} → {meta.get('resourceVersion')})")
        return obj

    def get(self, namespace: str, name: str) -> ClaimAllocation | None:
        """The claim, None when absent. Raises :class:`~ports.cluster.ClusterError`."""
        try:
            obj = self._read(namespace, name)
        except NotFoundError:
            return None
        try:
            return claim_from_json(obj)
        except (ValueError, TypeError, AttributeError) as error:
            raise ClusterError(f"{self._what(namespace, name)}: unreadable: {error}") from error

    def allocate(self, claim: ClaimAllocation, results: Sequence[AllocationResult], *, node: str,
                 consumer: Consumer) -> ClaimAllocation:
        """Finalizer, then allocation and reservation (:class:`~ports.claim_writes.ClaimWritesApi`)."""
        obj = self._current(claim)
        if (obj.get("status") or {}).get("allocation"):
            raise ConflictError(f"{self._what(claim.namespace, claim.name)}: already allocated")
        finalizers = list(obj["metadata"].get("finalizers") or ())
        if DELETE_PROTECTION not in finalizers:
            obj["metadata"]["finalizers"] = [*finalizers, DELETE_PROTECTION]
            obj = self._put(obj, status=False)
        status = obj.setdefault("status", {})
        status["allocation"] = {
            "devices": {"results": [_result_json(r) for r in results]},
            "nodeSelector": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]},
        }
        status["reservedFor"] = [*(status.get("reservedFor") or ()), _consumer_json(consumer)]
        try:
            return claim_from_json(self._put(obj, status=True))
        except ClusterError:
            self._drop_finalizer(claim)
            raise

    def _drop_finalizer(self, claim: ClaimAllocation) -> None:
        """Take :data:`DELETE_PROTECTION` off an unallocated ``claim`` after a failed allocation; best effort (the
        resourceclaim controller also removes it from an unallocated claim)."""
        try:
            obj = self._read(claim.namespace, claim.name)
            if (obj.get("status") or {}).get("allocation") or (obj.get("metadata") or {}).get("uid") != claim.uid:
                return
            finalizers = list(obj["metadata"].get("finalizers") or ())
            if DELETE_PROTECTION in finalizers:
                obj["metadata"]["finalizers"] = [f for f in finalizers if f != DELETE_PROTECTION]
                self._put(obj, status=False)
        except ClusterError:
            return

    def reserve(self, claim: ClaimAllocation, consumer: Consumer) -> ClaimAllocation:
        """Append ``consumer`` to ``reservedFor`` (:class:`~ports.claim_writes.ClaimWritesApi`)."""
        obj = self._current(claim)
        status = obj.setdefault("status", {})
        if not status.get("allocation"):
            raise ConflictError(f"{self._what(claim.namespace, claim.name)}: no longer allocated")
        reserved = list(status.get("reservedFor") or ())
        if any(r.get("uid") == consumer.uid for r in reserved):
            return claim_from_json(obj)
        status["reservedFor"] = [*reserved, _consumer_json(consumer)]
        return claim_from_json(self._put(obj, status=True))

    def unreserve(self, claim: ClaimAllocation, consumer_uid: str, *, deallocate: bool) -> ClaimAllocation:
        """Remove ``consumer_uid`` from ``reservedFor``, deallocating when asked and none is left
        (:class:`~ports.claim_writes.ClaimWritesApi`); retried on conflicts (module docstring)."""
        tries = 0
        while True:
            obj = self._read(claim.namespace, claim.name)
            if (obj.get("metadata") or {}).get("uid") != claim.uid:
                raise NotFoundError(f"{self._what(claim.namespace, claim.name)}: UID {claim.uid} is gone")
            try:
                return claim_from_json(self._unreserve(obj, consumer_uid, deallocate=deallocate))
            except ConflictError:
                tries += 1
                if tries >= UNRESERVE_TRIES:
                    raise

    def _unreserve(self, obj: dict[str, Any], consumer_uid: str, *, deallocate: bool) -> dict[str, Any]:
        status = obj.setdefault("status", {})
        reserved = [r for r in status.get("reservedFor") or () if r.get("uid") != consumer_uid]
        changed = len(reserved) != len(status.get("reservedFor") or ())
        status["reservedFor"] = reserved or None
        if deallocate and not reserved and status.get("allocation"):
            status["allocation"] = None
            changed = True
        if changed:
            obj = self._put(obj, status=True)
        finalizers = list(obj["metadata"].get("finalizers") or ())
        if deallocate and not (obj.get("status") or {}).get("allocation") and DELETE_PROTECTION in finalizers:
            obj["metadata"]["finalizers"] = [f for f in finalizers if f != DELETE_PROTECTION]
            obj = self._put(obj, status=False)
        return obj
