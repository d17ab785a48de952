"""DRA claims through the scheduler service: informer events, resync listings and the listing floor, the log of
claims counted on the safe side (``services.scheduler.service``, ``.upkeep``, ``.listing``)."""

from __future__ import annotations

import logging

import pytest

from adapters.memory.resource_claims import InMemoryResourceClaims
from adapters.prometheus import PrometheusSchedulerMetrics
from domain.dra.claims import AllocationResult, ClaimAllocation
from domain.units import GiB
from services.scheduler.service import SchedulerService, ServiceConfig
from support.kube_builders import GPU16, NOW, PROTOCOL, Clock, make_node
from support.scheduler_world import FlakyCluster, new_pod

DRIVER = PROTOCOL.dra.driver


def claim(device: str, consumed: dict[str, str] | None = None, *, name: str = "c", uid: str = "u1") -> ClaimAllocation:
    return ClaimAllocation("default", name, uid, (AllocationResult("r", DRIVER, "n1", device, consumed or {}),))


def service_with(claims: InMemoryResourceClaims) -> tuple[FlakyCluster, SchedulerService]:
    cluster = FlakyCluster()
    service = SchedulerService(cluster, PROTOCOL, PrometheusSchedulerMetrics(),
                               config=ServiceConfig(policy="binpack", admission_hold_seconds=None),
                               clock=Clock(NOW), claims=claims)
    service.on_node(cluster.create_node(make_node("n1")))
    return cluster, service


def used(service: SchedulerService) -> list[tuple[int, int]]:
    return [(g.core_used, g.memory_used) for g in service.gpus("n1")]


def test_events_book_and_release_and_a_release_wakes_waiting_pods() -> None:
    _, service = service_with(InMemoryResourceClaims())
    woken: list[int] = []
    service.change_listeners.append(lambda: woken.append(1))
    service.on_claim(claim("gpu-1", {"cores": "30", "memory": "4Gi"}))
    assert used(service) == [(0, 0), (300, 4 * GiB)]
    service.on_claim(ClaimAllocation("default", "c", "u1"))  # deallocated
    assert used(service) == [(0, 0), (0, 0)]
    assert woken == [1]
    service.on_claim(claim("gpu-0"))
    service.on_claim_deleted(claim("gpu-0"))
    assert used(service) == [(0, 0), (0, 0)]
    assert woken == [1, 1]


def test_a_resync_lists_claims_and_repairs_a_missed_event() -> None:
    claims = InMemoryResourceClaims()
    cluster, service = service_with(claims)
    claims.put(claim("gpu-0"))  # never delivered as an event
    report = service.resync()
    assert "claim:u1" in report.missing
    assert used(service) == [(1000, GPU16), (0, 0)]
    result = service.schedule_pod(new_pod(cluster, "p", gpu="2"))
    assert result.allocation is None  # one GPU is held by the claim
    claims.delete("default", "c")
    assert "claim:u1" in service.resync().extra
    assert used(service) == [(0, 0), (0, 0)]


def test_a_resync_keeps_a_claim_written_after_its_listing_and_drops_one_the_listing_outdates() -> None:
    claims = InMemoryResourceClaims()
    _, service = service_with(claims)
    listed_at = int(claims.list_claims().resource_version)
    ours = ClaimAllocation("default", "ours", "u2", claim("gpu-0").results, resource_version=str(listed_at + 2))
    service.on_claim(ours)  # our write's answer, newer than what the resync will list (the store lags here)
    stale = ClaimAllocation("default", "old", "u3", claim("gpu-1").results, resource_version=str(listed_at))
    service.on_claim(stale)  # deleted by the time of the listing; its delete event is late
    report = service.resync()
    assert used(service) == [(1000, GPU16), (0, 0)]  # the upkeep passed the listing's version to the adoption
    assert "claim:u3" in report.extra


def test_a_claim_event_the_adopted_listing_already_holds_is_not_reapplied() -> None:
    claims = InMemoryResourceClaims()
    _, service = service_with(claims)
    stored = claims.put(claim("gpu-0"))
    service.resync()
    service.listing.claim_watermark = lambda: stored.resource_version
    older = claim("gpu-1")  # an event at the listing's resourceVersion: already in the adopted books
    service.on_claim(ClaimAllocation(older.namespace, older.name, older.uid, older.results,
                                     resource_version=stored.resource_version))
    assert used(service) == [(1000, GPU16), (0, 0)]


def test_a_claim_counted_on_the_safe_side_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    _, service = service_with(InMemoryResourceClaims())
    with caplog.at_level(logging.WARNING, logger="services.scheduler.service"):
        service.on_claim(claim("gpu-1-mig-1g.10gb-0"))
        service.on_claim(claim("gpu-1-mig-1g.10gb-0"))
    warned = [r for r in caplog.records if "safe side" in r.getMessage()]
    assert len(warned) == 1
    assert used(service) == [(0, 0), (1000, GPU16)]
