"""The kubelet DRA plugin's work: prepare and unprepare ResourceClaims on this node.

:meth:`ClaimPreparer.prepare` answers every claim of a request, each with its devices or an error message
(:class:`ClaimOutcome`); one claim failing never fails the others. Per claim:

1. **Idempotent**: a claim already prepared (in the checkpoint) is answered from it, with no API read and no
   new grant (the kubelet retries, and re-prepares every claim after its own restart).
2. Read the claim (``ports.resource_claims``; by namespace/name) and check its UID: a missing claim or another UID
   (deleted and re-created) is an error.
3. Keep the allocation results of our driver in this node's pool; map them to the Runtime grant
   (:func:`domain.dra.claims.plan_claim`: whole GPUs and shares from ``consumedCapacity``).
4. Ask the Runtime for the grant (``Allocate`` keyed by the claim UID, :data:`domain.dra.claims.CLAIM_CONTAINER`,
   so the Runtime's capacity admission counts it in the same per-GPU book as device-plugin grants; a grant that
   does not fit is the claim's error). Idempotent on the Runtime side as well.
5. Judge the Runtime's mounts against the allow-list (``allowed``: HAMi-core's library and preload list, or the
   MPS pipe directory, as configured; :mod:`domain.device_plugin.response_guard`): anything else refuses the claim.
6. Write the claim's CDI spec (:func:`domain.dra.prepared.claim_spec`; ``spec_store(uid)``) with those mounts,
   then the checkpoint. A failure after the grant releases it again (nothing leaks) and is the claim's error.

:meth:`ClaimPreparer.unprepare` releases the Runtime grant, removes the CDI spec and drops the checkpoint entry; a
claim never prepared (or already unprepared) is no error. Thread-safe: calls are serialised.

The minimum Runtime is :data:`MINIMUM_RUNTIME` (features ``inventory``, ``allocate``, ``release``: 1.0.0; checked
by :meth:`ClaimPreparer.check_runtime`).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable

from domain.device_plugin.cdi import HostGpuNodes
from domain.device_plugin.response_guard import ForbiddenResponseError, ResponseAllowList
from domain.dra.claims import CLAIM_CONTAINER, ClaimPreparationError, ClaimRef, ours, plan_claim
from domain.dra.prepared import ClaimOutcome, PreparedClaim, claim_spec, prepared
from domain.errors import DomainError
from domain.runtime.features import RUNTIME_FEATURES, SemVer
from domain.runtime.types import DeviceInfo
from ports.cdi import CdiSpecError, CdiSpecStore
from ports.resource_claims import CheckpointError, PreparedClaimsStore, ResourceClaimsApi, ResourceClaimsError
from ports.runtime import NodeRuntime, NodeRuntimeError

log = logging.getLogger(__name__)

REQUIRED_FEATURES = ("inventory", "allocate", "release")
MINIMUM_RUNTIME: SemVer = max(RUNTIME_FEATURES[name].minimum for name in REQUIRED_FEATURES)
"""The oldest node Runtime the plugin works with (1.0.0): it uses ListDevices, Allocate and Release only."""


class ClaimPreparer:
    """Prepares claims of ``driver`` on ``node`` (module docstring). ``spec_store(uid)`` is the CDI spec file of
    one claim; ``host`` gives the host driver's device nodes; ``allowed``: the mounts of the Runtime's answers
    that may reach the claim's spec (default: none). Loads the checkpoint at construction (raises
    :class:`CheckpointError` when it is unreadable: a plugin that forgot prepared claims would grant twice)."""

    def __init__(self, *, driver: str, node: str, runtime: NodeRuntime, claims: ResourceClaimsApi,
                 checkpoint: PreparedClaimsStore, spec_store: Callable[[str], CdiSpecStore],
                 host: Callable[[], HostGpuNodes], allowed: ResponseAllowList | None = None) -> None:
        self.allowed = allowed or ResponseAllowList()
        self._lock = threading.Lock()
        self.driver = driver
        self.node = node
        self._runtime = runtime
        self._claims = claims
        self._checkpoint = checkpoint
        self._spec_store = spec_store
        self._host = host
        self._prepared = checkpoint.load()

    @property
    def prepared_claims(self) -> dict[str, PreparedClaim]:
        """The prepared claims by UID (a copy)."""
        with self._lock:
            return dict(self._prepared)

    def check_runtime(self) -> None:
        """Raise ``UnsupportedFeatureError`` when the Runtime lacks a feature the plugin needs."""
        self._runtime.get_version().require(*REQUIRED_FEATURES)

    def prepare(self, claims: Iterable[ClaimRef]) -> dict[str, ClaimOutcome]:
        """Every claim's outcome by UID (module docstring). Never raises for one claim's failure. The Runtime's
        devices are listed at most once per call, when a claim not yet prepared needs them."""
        with self._lock:
            devices = functools.cache(self._runtime.list_devices)
            return {claim.uid: self._prepare_one(claim, devices) for claim in claims}

    def unprepare(self, claims: Iterable[ClaimRef]) -> dict[str, str]:
        """Every claim's error by UID (empty = unprepared or never prepared)."""
        with self._lock:
            return {claim.uid: self._unprepare_one(claim) for claim in claims}

    def _prepare_one(self, claim: ClaimRef, devices: Callable[[], tuple[DeviceInfo, ...]]) -> ClaimOutcome:
        known = self._prepared.get(claim.uid)
        if known is not None:
            return ClaimOutcome(prepared=known)
        try:
            result = self._grant(claim, devices)
        except (ClaimPreparationError, DomainError, ResourceClaimsError, NodeRuntimeError, CdiSpecError,
                CheckpointError) as error:
            log.warning("prepare %s failed: %s", claim.label, error)
            message = str(error)
            return ClaimOutcome(error=message if message.startswith(claim.label) else f"{claim.label}: {message}")
        log.info("prepared %s: %s", claim.label, ", ".join(d.device for d in result.devices))
        return ClaimOutcome(prepared=result)

    def _grant(self, claim: ClaimRef, devices: Callable[[], tuple[DeviceInfo, ...]]) -> PreparedClaim:
        stored = self._claims.get(claim.namespace, claim.name)
        if stored is None:
            raise ClaimPreparationError(f"{claim.label}: the ResourceClaim does not exist")
        if stored.uid != claim.uid:
            raise ClaimPreparationError(f"{claim.label}: the ResourceClaim {claim.namespace}/{claim.name} now has UID "
                                        f"{stored.uid} (deleted and re-created)")
        results = ours(stored.results, driver=self.driver, pool=self.node)
        request = plan_claim(claim, results, devices())
        response = self._runtime.allocate(request)
        try:
            self.allowed.check(response, label=claim.label, devices=False)
            self._spec_store(claim.uid).write(claim_spec(request, response, self._host()))
            answer = prepared(claim, results, request)
            self._checkpoint.save({**self._prepared, claim.uid: answer})
        except (ForbiddenResponseError, CdiSpecError, CheckpointError):
            self._undo(claim)
            raise
        self._prepared[claim.uid] = answer
        return answer

    def _undo(self, claim: ClaimRef) -> None:
        try:
            self._runtime.release(claim.uid, CLAIM_CONTAINER)
            self._spec_store(claim.uid).remove()
        except (NodeRuntimeError, CdiSpecError) as error:
            log.error("cannot undo the grant of %s: %s", claim.label, error)

    def _unprepare_one(self, claim: ClaimRef) -> str:
        try:
            self._runtime.release(claim.uid, CLAIM_CONTAINER)
            self._spec_store(claim.uid).remove()
            if claim.uid in self._prepared:
                remaining = {uid: p for uid, p in self._prepared.items() if uid != claim.uid}
                self._checkpoint.save(remaining)
                self._prepared = remaining
        except (NodeRuntimeError, CdiSpecError, CheckpointError) as error:
            log.warning("unprepare %s failed: %s", claim.label, error)
            return f"{claim.label}: {error}"
        log.info("unprepared %s", claim.label)
        return ""
