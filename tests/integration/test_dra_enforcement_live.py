"""HAMi-core's mounts reach a DRA claim's container on the genuine kubelet + containerd 2 (dra_live_world.py).

``ljrk runtime`` runs with ``--hami-core-library`` (a marker file standing in for ``libvgpu.so``; the workload's
busybox is static, so the preload list it mounts changes nothing in the container) and ``ljrk dra-driver`` with the
same library and the Runtime's preload list, as a HAMi-core node is configured. A 30 % / 4 GiB share claim,
allocated by kube-scheduler, prepared by our plugin: the claim's CDI spec carries both read-only bind mounts, and
the container reads the library at ``/usr/local/vgpu/libvgpu.so`` and the preload list naming it at
``/etc/ld.so.preload``, beside the share's limit variables.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dra_live_world import (
    DRA,
    DRA_SCHEDULER,
    GIB,
    Claims,
    DraNodeStack,
    NodeClaims,
    claims_in_new_namespace,
    dra_world,
    expected_limits,
    gpu_limits,
)
from k8s_harness import ControlPlane
from kubelet_harness import RealNode
from real_node_world import ENV_END, container, pod_manifest, unique

from domain.runtime.edits import HAMI_LIBRARY_PATH, LD_SO_PRELOAD

pytestmark = [pytest.mark.k8s, pytest.mark.kubelet]

MARKER = "ljrk-live-test-libvgpu"
"""The content of the stand-in library."""


@pytest.fixture(scope="module")
def stack(real_node: RealNode, kubelet_plane: ControlPlane, kubelet_api: Any) -> Iterator[DraNodeStack]:
    folder = Path(tempfile.mkdtemp(prefix="ljrk-hami-", dir="/tmp"))
    library = folder / "libvgpu.so"
    library.write_text(MARKER + "\n")
    library.chmod(0o644)
    folder.chmod(0o755)
    try:
        with dra_world(real_node, kubelet_plane, kubelet_api, "2x16Gi:A100", hami_library=library) as world:
            yield world
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def claims(kubelet_api: Any, real_node: RealNode, stack: DraNodeStack) -> Iterator[Claims]:
    with claims_in_new_namespace(kubelet_api, real_node, stack) as helper:
        yield helper


def test_a_share_claim_gets_hami_cores_library_and_preload_list(claims: Claims, stack: DraNodeStack,
                                                                real_node: RealNode) -> None:
    claim = claims.create(DRA.device_class_share, {"cores": "30", "memory": "4Gi"})
    main = container("main")
    main["command"] = ["sh", "-c", f"export LIBRARY=\"$(cat {HAMI_LIBRARY_PATH})\" PRELOAD=\"$(cat {LD_SO_PRELOAD})\"; "
                       f"trap 'exit 0' TERM; env; echo {ENV_END}; sleep 3600 & wait"]
    main["resources"]["claims"] = [{"name": "gpu"}]
    manifest = pod_manifest(unique("hami"), [main], scheduler=DRA_SCHEDULER)
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": real_node.node_name}
    manifest["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    pod = claims.pods.create(manifest)
    claims.pods.wait_running(pod, timeout=90)
    env = claims.pods.env(pod, "main")

    assert (env["LIBRARY"], env["PRELOAD"]) == (MARKER, HAMI_LIBRARY_PATH)
    uid = claims.uid(claim)
    uuid = stack.gpu_uuids()[int(claims.device(claim).removeprefix("gpu-"))]
    assert gpu_limits(env) == expected_limits(uuid, uid, 300, 4 * GIB)
    spec = json.loads(NodeClaims(real_node).cdi_spec(uid).read_text())
    mounts = {m["containerPath"]: (m["type"], m["options"][0]) for m in spec["containerEdits"]["mounts"]}
    assert mounts == {HAMI_LIBRARY_PATH: ("bind", "ro"), LD_SO_PRELOAD: ("bind", "ro")}
