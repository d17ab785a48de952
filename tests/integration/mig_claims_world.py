"""MIG claims allocated on the real node (by our standalone scheduler, or by kube-scheduler): the scenario the static
and the dynamic MIG live modules share (test_dra_standalone_live.py, test_dra_dynamic_mig_live.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dra_live_world import Claims, our_pod

from support.polling import eventually


def two_run_and_a_third_waits(claims: Claims, device_class: str, devices: Sequence[str], profile: str,
                              while_running: Callable[[], None] = lambda: None, *,
                              pod: Callable[[str], str] | None = None, refusal: str = "MIG") -> None:
    """Three claims of MIG class ``device_class``: the pods of the first two run, their claims allocated on
    ``devices`` (sorted device names), without consumed capacity or share ID, each pod with its own ``MIG-…``
    device of ``profile``; ``while_running()`` is called then. The third claim's pod waits with a FailedScheduling
    Event containing ``refusal``, unallocated, until the first pod is deleted: then it runs on the first device.
    ``pod(claim)`` creates a pod using the claim (default: one for our scheduler, :func:`our_pod`)."""
    make = pod or (lambda name: our_pod(claims, [{"name": "gpu", "resourceClaimName": name}]))
    names = [claims.create(device_class) for _ in range(3)]
    pods = [make(name) for name in names[:2]]
    for pod in pods:
        claims.pods.wait_running(pod, timeout=90)
    results = [claims.get(name).status.allocation.devices.results for name in names[:2]]
    assert sorted(r.device for (r,) in results) == list(devices)
    assert all(not r.consumed_capacity and not r.share_id and r.pool == claims.pods.node.node_name
               for (r,) in results)
    envs = [claims.pods.env(pod, "main") for pod in pods]
    assert all(env["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-") and env["LJRK_MIG_PROFILE_0"] == profile
               for env in envs)
    assert envs[0]["NVIDIA_VISIBLE_DEVICES"] != envs[1]["NVIDIA_VISIBLE_DEVICES"]
    while_running()
    waiting = make(names[2])
    eventually(lambda: any("FailedScheduling" in e and refusal in e for e in claims.events(waiting)), 60,
               "a FailedScheduling while both MIG devices are held")
    assert claims.get(names[2]).status.allocation is None
    claims.pods.delete(pods[0])
    claims.pods.wait_running(waiting, timeout=120)
    (freed,) = results[0]
    assert [r.device for r in claims.get(names[2]).status.allocation.devices.results] == [freed.device]
