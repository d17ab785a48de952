"""The toggle domain's parts (domain.toggle.states, .policy, .record, .jobs).

Behaviours covered:
- the transition table holds exactly the legal moves; every other move raises IllegalTransitionError naming the
  node and both states; states and actions refuse truthiness;
- the enable label: ``true`` (any case, blanks) enables; ``false``, another value or no label disables;
- backoff: base, doubling, cap; zero failures wait 0; negative counts and bad policies are rejected;
- the record round-trips through its two annotations; unknown states read as "no record"; a malformed detail
  reads as defaults; an error message is truncated;
- Job names: deterministic per node, UID, action and generation, at most 63 characters, DNS-label characters,
  distinct for a re-created node; long node names fit labels; the Job built from the template pins the node,
  tolerates every taint, mounts the socket directory read-only, runs restricted as a non-root user in the socket's
  group, runs the agent command once (backoffLimit 0) and is ours; a root user or a negative group is refused;
  Jobs missing the label or the Node owner are not ours.
"""

from __future__ import annotations

import itertools
import re

import attrs
import pytest

from domain.errors import InvalidRequestError
from domain.kube.objects import JobObject, JobSecurity, OwnerReference, Taint, TaintEffect
from domain.toggle.jobs import (
    ACTION_LABEL,
    MANAGED_BY_LABEL,
    MANAGER,
    JobTemplate,
    is_ours,
    job_action,
    job_generation,
    job_name,
    job_node,
    node_label_value,
)
from domain.toggle.policy import TogglePolicy, backoff_delay
from domain.toggle.record import MAX_ERROR, NodeToggle, decode, encode_detail
from domain.toggle.states import (
    TRANSITIONS,
    Action,
    IllegalTransitionError,
    ToggleState,
    check_transition,
    desired_from_label,
)

S = ToggleState
LEGAL = {
    (S.DISABLED, S.ENABLING),
    (S.ENABLING, S.ENABLED), (S.ENABLING, S.FAILED), (S.ENABLING, S.DISABLING),
    (S.ENABLED, S.DISABLING),
    (S.DISABLING, S.DISABLED), (S.DISABLING, S.FAILED), (S.DISABLING, S.ENABLING),
    (S.FAILED, S.ENABLING), (S.FAILED, S.DISABLING),
}
KEYS = {"state_key": "lj-runtimekit.io/runtime-state", "detail_key": "lj-runtimekit.io/runtime-toggle"}


def test_transition_table_is_exactly_the_legal_moves() -> None:
    assert {(a, b) for a, targets in TRANSITIONS.items() for b in targets} == LEGAL
    for a, b in itertools.product(ToggleState, repeat=2):
        if (a, b) in LEGAL:
            assert check_transition(a, b) is b
        else:
            with pytest.raises(IllegalTransitionError) as error:
                check_transition(a, b, node="gpu-7")
            assert f"{a.value} → {b.value}" in str(error.value)
            assert "gpu-7" in str(error.value)
            assert (error.value.current, error.value.new) == (a, b)


def test_record_moves_only_legally_and_stamps_the_time() -> None:
    record = NodeToggle("n1")
    moved = record.moved(S.ENABLING, now=5.0)
    assert (moved.state, moved.since) == (S.ENABLING, 5.0)
    assert moved.moved(S.ENABLING, now=9.0) is moved
    with pytest.raises(IllegalTransitionError, match="disabled → enabled"):
        record.moved(S.ENABLED, now=1.0)


def test_states_and_actions_refuse_truthiness() -> None:
    with pytest.raises(TypeError):
        bool(ToggleState.ENABLED)
    with pytest.raises(TypeError):
        bool(Action.ENABLE)
    assert Action.ENABLE.working is S.ENABLING
    assert Action.DISABLE.done is S.DISABLED
    assert [s for s in ToggleState if s.steady] == [S.DISABLED, S.ENABLED]


@pytest.mark.parametrize(("value", "expected"), [
    ("true", Action.ENABLE), (" True ", Action.ENABLE), ("TRUE", Action.ENABLE),
    ("false", Action.DISABLE), (None, Action.DISABLE), ("", Action.DISABLE), ("yes", Action.DISABLE),
])
def test_enable_label_meaning(value: str | None, expected: Action) -> None:
    assert desired_from_label(value) is expected


def test_backoff_doubles_from_base_up_to_cap() -> None:
    assert [backoff_delay(n, base=10, cap=60) for n in range(6)] == [0, 10, 20, 40, 60, 60]
    assert backoff_delay(10_000, base=1, cap=5) == 5
    policy = TogglePolicy(backoff_base=2, backoff_cap=8)
    assert [policy.backoff(n) for n in (1, 2, 3, 4)] == [2, 4, 8, 8]
    with pytest.raises(InvalidRequestError):
        backoff_delay(-1, base=1, cap=1)


@pytest.mark.parametrize("changes", [
    {"max_tries": 0}, {"backoff_base": 0}, {"backoff_base": 10, "backoff_cap": 5}, {"failed_job_ttl": -1},
    {"job_deadline": 0},
])
def test_bad_policies_are_rejected(changes: dict[str, float]) -> None:
    with pytest.raises(InvalidRequestError):
        TogglePolicy(**changes)  # type: ignore[arg-type]


def test_record_round_trips_through_its_annotations() -> None:
    record = NodeToggle("n1", "uid-1", S.DISABLING, Action.DISABLE, tries=2, generation=7, job="ljrk-x",
                        retry_at=1234.5, error="boom", since=1000.0)
    annotations = record.annotations(**KEYS)
    assert annotations[KEYS["state_key"]] == "disabling"
    assert decode("n1", annotations, node_uid="uid-1", **KEYS) == record
    steady = NodeToggle("n1", state=S.ENABLED, target=Action.ENABLE, generation=3, since=7.0)
    assert decode("n1", steady.annotations(**KEYS), **KEYS) == steady


def test_decode_of_missing_unknown_or_malformed_annotations() -> None:
    state, detail = KEYS["state_key"], KEYS["detail_key"]
    assert decode("n1", {}, **KEYS) is None
    assert decode("n1", {state: "half-on"}, **KEYS) is None
    bad = decode("n1", {state: "enabling", detail: "{not json"}, **KEYS)
    assert bad == NodeToggle("n1", state=S.ENABLING, target=Action.ENABLE)
    odd = decode("n1", {state: "failed", detail: '{"tries": "x", "target": "sideways", "retryAt": true}'}, **KEYS)
    assert odd is not None
    assert (odd.tries, odd.target, odd.retry_at) == (0, None, 0.0)
    long = NodeToggle("n1", state=S.FAILED, error="e" * 1000)
    assert len(decode("n1", long.annotations(**KEYS), **KEYS).error) == MAX_ERROR  # type: ignore[union-attr]
    assert '"error"' not in encode_detail(NodeToggle("n1"))


def test_job_names_are_deterministic_short_and_distinct_per_node_identity() -> None:
    name = job_name("gpu-node-1", "uid-a", Action.ENABLE, 3)
    assert name == job_name("gpu-node-1", "uid-a", Action.ENABLE, 3)
    assert name.startswith("ljrk-enable-gpu-node-1-")
    assert name.endswith("-3")
    others = {job_name("gpu-node-1", "uid-b", Action.ENABLE, 3), job_name("gpu-node-1", "uid-a", Action.DISABLE, 3),
              job_name("gpu-node-1", "uid-a", Action.ENABLE, 4)}
    assert name not in others
    assert len(others) == 3
    long = "node." + "x" * 240 + ".example.com"
    for generation in (0, 99, 10**9):
        text = job_name(long, "u", Action.DISABLE, generation)
        assert len(text) <= 63
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", text)
    assert len(node_label_value(long)) <= 63
    assert node_label_value("short") == "short"
    with pytest.raises(InvalidRequestError):
        job_name("n", "u", Action.ENABLE, -1)


def test_template_builds_a_pinned_tolerant_one_shot_job_of_ours() -> None:
    template = JobTemplate(namespace="ljrk", image="registry/ljrk:1", config_daemon_socket="/run/ljrk/runtime.sock",
                           agent_timeout=45, deadline=120, ttl=600)
    job = template.build("gpu-1", "uid-1", Action.DISABLE, 2)
    assert job.node_name == "gpu-1"
    assert job.command == ("ljrk", "job-agent", "--action", "disable", "--config-daemon-socket",
                           "/run/ljrk/runtime.sock", "--timeout", "45")
    assert job.backoff_limit == 0
    assert (job.active_deadline_seconds, job.ttl_seconds_after_finished) == (120, 600)
    assert [(m.host_path, m.mount_path, m.read_only) for m in job.host_paths] == [("/run/ljrk", "/run/ljrk", True)]
    assert job.security == JobSecurity(65532, 65532, (0,))  # non-root, in the root:root 0660 socket's group
    taints = (Taint("gpu-off", TaintEffect.NO_SCHEDULE), Taint("x", TaintEffect.NO_EXECUTE, "y"))
    assert all(any(t.tolerates(taint) for t in job.tolerations) for taint in taints)
    assert job.owner == OwnerReference("v1", "Node", "gpu-1", "uid-1", controller=True)
    assert is_ours(job)
    assert (job_node(job), job_action(job), job_generation(job)) == ("gpu-1", Action.DISABLE, 2)
    assert job.labels[MANAGED_BY_LABEL] == MANAGER


def test_template_security_follows_its_settings() -> None:
    template = JobTemplate(run_as_user=1000, socket_group=2000)
    assert template.build("n", "u", Action.ENABLE, 1).security == JobSecurity(1000, 1000, (2000,))
    with pytest.raises(InvalidRequestError, match="run_as_user"):
        JobTemplate(run_as_user=0)


def test_jobs_without_our_label_or_node_owner_are_not_ours() -> None:
    job = JobTemplate().build("n1", "u1", Action.ENABLE, 1)
    assert not is_ours(attrs.evolve(job, labels={**job.labels, MANAGED_BY_LABEL: "helm"}))
    assert not is_ours(attrs.evolve(job, owner=None))
    assert not is_ours(attrs.evolve(job, owner=OwnerReference("apps/v1", "ReplicaSet", "rs", "u")))
    assert not is_ours(attrs.evolve(job, labels={**job.labels, ACTION_LABEL: "reboot"}))
    assert not is_ours(JobObject(namespace="ljrk", name="other"))


@pytest.mark.parametrize("changes", [
    {"namespace": ""}, {"image": " "}, {"config_daemon_socket": "run/x.sock"}, {"config_daemon_socket": "/run/"},
    {"agent_timeout": 0}, {"deadline": 0.5}, {"ttl": -1}, {"run_as_user": 0}, {"socket_group": -1},
])
def test_bad_templates_are_rejected(changes: dict[str, object]) -> None:
    with pytest.raises(InvalidRequestError):
        JobTemplate(**changes)  # type: ignore[arg-type]
