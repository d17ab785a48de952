"""Asynchronous binding of the standalone loop (``StandaloneLoop(bind_workers=N)``, ``ljrk scheduler
--bind-workers``): commits run on N threads while the next pods are scheduled, at most N in flight, each pod's
reservation counted until its commit ends; a failed commit backs the pod off and gives its reservation back."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping

import pytest

from domain.errors import InvalidRequestError
from entrypoints.scheduler.__main__ import build_parser, settings_from_args
from entrypoints.scheduler.app import SchedulerSettings
from ports.cluster import UnavailableError
from services.scheduler.service import NotLeaderError
from services.scheduler.standalone import StandaloneLoop
from support.polling import wait_for
from support.scheduler_world import World, world


@contextlib.contextmanager
def running(loop: StandaloneLoop) -> Iterator[None]:
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), kwargs={"poll": 0.05})
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


class GatedBinds:
    """Makes ``w``'s binds wait for :attr:`gate`, counting how many wait at once."""

    def __init__(self, w: World) -> None:
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.waiting = 0
        self.most = 0
        bind = w.cluster.bind_pod

        def gated(namespace: str, name: str, *, uid: str, node: str,
                  annotations: Mapping[str, str] | None = None) -> None:
            with self.lock:
                self.waiting += 1
                self.most = max(self.most, self.waiting)
            try:
                assert self.gate.wait(10), "the test never opened the gate"
                bind(namespace, name, uid=uid, node=node, annotations=annotations)
            finally:
                with self.lock:
                    self.waiting -= 1

        w.cluster.bind_pod = gated  # type: ignore[method-assign]


def bound(w: World, *names: str) -> bool:
    return all(w.cluster.get_pod("default", n).node_name for n in names)


def test_the_next_pods_are_scheduled_while_commits_are_in_flight_at_most_n_at_once() -> None:
    w = world()
    w.node("n1", 2)
    w.service.start_leading()
    gated = GatedBinds(w)
    loop = StandaloneLoop(w.service, bind_workers=2)
    for name in ("a", "b", "c"):
        w.pending(name, core="30", mem="4")
    with running(loop):
        assert wait_for(lambda: gated.waiting == 2)
        assert loop.attempts == 2  # c waits for a bind worker
        assert sorted(loop.pending()) == ["default/a", "default/b", "default/c"]
        assert sum(core for core, _ in w.used("n1")) == 600  # both reservations counted while they commit
        gated.gate.set()
        assert wait_for(lambda: bound(w, "a", "b", "c"))
        assert wait_for(lambda: loop.pending() == [])
    assert gated.most == 2
    assert sorted(e.name for e in w.cluster.events if e.reason == "Scheduled") == ["a", "b", "c"]
    for name in ("a", "b", "c"):
        w.deliver(name)
    assert sum(core for core, _ in w.used("n1")) == 900


def test_a_commit_failing_on_a_bind_worker_backs_the_pod_off_and_gives_its_reservation_back() -> None:
    w = world()
    w.node("n1", 1)
    w.service.start_leading()
    w.cluster.bind_failures.append(UnavailableError("API server down"))
    loop = StandaloneLoop(w.service, bind_workers=2, initial_backoff=30)  # no retry within the test
    pod = w.pending("a", core="30", mem="4")
    with running(loop):
        assert wait_for(lambda: any(e.reason == "FailedScheduling" and "API server down" in e.message
                                    for e in w.cluster.events))
        assert wait_for(lambda: loop.delay("default/a") == 30)
        assert w.service.reservation(pod.uid) is None
        assert w.used("n1") == [(0, 0)]
        assert loop.pending() == ["default/a"]  # backed off, not in flight


def test_a_bind_worker_losing_leadership_queues_the_pod_again() -> None:
    w = world()
    w.node("n1", 1)
    w.service.start_leading()
    commit = w.service.commit
    lost = [True]

    def deposed_once(*args: object, **kwargs: object) -> None:
        if lost.pop() if lost else False:
            raise NotLeaderError("this replica lost leadership")
        commit(*args, **kwargs)  # type: ignore[arg-type]

    w.service.commit = deposed_once  # type: ignore[method-assign]
    loop = StandaloneLoop(w.service, bind_workers=2)
    w.pending("a", core="30", mem="4")
    with running(loop):
        assert wait_for(lambda: bound(w, "a"))
    assert loop.attempts == 2
    assert loop.delay("default/a") is None


def test_a_pod_recreated_under_its_name_during_its_commit_is_not_backed_off_for_the_old_one() -> None:
    w = world()
    w.node("n1", 2)
    w.service.start_leading()
    gated = GatedBinds(w)
    loop = StandaloneLoop(w.service, bind_workers=2, initial_backoff=30)
    old = w.pending("a", core="30", mem="4")
    with running(loop):
        assert wait_for(lambda: gated.waiting == 1)
        w.cluster.delete_pod("default", "a", grace_period_seconds=0)
        w.service.on_pod_deleted(old)
        w.cluster.bind_failures.append(UnavailableError("pod default/a: the old UID is gone"))
        new = w.pending("a", core="30", mem="4")
        assert new.uid != old.uid
        assert wait_for(lambda: gated.waiting == 2)  # the new pod's commit is in flight beside the old one's
        gated.gate.set()
        assert wait_for(lambda: bound(w, "a"))
        assert wait_for(lambda: loop.pending() == [])
    assert w.cluster.get_pod("default", "a").uid == new.uid
    assert loop.delay("default/a") is None  # the old pod's failure did not back the new one off


def test_bind_workers_are_counted_from_one_and_reach_the_loop_from_the_command_line() -> None:
    w = world()
    with pytest.raises(InvalidRequestError, match="bind_workers"):
        StandaloneLoop(w.service, bind_workers=0)
    argv = ["--mode", "standalone", "--listen", "127.0.0.1:0"]
    assert settings_from_args(build_parser().parse_args(argv)).bind_workers == 16
    assert settings_from_args(build_parser().parse_args([*argv, "--bind-workers", "1"])).bind_workers == 1
    with pytest.raises(Exception, match="bind_workers=65"):
        SchedulerSettings(mode="standalone", bind_workers=65)


def test_the_scheduler_app_hands_the_bind_workers_to_its_loop() -> None:
    from entrypoints.scheduler.containers import SchedulerContainer

    container = SchedulerContainer(settings=SchedulerSettings(mode="standalone", host="127.0.0.1", port=0,
                                                              in_memory=True, bind_workers=7))
    app = container.app()
    try:
        assert app.loop is not None
        assert app.loop.bind_workers == 7
    finally:
        app.http.stop()


def test_the_cycle_never_waits_on_an_event_write() -> None:
    w = world()
    w.node("n1", 1)
    w.service.start_leading()
    gate = threading.Event()
    create = w.cluster.create_event

    def slow_event(event: object) -> None:
        assert gate.wait(10), "the test never opened the gate"
        create(event)  # type: ignore[arg-type]

    w.cluster.create_event = slow_event  # type: ignore[method-assign,assignment]
    loop = StandaloneLoop(w.service, bind_workers=2, initial_backoff=30)
    w.pending("big", core="300", mem="1")  # fits nowhere: its FailedScheduling Event waits at the gate
    with running(loop):
        assert wait_for(lambda: loop.delay("default/big") == 30)
        w.pending("a", core="30", mem="4")
        assert wait_for(lambda: bound(w, "a"))  # scheduled and bound while the Event still waits
        assert w.cluster.events == []
        gate.set()
    assert sorted((e.name, e.reason) for e in w.cluster.events) == [("a", "Scheduled"), ("big", "FailedScheduling")]
