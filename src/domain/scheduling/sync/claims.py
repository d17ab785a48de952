"""DRA ResourceClaims in the scheduler's ledger: :class:`ClaimEvents`, one book for classic pods and claims.

kube-scheduler's DRA allocator places claims for our driver's devices without asking this scheduler; the ledger
still has to count what they hold, or it would place a classic pod on a GPU a claim took. Rules:

* every claim whose ``status.allocation`` holds devices of our driver (``protocol.dra.driver``) is booked on the
  node of each pool it names (pool = node name) as :func:`domain.dra.booking.book_on_node` says, keyed
  ``claim:<uid>``, with no pod slot, CPU or host memory; a claim on a node not seen yet is booked when the node
  arrives, and again from its stored object whenever the node's GPU identity changes;
* the MIG instances a claim holds on GPUs in MIG mode go to the MIG books under the same key
  (:func:`domain.dra.booking.book_mig_on_node`, :meth:`~domain.scheduling.mig.books.MigBooks.hold`), kept there
  across rebuilds of the node's MIG books;
* what cannot be mapped exactly counts as the whole GPU and is recorded in :attr:`ClaimEvents.claim_problems`
  (logged by the service); a MIG device the GPU's table does not know is recorded there and not booked; a device
  whose GPU cannot be told gates the node for GPU pods while the claim holds it (never a silent drop). The GPUs
  are those the ledger counts for the node (its inventory annotation, the last good list, or our driver's
  ResourceSlices): on a node with none yet, a claim only gates it (it is gated for GPU pods anyway) and is not
  reported as a problem;
* a claim whose allocation goes (deallocated), that leaves our driver, or is deleted (plainly, or by a new UID
  under its ``namespace/name``) is released; events are idempotent and keyed by UID; a claim is never booked from
  an object older than the one last seen (numbered resourceVersions), nor under a UID already deleted (the last
  :data:`DELETED_KEPT` deletions are remembered: a write's answer can arrive after the informer's delete);
* after a claim change the node's plan-less pods are re-inferred on top of it, so the books stay a function of the
  objects; :meth:`domain.scheduling.sync.LedgerSync.rebuild` books the listed claims the same way, and adopting a
  rebuild keeps what the live books saw newer than the listing (:meth:`ClaimEvents.take_newer`).

Not thread-safe: the caller serialises events (as for :class:`~domain.scheduling.sync.events.LedgerEvents`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

import attrs

from domain.allocation import add_usage
from domain.dra.booking import (
    CLAIM_RECORD_PREFIX,
    book_mig_on_node,
    book_on_node,
    claim_record_uid,
    is_claim_record,
    node_results,
)
from domain.dra.claims import ClaimAllocation
from domain.kube.objects import PodObject
from domain.kube.protocol import ProtocolConstants
from domain.kube.versions import older_version
from domain.ledger import ClusterLedger
from domain.mig.gpu import PlacementMode
from domain.scheduling.sync.events import LedgerEvents
from domain.scheduling.sync.overbooking import checks_books

DELETED_KEPT = 10_000
"""Deleted claim UIDs a :class:`ClaimEvents` remembers, oldest forgotten first: UIDs are never reused, so only a
late answer to a write made before the delete can name one, and such an answer comes within one request's time."""


class ClaimEvents(LedgerEvents):
    """The claim half of the informer events (module docstring). Public state: ``claim_problems`` (claim
    ``namespace/name`` → what was counted on the safe side or left the node gated, for the log)."""

    def __init__(self, ledger: ClusterLedger, protocol: ProtocolConstants, *, clock: Callable[[], float],
                 assumed_ttl_seconds: float = 60.0, mig_mode: PlacementMode = PlacementMode.STATIC,
                 hold_window_seconds: float | None = None) -> None:
        super().__init__(ledger, protocol, clock=clock, assumed_ttl_seconds=assumed_ttl_seconds,
                         mig_mode=mig_mode, hold_window_seconds=hold_window_seconds)
        self._claims: dict[str, ClaimAllocation] = {}  # claim UID → last object holding devices of ours
        self._claim_uid_by_key: dict[str, str] = {}
        self._expected: dict[str, tuple[str, frozenset[str]]] = {}  # claim UID → (pod UID, its ask containers)
        self._seen: dict[str, ClaimAllocation] = {}  # namespace/name → the last object seen, whatever its driver
        self._deleted: dict[str, None] = {}  # the last DELETED_KEPT deleted claim UIDs, oldest first
        self.claim_problems: dict[str, str] = {}

    def _label(self, uid: str) -> str:
        if is_claim_record(uid):
            claim = self._claims.get(uid.removeprefix(CLAIM_RECORD_PREFIX))
            return uid if claim is None else f"claim {claim.key}"
        return super()._label(uid)

    @property
    def claims(self) -> dict[str, ClaimAllocation]:
        """The claims holding devices of our driver, by claim UID (a copy)."""
        return dict(self._claims)

    def claims_held(self, node: str, *, kept: Collection[str] = ()) -> dict[str, dict[int, tuple[int, int]]]:
        """Pod UID → per-GPU ``(core milli, memory bytes)`` of the claims on ``node`` reserved for that pod alone
        (``status.reservedFor``), as booked: what deleting the pod frees once the resourceclaim controller
        deallocates them (preemption, :mod:`domain.scheduling.preemption`). Claims shared by several pods free
        nothing and are left out, as are the claims of UID in ``kept`` (those the preemptor itself will use)."""
        out: dict[str, dict[int, tuple[int, int]]] = {}
        for uid, claim in self._claims.items():
            record = self.ledger.record(claim_record_uid(uid))
            if len(claim.reserved_for) != 1 or record is None or record.node != node or uid in kept:
                continue
            add_usage(out.setdefault(claim.reserved_for[0], {}), record.per_gpu_usage())
        return out

    def claims_leaving(self, node: str, gone: Collection[str]) -> list[str]:
        """Ledger record UIDs of the claims on ``node`` reserved only for pods of ``gone`` (UIDs evicted for a
        preemptor) that these books no longer hold bound: the resourceclaim controller deallocates such a claim
        next, so preemption counts it as freed, as it counts terminating pods (and evicts nobody more for it)."""
        out = []
        for uid, claim in self._claims.items():
            record = self.ledger.record(claim_record_uid(uid))
            if record is None or record.node != node or not claim.reserved_for:
                continue
            if all(consumer in gone and consumer not in self._pods for consumer in claim.reserved_for):
                out.append(claim_record_uid(uid))
        return out

    def seen_claim(self, namespace: str, name: str) -> ClaimAllocation | None:
        """The claim ``namespace/name`` as last seen (any claim, allocated or not, any driver), None when none is
        known: what the scheduler places a pod's claims from before asking the API (:mod:`domain.dra.allocate`; a
        version behind only fails the write that follows, which is preconditioned on it)."""
        return self._seen.get(f"{namespace}/{name}")

    def holds_claim(self, claim_uid: str) -> bool:
        """True while the claim with UID ``claim_uid`` holds devices of our driver (is in the books or waits for
        its node)."""
        return claim_uid in self._claims

    def expect_claims(self, pod_uid: str, asks: Mapping[str, frozenset[str]]) -> None:
        """Pending pod ``pod_uid``'s reservation holds, as ask containers, what the claims of ``asks`` (claim UID →
        container names) will hold once allocated (:mod:`domain.dra.allocate`): when such a claim is booked, by our
        own write or kube-scheduler's, those containers leave the reservation in the same event, so the GPUs are
        never counted twice."""
        for claim_uid, names in asks.items():
            self._expected[claim_uid] = (pod_uid, names)

    def expecting(self, claim_uid: str) -> str | None:
        """The UID of the pod whose reservation holds what the claim with UID ``claim_uid`` will hold once
        allocated (:meth:`expect_claims`), or None: another pod using that claim must wait until it is written."""
        entry = self._expected.get(claim_uid)
        return None if entry is None else entry[0]

    def forget_expected(self, pod_uid: str) -> None:
        """Drop what :meth:`expect_claims` recorded for ``pod_uid`` (its reservation is gone)."""
        for claim_uid in [c for c, (uid, _) in self._expected.items() if uid == pod_uid]:
            del self._expected[claim_uid]

    def _hand_over(self, claim_uid: str) -> None:
        """The expected claim ``claim_uid`` is being booked: its ask containers leave the pod's reservation (its
        MIG reservation too)."""
        entry = self._expected.pop(claim_uid, None)
        if entry is not None:
            self._hand_over_mig(*entry)
        held = None if entry is None else self._assumed.get(entry[0])
        if entry is None or held is None:
            return
        allocation, at = held
        kept = tuple(c for c in allocation.containers if c.container not in entry[1])
        if len(kept) == len(allocation.containers):
            return
        reduced = attrs.evolve(allocation, containers=kept)
        self.ledger.release(allocation.pod_uid)
        self.ledger.reserve(reduced)  # a part of what was reserved: it fits
        self._assumed[allocation.pod_uid] = (reduced, at)

    def _hand_over_mig(self, pod_uid: str, names: frozenset[str]) -> None:
        mig = self.books.reservation(pod_uid)
        if mig is None or not any(b.container in names for b in mig.bookings):
            return
        kept = tuple(b for b in mig.bookings if b.container not in names)
        self.books.release(pod_uid)
        self.books.forget(pod_uid)
        if kept:
            reduced = attrs.evolve(mig, bookings=kept)
            self.books.observe(reduced)  # a part of what was held: recorded, never refused
            self.books.remember(pod_uid, reduced)

    def on_pod(self, pod: PodObject) -> None:
        """:meth:`LedgerEvents.on_pod`; a pod's ``claim_served`` (resources kube-scheduler serves through a claim
        it made) is trusted only on a node whose GPUs come from ResourceSlices (it serves them so only where no
        device plugin advertises them): elsewhere the field is stale (left by a binding that failed after it was
        written) and the pod's own request counts."""
        if pod.claim_served and pod.node_name and pod.node_name not in self.claims_only:
            pod = attrs.evolve(pod, claim_served=())
        super().on_pod(pod)

    @checks_books
    def on_claim(self, claim: ClaimAllocation) -> None:
        """Claim added or updated: book what its allocation holds of our driver, release what it no longer holds;
        idempotent. A new UID under a known ``namespace/name`` releases the old one first. An event older than the
        claim as last seen (the informer delivering, after our write's answer, the claim as it was before the
        write) changes nothing: applying it would release the allocation and book it again later, counting its GPUs
        twice in between if a pod took them. An event for a deleted UID (a write's answer arriving after the
        informer's delete) changes nothing either."""
        if claim.uid in self._deleted:
            return
        seen = self._seen.get(claim.key)
        if seen is not None and seen.uid == claim.uid and older_version(claim.resource_version, seen.resource_version):
            return
        self._seen[claim.key] = claim
        previous = self._claim_uid_by_key.get(claim.key)
        if previous is not None and previous != claim.uid:
            self._drop_claim(previous)
        old = self._claims.get(claim.uid)
        if not node_results(claim, self.protocol.dra.driver):
            if old is not None:
                self._drop_claim(claim.uid)
            return
        if old is not None and old.results == claim.results:
            self._claims[claim.uid] = claim
            return
        if old is not None:
            self._drop_claim(claim.uid)
        self._hand_over(claim.uid)
        self._claims[claim.uid] = claim
        self._claim_uid_by_key[claim.key] = claim.uid
        for node in node_results(claim, self.protocol.dra.driver):
            if node in self._counted:
                self._book_claim(claim, node)
                self._reinfer(node)

    @checks_books
    def on_claim_deleted(self, claim: ClaimAllocation) -> bool:
        """Claim deleted: release what it held, and remember its UID (no later event books it); returns True when
        it was booked."""
        self._remember_deleted(claim.uid)
        seen = self._seen.get(claim.key)
        if seen is not None and seen.uid == claim.uid:
            del self._seen[claim.key]
        if self._claim_uid_by_key.get(claim.key) == claim.uid:
            del self._claim_uid_by_key[claim.key]
        return self._drop_claim(claim.uid)

    def _remember_deleted(self, claim_uid: str) -> None:
        self._deleted.pop(claim_uid, None)
        self._deleted[claim_uid] = None
        while len(self._deleted) > DELETED_KEPT:
            del self._deleted[next(iter(self._deleted))]

    def take_newer(self, live: ClaimEvents, listed_at: str = "") -> None:
        """This instance was rebuilt from a claims listing at resourceVersion ``listed_at`` that ``live`` is about
        to adopt: apply here each claim ``live`` saw newer than the listing (our writes' answers, applied before
        the informer delivers them; the adoption refuses listings older than the informers, so nothing else is
        newer): newer than its listed copy, or, when the listing has none under its UID (made or re-made after the
        listing), newer than ``listed_at``. Only numbered resourceVersions compare (else the listing stands). The
        listed claims whose UID ``live`` saw deleted are released (``live`` keeps its own deleted UIDs, the same).
        Without this, adopting the listing would free a claim's GPUs until the informer delivered our write."""
        for claim_uid in live._deleted:
            self._remember_deleted(claim_uid)
        for listed in [c for c in self._seen.values() if c.uid in self._deleted]:
            self.on_claim_deleted(listed)
        for key, seen in live._seen.items():
            copy = self._seen.get(key)
            floor = copy.resource_version if copy is not None and copy.uid == seen.uid else listed_at
            if older_version(floor, seen.resource_version):
                self.on_claim(seen)

    def _book_claim(self, claim: ClaimAllocation, node: str) -> None:
        """Book ``claim`` on counted ``node`` from its stored results (no re-inference)."""
        results = node_results(claim, self.protocol.dra.driver).get(node, ())
        gpus = self._counted[node].gpus
        booking = book_on_node(claim, node, results, gpus)
        uid = claim_record_uid(claim.uid)
        mig = book_mig_on_node(claim, node, results, gpus, layout=self.books.last_layout(node)[0],
                               dynamic=self.mig_mode is PlacementMode.DYNAMIC)
        held = "" if mig.record is None else self.books.hold(mig.record)
        if mig.record is None:
            self.books.unhold(uid)
        self._note_mig(uid, held)  # why its instances are not in the MIG books, as for a pod's
        notes = [*booking.problems, *mig.problems, *([booking.unknown] if booking.unknown else [])]
        if notes and self._counted[node].gpus:  # a node without GPU inventory (DRA only) is gated anyway
            self.claim_problems[claim.key] = "; ".join(notes)
        else:
            self.claim_problems.pop(claim.key, None)
        self._gates.mark_gpu_unknown(node, uid, booking.unknown or None, now=self.clock())
        if booking.record is not None:
            self.ledger.observe(booking.record)
            self.sources.pop(uid, None)

    def _drop_claim(self, claim_uid: str) -> bool:
        claim = self._claims.pop(claim_uid, None)
        if claim is None:
            return False
        self.claim_problems.pop(claim.key, None)
        if self._claim_uid_by_key.get(claim.key) == claim_uid:
            del self._claim_uid_by_key[claim.key]
        uid = claim_record_uid(claim_uid)
        self.books.unhold(uid)
        self._note_mig(uid, "")
        record = self.ledger.release(uid)
        for node in node_results(claim, self.protocol.dra.driver):
            if self._gates.is_unknown(node, uid):
                self._gates.mark_gpu_unknown(node, uid, None, now=self.clock())
        if record is not None:
            self._reinfer(record.node)
        return True

    def _recount_claims(self, node: str) -> None:
        """Re-book every stored claim on ``node`` (its GPU identity changed or it came back; the caller released
        the node's records and re-infers afterwards)."""
        for uid in sorted(self._claims):
            claim = self._claims[uid]
            if node in node_results(claim, self.protocol.dra.driver):
                self._book_claim(claim, node)
