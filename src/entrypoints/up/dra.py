"""``ljrk up --dra``: the workload's GPUs asked for through ResourceClaims, and the part of kube-controller-manager's
resourceclaim controller the run needs.

**Claims** (:func:`workload_claim`, :func:`claim_pod`): each GPU pod of the workload gets one ResourceClaim of its
own name in its namespace, created just before the pod, with one device request ``gpu`` the way the claim-migrate
webhook maps classic requests (``domain.dra.migrate``): ``N`` whole GPUs → the whole-GPU DeviceClass, ``ExactCount``
``N``; a share of ``P`` % → the share DeviceClass, capacity ``cores: P`` and ``memory`` = ``P`` % of the node GPUs'
memory (the classic default rule, :func:`domain.request.resolve_share`; the allocator rounds it up to the memory
unit). The pod keeps its CPU and memory and lists the claim in ``spec.resourceClaims``; it asks for none of our
extended resources. Pods without GPUs get no claim.

**Claim releaser** (:class:`ClaimReleaser`): watches the pods; when a pod is terminal or gone it takes the pod out
of its claims' ``reservedFor``, deallocates a claim reserved for nobody, and deletes the claims ``ljrk up`` made for
that pod (as the garbage collector deletes a template claim with its pod). Invariant: a claim is released once per
pod; what is still owed is listed by :meth:`ClaimReleaser.owed` (the run is not quiescent while it is not empty).
"""

from __future__ import annotations

import logging
import threading
import uuid

import attrs

from adapters.memory.resource_claims import InMemoryResourceClaims
from domain.dra.claims import ClaimAllocation, DeviceAsk
from domain.dra.migrate import REQUEST_NAME, ClaimShape, quantity
from domain.kube.objects import ContainerSpec, PodClaim, PodObject
from domain.kube.protocol import ProtocolConstants
from domain.request import resolve_share
from domain.simulation.workload import TracePod
from domain.units import MILLI_PER_GPU, MILLI_PER_PERCENT
from ports.cluster import ClusterApi
from services._shared.informer import Informer

log = logging.getLogger(__name__)

POD_CLAIM = "gpu"
"""The ``spec.resourceClaims[].name`` of every workload pod's claim."""


def workload_claim(pod: TracePod, protocol: ProtocolConstants, *, namespace: str, name: str,
                   gpu_memory_bytes: int) -> ClaimAllocation | None:
    """The ResourceClaim of trace pod ``pod`` (module docstring), named ``namespace/name``, with a fresh UID; None
    for a pod without GPUs. ``gpu_memory_bytes``: the memory of the nodes' GPUs (bytes, > 0). Raises
    ``domain.errors.InvalidRequestError`` for a shape no claim expresses (:class:`~domain.dra.migrate.ClaimShape`)."""
    if pod.num_gpu <= 0:
        return None
    dra = protocol.dra
    if pod.gpu_milli == MILLI_PER_GPU:  # whole GPUs, as pod_object tells them
        shape = ClaimShape(dra.device_class_gpu, count=pod.num_gpu)
        ask = DeviceAsk(REQUEST_NAME, shape.device_class, count=shape.count)
    else:
        _, memory = resolve_share(core_milli=pod.gpu_milli, memory_bytes=None, gpu_memory_bytes=gpu_memory_bytes)
        shape = ClaimShape(dra.device_class_share, cores=pod.gpu_milli // MILLI_PER_PERCENT, memory_bytes=memory)
        ask = DeviceAsk(REQUEST_NAME, shape.device_class,
                        capacity={"cores": str(shape.cores), "memory": quantity(memory)})
    return ClaimAllocation(namespace, name, str(uuid.uuid4()), requests=(ask,))


def claim_pod(pod: PodObject, claim: ClaimAllocation, protocol: ProtocolConstants) -> PodObject:
    """``pod`` asking for its GPUs through ``claim``: our extended resources removed from every container, the
    claim added to ``spec.resourceClaims`` as :data:`POD_CLAIM`."""
    ours = {protocol.resources.gpu, protocol.resources.core, protocol.resources.memory}

    def strip(spec: ContainerSpec) -> ContainerSpec:
        return attrs.evolve(spec, requests={k: v for k, v in spec.requests.items() if k not in ours},
                            limits={k: v for k, v in spec.limits.items() if k not in ours})

    return attrs.evolve(pod, containers=tuple(strip(c) for c in pod.containers),
                        resource_claims=(PodClaim(POD_CLAIM, claim_name=claim.name),))


class ClaimReleaser:
    """Releases the claims of ended pods (module docstring) over ``cluster`` (the pods) and ``claims``; deletes
    the claims :meth:`made` was told of. ``watch_timeout_s``: seconds one pod watch lasts. Thread-safe."""

    def __init__(self, cluster: ClusterApi, claims: InMemoryResourceClaims, *, watch_timeout_s: float = 1.0) -> None:
        self.claims = claims
        self._lock = threading.Lock()
        self._made: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.released = 0
        """Reservations of ended pods taken back so far."""
        self.pods: Informer[PodObject] = Informer(
            name="up-claim-releaser", list_fn=cluster.list_pods,
            watch_fn=lambda rv, t: cluster.watch_pods(resource_version=rv, timeout_seconds=t),
            key=lambda p: p.key, uid=lambda p: p.uid, on_upsert=self._on_pod, on_delete=self._release,
            watch_timeout=watch_timeout_s)

    def start(self) -> None:
        """Start watching the pods (a no-op when started)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.pods.run, args=(self._stop,), name="ljrk-up-claims",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop watching and join the thread. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def made(self, claim: ClaimAllocation) -> None:
        """``claim`` belongs to the workload pod of the same namespace and name: delete it once that pod ended."""
        with self._lock:
            self._made.add(claim.key)

    def forget(self, key: str) -> None:
        """The claim ``namespace/name`` is no longer the workload's (its pod was never created)."""
        with self._lock:
            self._made.discard(key)

    def owed(self) -> list[str]:
        """Claims (``namespace/name``) still reserved for a pod that ended or is gone, or made for a pod that is
        not running or pending any more (also while the watch has not shown that pod yet)."""
        live = {p.key: p.uid for p in list(self.pods.cache.values()) if not p.phase.terminal}
        with self._lock:
            made = set(self._made)
        return [c.key for c in self.claims.list_claims().items
                if set(c.reserved_for) - set(live.values()) or (c.key in made and c.key not in live)]

    def _on_pod(self, pod: PodObject) -> None:
        if pod.phase.terminal:
            self._release(pod)

    def _release(self, pod: PodObject) -> None:
        """Take ended ``pod`` out of its claims (module docstring)."""
        for entry in pod.resource_claims:
            name = entry.resolved
            claim = self.claims.get(pod.namespace, name) if name else None
            if claim is None:
                continue
            if pod.uid in claim.reserved_for or (claim.allocated and not claim.reserved_for):
                claim = self.claims.unreserve(claim, pod.uid, deallocate=True)
                with self._lock:
                    self.released += 1
                log.info("claim %s released by pod %s", claim.key, pod.key)
            with self._lock:
                mine = claim.key in self._made and not claim.reserved_for
                if mine:
                    self._made.discard(claim.key)
            if mine:
                self.claims.delete(claim.namespace, claim.name)
