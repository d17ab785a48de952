"""Leader election over a Lease (services._shared.leader), on the in-memory cluster.

Covers: first candidate creates the Lease and leads; a second candidate stays standby while the holder renews;
takeover only after the record stayed unchanged for lease_duration on the standby's own clock; a leader that
cannot renew within renew_deadline steps down; release hands over at once; a lost write race (409) is not
leadership; bad timings are rejected; run() calls the start/stop callbacks and releases on stop; any exception
of an attempt — a transport error (UnavailableError), a raw OSError, a bug — is a failed attempt (never raised;
the leader steps down after renew_deadline), and run() outlives failing attempts and failing callbacks; a record a
slow GET brings back is aged from when it arrived, so a stuck old leader cannot steal the Lease back.
"""

from __future__ import annotations

import threading
import time

import pytest

from adapters.memory.cluster import InMemoryCluster
from domain.errors import InvalidRequestError
from ports.cluster import ConflictError, UnavailableError
from services._shared.leader import LeaderConfig, LeaderElector
from support.polling import wait_for


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(cluster: InMemoryCluster, identity: str, clock: Clock) -> LeaderElector:
    config = LeaderConfig("kube-system", "lj-runtimekit-scheduler", identity, 15, 10, 2)
    return LeaderElector(cluster, config, clock=clock, wall_clock=clock)


def test_first_candidate_leads_and_second_waits_while_holder_renews() -> None:
    cluster, clock = InMemoryCluster(), Clock()
    a, b = elector(cluster, "a", clock), elector(cluster, "b", clock)
    assert a.step() is True
    assert cluster.get_lease("kube-system", "lj-runtimekit-scheduler").holder == "a"
    for _ in range(20):
        clock.now += 2
        assert a.step() is True
        assert b.step() is False
    assert cluster.get_lease("kube-system", "lj-runtimekit-scheduler").holder == "a"


def test_standby_takes_over_after_lease_duration_without_renewal() -> None:
    cluster, clock = InMemoryCluster(), Clock()
    a, b = elector(cluster, "a", clock), elector(cluster, "b", clock)
    a.step()
    assert b.step() is False  # b observes the record now
    clock.now += 14.9
    assert b.step() is False
    clock.now += 0.2
    assert b.step() is True
    lease = cluster.get_lease("kube-system", "lj-runtimekit-scheduler")
    assert lease.holder == "b"
    assert lease.transitions == 1
    assert a.step() is False  # the old leader sees b's fresh record and does not fight back
    assert a.is_leader is False


def test_leader_steps_down_when_it_cannot_renew_within_the_deadline() -> None:
    cluster, clock = InMemoryCluster(), Clock()
    a = elector(cluster, "a", clock)
    assert a.step()
    clock.now += 10.5
    assert a.is_leader is False


def test_release_lets_a_standby_take_over_immediately() -> None:
    cluster, clock = InMemoryCluster(), Clock()
    a, b = elector(cluster, "a", clock), elector(cluster, "b", clock)
    a.step()
    b.step()
    a.release()
    assert cluster.get_lease("kube-system", "lj-runtimekit-scheduler").holder == ""
    assert b.step() is True


def test_a_lost_write_race_is_not_leadership() -> None:
    cluster, clock = InMemoryCluster(), Clock()
    a = elector(cluster, "a", clock)
    a.step()

    class Racing(InMemoryCluster):
        def update_lease(self, lease):  # type: ignore[no-untyped-def]
            raise ConflictError("stale resourceVersion")

    racing = Racing()
    racing.create_lease(cluster.get_lease("kube-system", "lj-runtimekit-scheduler"))
    b = elector(racing, "b", clock)
    b.step()
    clock.now += 16
    assert b.step() is False


def test_a_record_first_seen_after_a_stuck_get_is_aged_from_when_it_arrived() -> None:
    # The old leader's GET hangs past lease_duration while b takes over; when it returns with b's record, that
    # record is fresh, and b renewing later with an unchanged resourceVersion must not let a steal it back.
    cluster, clock = InMemoryCluster(), Clock()
    a, b = elector(cluster, "a", clock), elector(cluster, "b", clock)
    assert a.step() is True
    assert b.step() is False

    class Stuck(InMemoryCluster):
        def get_lease(self, namespace: str, name: str):  # type: ignore[no-untyped-def]
            clock.now += 16  # a hangs here; meanwhile b sees the record expire and takes over
            assert b.step() is True
            return cluster.get_lease(namespace, name)

    a.cluster = Stuck()
    assert a.step() is False  # it came back with b's record
    a.cluster = cluster
    clock.now += 2  # b's record unchanged since a saw it 2 s ago: not expired
    assert a.step() is False
    assert cluster.get_lease("kube-system", "lj-runtimekit-scheduler").holder == "b"


def test_bad_timings_are_rejected() -> None:
    with pytest.raises(InvalidRequestError, match=r"leader\.timings"):
        LeaderConfig("ns", "l", "a", lease_duration=5, renew_deadline=10, retry_period=2)
    with pytest.raises(InvalidRequestError, match=r"leader\.identity"):
        LeaderConfig("ns", "l", "")


def test_run_calls_callbacks_and_releases_on_stop() -> None:
    cluster = InMemoryCluster()
    config = LeaderConfig("kube-system", "l", "a", lease_duration=3, renew_deadline=2, retry_period=0.05)
    started, stopped, stop = threading.Event(), threading.Event(), threading.Event()
    thread = threading.Thread(
        target=LeaderElector(cluster, config).run,
        args=(stop,),
        kwargs={"on_started": started.set, "on_stopped": stopped.set},
    )
    thread.start()
    assert started.wait(5)
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    assert stopped.is_set()
    assert cluster.get_lease("kube-system", "l").holder == ""


class Failing(InMemoryCluster):
    """Lease calls raise ``errors`` (in turn) while ``failing`` is set."""

    def __init__(self, *errors: Exception) -> None:
        super().__init__()
        self.errors = list(errors)
        self.failing = True
        self.calls = 0

    def get_lease(self, namespace: str, name: str):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.failing:
            raise self.errors[self.calls % len(self.errors)]
        return super().get_lease(namespace, name)


ERRORS = (UnavailableError("get lease: API server unavailable"), OSError("connection reset"), RuntimeError("bug"))


@pytest.mark.parametrize("error", ERRORS, ids=["unavailable", "raw-oserror", "bug"])
def test_any_exception_of_an_attempt_is_a_failed_attempt(error: Exception) -> None:
    cluster, clock = Failing(error), Clock()
    a = elector(cluster, "a", clock)
    cluster.failing = False
    assert a.step() is True
    cluster.failing = True
    clock.now += 2
    assert a.step() is True  # one failed renewal: still within renew_deadline
    clock.now += 9
    assert a.step() is False  # no renewal for 11 s > renew_deadline: stepped down
    assert a.is_leader is False
    a.release()  # best effort, never raises


def test_run_outlives_failing_attempts_and_failing_callbacks() -> None:
    cluster = Failing(*ERRORS)
    config = LeaderConfig("kube-system", "l", "a", lease_duration=3, renew_deadline=2, retry_period=0.01)
    started, stop = threading.Event(), threading.Event()
    calls: list[str] = []

    def on_started() -> None:
        calls.append("started")
        started.set()
        raise RuntimeError("a callback bug")

    thread = threading.Thread(target=LeaderElector(cluster, config).run, args=(stop,),
                              kwargs={"on_started": on_started})
    thread.start()
    try:
        wait_for(lambda: cluster.calls >= 6)
        assert cluster.calls >= 6  # every kind of error, twice: the loop went on
        assert thread.is_alive()
        cluster.failing = False
        assert started.wait(5)
        time.sleep(0.05)
        assert thread.is_alive()
        assert calls == ["started"]
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
    assert cluster.get_lease("kube-system", "l").holder == ""
