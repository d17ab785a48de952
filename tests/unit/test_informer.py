"""The list+watch informer (services._shared.informer) on the in-memory cluster.

Covers: initial list delivers every object; watch events update the cache in order; a 410 Gone (compaction)
relists and delivers deletions for objects that vanished meanwhile (tombstones); an object deleted and re-created
under the same name (new UID) while the watch was down is delivered as a delete of the old object, then an add —
on a relist and on a watch event alike; the loop survives errors (each failed attempt counted) and stops when
asked.
"""

from __future__ import annotations

import threading

import attrs

from adapters.memory.cluster import InMemoryCluster
from domain.kube.objects import ContainerSpec, EventType, NodeObject, PodObject, WatchEvent
from services._shared.informer import Informer, node_informer
from support.polling import wait_for


def pod(name: str) -> PodObject:
    return PodObject(uid="", namespace="default", name=name, containers=(ContainerSpec("main"),))


def pod_informer(cluster: InMemoryCluster, upserts: list[str], deletes: list[str],
                 uids: list[str] | None = None) -> Informer[PodObject]:
    def delete(p: PodObject) -> None:
        deletes.append(p.name)
        if uids is not None:
            uids.append(p.uid)

    return Informer(
        name="pods",
        list_fn=cluster.list_pods,
        watch_fn=lambda rv, timeout: cluster.watch_pods(resource_version=rv, timeout_seconds=timeout),
        key=lambda p: p.key,
        uid=lambda p: p.uid,
        on_upsert=lambda p: upserts.append(p.name),
        on_delete=delete,
        watch_timeout=0.2,
    )


def test_list_then_watch_keeps_the_cache_in_step() -> None:
    cluster = InMemoryCluster()
    cluster.create_pod(pod("a"))
    upserts: list[str] = []
    deletes: list[str] = []
    informer = pod_informer(cluster, upserts, deletes)
    stop = threading.Event()
    thread = threading.Thread(target=informer.run, args=(stop,))
    thread.start()
    try:
        assert informer.synced.wait(5)
        assert upserts == ["a"]
        cluster.create_pod(pod("b"))
        cluster.delete_pod("default", "a", grace_period_seconds=0)
        assert wait_for(lambda: deletes == ["a"])
        assert sorted(informer.cache) == ["default/b"]
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()


def test_gone_relists_and_reports_vanished_objects_as_deleted() -> None:
    cluster = InMemoryCluster()
    cluster.create_pod(pod("a"))
    cluster.create_pod(pod("b"))
    upserts: list[str] = []
    deletes: list[str] = []
    informer = pod_informer(cluster, upserts, deletes)
    informer.relist()
    cluster.delete_pod("default", "a", grace_period_seconds=0)
    cluster.create_pod(pod("c"))
    cluster.compact()
    stop = threading.Event()
    thread = threading.Thread(target=informer.run, args=(stop,))
    thread.start()
    try:
        assert wait_for(lambda: informer.relists >= 2 and "default/c" in informer.cache)
        assert deletes == ["a"]
        assert sorted(informer.cache) == ["default/b", "default/c"]
    finally:
        stop.set()
        thread.join(5)


def test_the_loop_survives_a_failing_list_and_retries() -> None:
    cluster = InMemoryCluster()
    cluster.create_pod(pod("a"))
    calls = {"n": 0}

    def flaky_list():  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("connection refused")
        return cluster.list_pods()

    upserts: list[str] = []
    informer = Informer(
        name="pods", list_fn=flaky_list,
        watch_fn=lambda rv, timeout: cluster.watch_pods(resource_version=rv, timeout_seconds=timeout),
        key=lambda p: p.key, on_upsert=lambda p: upserts.append(p.name), on_delete=lambda p: None,
        watch_timeout=0.2,
    )
    stop = threading.Event()
    thread = threading.Thread(target=informer.run, args=(stop,))
    thread.start()
    try:
        assert informer.synced.wait(5)
        assert upserts == ["a"]
        assert calls["n"] == 2
        assert informer.failures == 1  # the failed LIST; the 0.2 s watches that end normally are no failures
    finally:
        stop.set()
        thread.join(5)


def test_a_relist_with_the_same_key_and_a_new_uid_deletes_the_old_object_first() -> None:
    cluster = InMemoryCluster()
    old = cluster.create_pod(pod("a"))
    upserts: list[str] = []
    deletes: list[str] = []
    uids: list[str] = []
    informer = pod_informer(cluster, upserts, deletes, uids)
    informer.relist()
    cluster.delete_pod("default", "a", grace_period_seconds=0)  # both happen while the watch is down
    new = cluster.create_pod(pod("a"))
    informer.relist()
    assert uids == [old.uid]
    assert upserts == ["a", "a"]
    assert informer.cache["default/a"].uid == new.uid
    informer.relist()  # same UID again: a plain update
    assert uids == [old.uid]


def test_a_watch_event_with_a_new_uid_under_a_cached_key_deletes_the_old_object_first() -> None:
    cluster = InMemoryCluster()
    old = cluster.create_pod(pod("a"))
    upserts: list[str] = []
    deletes: list[str] = []
    uids: list[str] = []
    informer = pod_informer(cluster, upserts, deletes, uids)
    informer.relist()
    cluster.delete_pod("default", "a", grace_period_seconds=0)
    new = cluster.create_pod(pod("a"))
    informer.apply(WatchEvent(EventType.MODIFIED, new, new.resource_version))  # the DELETED event was lost
    assert uids == [old.uid]
    assert informer.cache["default/a"] == new
    gone = attrs.evolve(new, uid="third")  # a delete of yet another object under the key
    informer.apply(WatchEvent(EventType.DELETED, gone, "999"))
    assert uids == [old.uid, new.uid, "third"]
    assert informer.cache == {}


def test_node_informer_lists_and_watches_nodes_by_name() -> None:
    cluster = InMemoryCluster()
    cluster.create_node(NodeObject(name="n1"))
    upserts: list[str] = []
    deletes: list[str] = []
    informer = node_informer(cluster, on_upsert=lambda n: upserts.append(n.name),
                             on_delete=lambda n: deletes.append(n.name), watch_timeout=0.2)
    assert (informer.name, informer.watch_timeout) == ("nodes", 0.2)
    stop = threading.Event()
    thread = threading.Thread(target=informer.run, args=(stop,))
    thread.start()
    try:
        assert informer.synced.wait(5)
        assert upserts == ["n1"]
        cluster.create_node(NodeObject(name="n2"))
        cluster.delete_node("n1")
        assert wait_for(lambda: deletes == ["n1"])
        assert sorted(informer.cache) == ["n2"]
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
