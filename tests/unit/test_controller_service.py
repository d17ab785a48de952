"""The node controller (services.controller.service) over the in-memory cluster, with a fake clock.

Behaviours covered (failure cases of ``docs/failure-cases.md``):
- B25: 50 nodes, 200 unrelated label/annotation updates → no reconcile, no API write, no Job; then flipping
  ``enable`` false → true on node-7 creates exactly one Job; at scale, 1,000 nodes (half enabled, half not
  managed) and 10,000 unrelated updates → zero API writes, zero Jobs, zero reconciles; our own state write-back
  triggers nothing either;
- B26: Succeeded Jobs of ours from before the start are deleted (background propagation), a Failed one is kept
  until its TTL, Jobs not ours (other managed-by, no Node owner) are never touched, Jobs of nodes that no longer
  exist are deleted; a second controller taking over mid-sweep finishes it without errors;
- B27: a node deleted while its Job is pending → the Job is deleted, the record forgotten, nothing re-created;
  the node coming back with the same name and ``enable=true`` → exactly one new Job (another name);
- B28: (a) label removed → disable Job → ``disabled``; (b) ``false`` the same; (c) true/false/true before the
  worker runs and again while the enable Job runs → ends ``enabled``, never two active Jobs per node;
- a failed Job is retried after 10 s then 20 s without any label change, then the node is ``failed`` with a
  Warning Event and the failure metrics;
- a standby writes nothing; gaining leadership sweeps; a 409 on create (a Job our cache did not know) is read
  back and adopted; a failed state write keeps the old record and retries; a Job name is never reused for a
  node whose old Jobs the sweep deleted (their pods may linger);
- the metrics page: transitions, Jobs created/deleted, failures, API writes, nodes per state.
"""

from __future__ import annotations

import random

import attrs
import pytest

from domain.kube.objects import JobPhase, JobStatus, NodeObject, OwnerReference, Propagation
from domain.toggle.jobs import MANAGED_BY_LABEL, JobTemplate
from domain.toggle.states import Action
from ports.cluster import ClusterError
from support.controller_world import DETAIL_KEY, LABEL, NAMESPACE, STATE_KEY, World


def enabled_world(nodes: int, *, managed_every: int = 2, **kw: object) -> World:
    """``nodes`` nodes: every ``managed_every``-th labelled true and already enabled, the others not managed."""
    world = World(**kw)  # type: ignore[arg-type]
    for i in range(nodes):
        if i % managed_every == 0:
            world.add_node(f"node-{i}", "true", state="enabled")
        else:
            world.add_node(f"node-{i}")
    world.start()
    return world


def unrelated_updates(world: World, count: int, *, nodes: int, seed: int = 7, pump_every: int = 250) -> None:
    rng = random.Random(seed)
    for i in range(count):
        name = f"node-{rng.randrange(nodes)}"
        kind = i % 4
        if kind == 0:
            world.cluster.patch_node_metadata(name, labels={"team": f"t{i}"})
        elif kind == 1:
            world.cluster.patch_node_metadata(name, annotations={"lj-runtimekit.io/gpu-inventory": f"hb-{i}"})
        elif kind == 2:
            world.cluster.patch_node_metadata(name, annotations={"node.alpha.kubernetes.io/ttl": str(i)})
        else:
            world.cluster.patch_node_metadata(name, labels={"topology.kubernetes.io/zone": f"z{i % 3}"})
        if i % pump_every == pump_every - 1:
            world.settle()
    world.settle()


def test_b25_unrelated_updates_cause_no_work_then_one_job_for_the_flip() -> None:
    world = enabled_world(50, managed_every=3)
    world.cluster.patch_node_metadata("node-7", labels={LABEL: "false"})
    world.settle()
    world.finish("node-7")
    world.settle()
    assert world.state("node-7") == "disabled"
    writes, reconciles, jobs = world.api.total, world.controller.reconciles, len(world.cluster.job_deletions)
    unrelated_updates(world, 200, nodes=50)
    assert (world.api.total, world.controller.reconciles) == (writes, reconciles)
    assert len(world.cluster.job_deletions) == jobs
    assert world.our_jobs() == []
    world.set_label("node-7", "true")
    world.settle()
    (job,) = world.our_jobs()
    assert job.node_name == "node-7"
    assert job.command[3] == "enable"


def test_b25_at_scale_1000_nodes_10000_unrelated_updates_zero_writes() -> None:
    world = enabled_world(1000)
    assert world.api.total == 0  # already-enabled nodes and unmanaged ones need nothing
    reconciles = world.controller.reconciles
    unrelated_updates(world, 10_000, nodes=1000, pump_every=500)
    assert world.api.total == 0
    assert world.our_jobs() == []
    assert world.controller.reconciles == reconciles


def test_own_state_write_back_triggers_nothing() -> None:
    world = World()
    world.add_node("n1", "true")
    world.start()
    assert world.state("n1") == "enabling"
    reconciles = world.controller.reconciles
    world.settle()  # the MODIFIED event of our own annotation write
    assert world.controller.reconciles == reconciles


def _job(world: World, name: str, node: NodeObject, phase: JobPhase, *, ours: bool = True,
         finished_ago: float = 30) -> None:
    job = JobTemplate(namespace=NAMESPACE).build(node.name, node.uid, Action.ENABLE, 90)
    if not ours:
        job = attrs.evolve(job, labels={**job.labels, MANAGED_BY_LABEL: "someone-else"})
    created = world.cluster.create_job(attrs.evolve(job, name=name))
    if phase is not JobPhase.ACTIVE:
        status = JobStatus(phase, succeeded=int(phase is JobPhase.SUCCEEDED), failed=int(phase is JobPhase.FAILED),
                           finished_at=world.clock.now - finished_ago)
        world.cluster.set_job_status(NAMESPACE, created.name, status)


def test_b26_startup_sweep_deletes_our_succeeded_jobs_only() -> None:
    world = World()
    nodes = [world.add_node(f"n{i}", "true", state="enabled") for i in range(3)]
    for i, node in enumerate(nodes):
        _job(world, f"ok-{i}", node, JobPhase.SUCCEEDED)
    _job(world, "failed", nodes[0], JobPhase.FAILED)
    _job(world, "not-ours", nodes[1], JobPhase.SUCCEEDED, ours=False)
    no_owner = attrs.evolve(JobTemplate(namespace=NAMESPACE).build("n2", nodes[2].uid, Action.ENABLE, 1),
                            name="no-owner", owner=None)
    world.cluster.create_job(no_owner)
    gone = world.add_node("gone", "true")
    _job(world, "orphan", gone, JobPhase.SUCCEEDED)
    world.cluster.delete_node("gone")

    world.start()
    deleted = {(name, propagation) for _, name, propagation in world.cluster.job_deletions}
    assert deleted == {(f"ok-{i}", Propagation.BACKGROUND) for i in range(3)} | {("orphan", Propagation.BACKGROUND)}
    remaining = {j.name for j in world.cluster.list_jobs(NAMESPACE).items}
    assert remaining == {"failed", "not-ours", "no-owner"}
    world.advance(600)  # the failed Job's TTL (it finished 30 s before the start)
    remaining = {j.name for j in world.cluster.list_jobs(NAMESPACE).items}
    assert remaining == {"not-ours", "no-owner"}
    assert all(world.state(f"n{i}") == "enabled" for i in range(3))


def test_b26_restart_mid_sweep_is_safe() -> None:
    world = World()
    nodes = [world.add_node(f"n{i}", "true", state="enabled") for i in range(3)]
    for i, node in enumerate(nodes):
        _job(world, f"ok-{i}", node, JobPhase.SUCCEEDED)
    world.pump()
    world.controller.begin_leading()
    world.controller.process("n0")  # the first controller dies after one node
    assert len(world.cluster.job_deletions) == 1
    world.new_controller()
    world.start()
    assert {name for _, name, _ in world.cluster.job_deletions} == {"ok-0", "ok-1", "ok-2"}
    assert world.our_jobs() == []


def test_b27_deleted_node_loses_its_job_and_comes_back_fresh() -> None:
    world = World()
    world.add_node("n1", "true")
    world.start()
    (first,) = world.our_jobs("n1")
    world.cluster.delete_node("n1")
    world.settle()
    assert world.our_jobs() == []
    assert world.cluster.job_deletions == [(NAMESPACE, first.name, Propagation.BACKGROUND)]
    assert world.controller.record("n1") is None
    world.advance(1000)
    assert world.our_jobs() == []  # never re-created for the missing node
    world.add_node("n1", "true")
    world.settle()
    (second,) = world.our_jobs("n1")
    assert second.name != first.name
    assert world.state("n1") == "enabling"
    world.finish("n1")
    world.settle()
    assert world.state("n1") == "enabled"


@pytest.mark.parametrize("removal", ["delete-label", "false"])
def test_b28_label_removed_or_false_disables(removal: str) -> None:
    world = World()
    world.add_node("n1", "true")
    world.start()
    world.finish("n1")
    world.settle()
    assert world.state("n1") == "enabled"
    world.set_label("n1", None if removal == "delete-label" else "false")
    world.settle()
    (job,) = world.active("n1")
    assert job.command[3] == "disable"
    assert world.state("n1") == "disabling"
    world.finish("n1")
    world.settle()
    assert world.state("n1") == "disabled"
    assert world.our_jobs() == []


def test_b28_quick_flips_end_enabled_with_one_active_job_at_most() -> None:
    world = World()
    world.add_node("n1", "false", state="disabled")
    world.start()
    for value in ("true", "false", "true"):  # before the worker runs
        world.set_label("n1", value)
    world.settle()
    assert len(world.active("n1")) == 1
    for value in ("false", "true", "false", "true"):  # while the enable Job runs
        world.set_label("n1", value)
        world.settle()
        assert len(world.active("n1")) == 1
    world.finish("n1")
    world.settle()
    assert world.state("n1") == "enabled"
    assert world.api.writes["create_job"] == 1


def test_failed_job_is_retried_with_backoff_then_node_failed() -> None:
    world = World(max_tries=3)
    world.add_node("n1", "true")
    world.start()
    world.finish("n1", ok=False)
    world.settle()
    assert world.active("n1") == []
    assert world.state("n1") == "enabling"
    world.advance(9)
    assert world.active("n1") == []
    world.advance(1)
    assert len(world.active("n1")) == 1  # retried after 10 s, no label change
    world.finish("n1", ok=False)
    world.settle()
    world.advance(19)
    assert world.active("n1") == []
    world.advance(1)
    world.finish("n1", ok=False)
    world.settle()
    assert world.state("n1") == "failed"
    warnings = [e for e in world.cluster.events if e.type == "Warning"]
    assert [e.reason for e in warnings] == ["RuntimeToggleRetry", "RuntimeToggleRetry", "RuntimeToggleFailed"]
    assert warnings[-1].kind == "Node"
    assert warnings[-1].name == "n1"
    assert len(world.our_jobs("n1")) == 3  # failed Jobs kept for debugging
    text = world.metrics.exposition().decode()
    assert 'lj_runtimekit_controller_job_failures_total{action="enable"} 3.0' in text
    assert 'lj_runtimekit_controller_transitions_total{from="enabling",to="failed"} 1.0' in text
    assert 'lj_runtimekit_controller_nodes{state="failed"} 1.0' in text
    assert 'lj_runtimekit_controller_node_failed{node="n1",target="enable"} 1.0' in text  # the alert names it
    world.advance(3600)
    assert world.active("n1") == []
    assert world.state("n1") == "failed"
    assert world.our_jobs("n1") == []  # TTL passed
    world.set_label("n1", "false")  # a new episode: the node leaves failed, and the page
    world.settle()
    assert world.state("n1") == "disabling"
    assert "lj_runtimekit_controller_node_failed{" not in world.metrics.exposition().decode()


def test_standby_writes_nothing_and_leadership_sweeps() -> None:
    world = World(leader=False)
    world.add_node("n1", "true")
    world.start()
    world.advance(100)
    assert world.api.total == 0
    world.leader = True
    world.controller.begin_leading()
    world.settle()
    assert len(world.active("n1")) == 1


def test_conflict_on_create_adopts_the_existing_job() -> None:
    world = World()
    node = world.add_node("n1", "true")
    world.pump()
    world.controller.begin_leading()
    job = world.controller.settings.template.build("n1", node.uid, Action.ENABLE, 1)
    world.cluster.create_job(job)  # exists, but the controller's cache has not seen it
    world.controller.run_due()
    world.settle()
    assert [j.name for j in world.our_jobs()] == [job.name]
    assert world.state("n1") == "enabling"


def test_failed_state_write_keeps_the_record_and_retries() -> None:
    world = World()
    world.add_node("n1", "true")
    original = world.cluster.patch_node_metadata
    calls = {"n": 0}

    def flaky(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ClusterError("HTTP 500")
        return original(*args, **kwargs)  # type: ignore[arg-type]

    world.cluster.patch_node_metadata = flaky  # type: ignore[method-assign]
    world.pump()
    world.controller.begin_leading()
    world.controller.run_due()  # Job created, state write failed
    assert world.controller.record("n1") is None
    assert len(world.active("n1")) == 1
    world.settle()  # the Job's watch event queues the node again: the Job is adopted, the state written
    assert calls["n"] == 2
    record = world.controller.record("n1")
    assert record is not None
    assert record.job == world.active("n1")[0].name
    assert world.state("n1") == "enabling"
    assert len(world.our_jobs()) == 1
    detail = world.cluster.get_node("n1").annotations[DETAIL_KEY]
    assert '"tries":1' in detail


def test_metrics_page_counts_jobs_writes_and_states() -> None:
    world = World()
    world.add_node("n1", "true")
    world.add_node("n2", "false", state="enabled")
    world.start()
    world.finish("n1")
    world.finish("n2")
    world.settle()
    text = world.metrics.exposition().decode()
    assert 'lj_runtimekit_controller_jobs_created_total{action="enable"} 1.0' in text
    assert 'lj_runtimekit_controller_jobs_created_total{action="disable"} 1.0' in text
    assert 'lj_runtimekit_controller_jobs_deleted_total{reason="succeeded"} 2.0' in text
    assert 'lj_runtimekit_controller_nodes{state="enabled"} 1.0' in text
    assert 'lj_runtimekit_controller_nodes{state="disabled"} 1.0' in text
    assert 'lj_runtimekit_controller_transitions_total{from="disabling",to="disabled"} 1.0' in text
    assert "lj_runtimekit_controller_node_failed{" not in text  # no node failed: the family is empty
    writes = sum(world.api.writes.values())
    assert 'lj_runtimekit_controller_api_writes_total{result="ok",verb="create_job"} 2.0' in text
    assert writes == world.controller.writes
    assert STATE_KEY in world.cluster.get_node("n1").annotations


def test_owner_reference_of_created_jobs_points_at_the_node() -> None:
    world = World()
    node = world.add_node("n1", "true")
    world.start()
    (job,) = world.our_jobs()
    assert job.owner == OwnerReference("v1", "Node", "n1", node.uid, controller=True)
    assert job.namespace == NAMESPACE
    assert job.backoff_limit == 0


def test_job_names_are_not_reused_after_the_sweep_deleted_the_old_jobs() -> None:
    world = World()
    node = world.add_node("n1")
    _job(world, "ok-old", node, JobPhase.SUCCEEDED)  # generation 90, not managed node
    world.start()
    assert world.our_jobs() == []
    world.set_label("n1", "true")
    world.settle()
    (job,) = world.our_jobs()
    assert job.labels["lj-runtimekit.io/generation"] == "91"
