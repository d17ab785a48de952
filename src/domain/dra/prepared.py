"""A prepared claim: what the kubelet is answered, the per-claim CDI spec, and the checkpoint form.

* **CDI** (CDI spec ``cdiVersion`` 0.6.0, as :mod:`domain.device_plugin.cdi`): one spec per claim, kind
  :data:`CLAIM_CDI_KIND` (``lj-runtimekit.io/claim``, apart from the device plugin's ``lj-runtimekit.io/gpu`` so
  the two never name the same device), one device ``<claim uid>-gpu-<index>`` per granted GPU with the env edit
  ``LJRK_CDI_DEVICE_<index>=<uuid>`` (as the device plugin's spec) and the device node ``/dev/nvidia<minor>`` where
  the host's driver lists the GPU, and spec-wide edits: the Runtime's environment for the grant
  (``NVIDIA_VISIBLE_DEVICES``, ``LJRK_*`` and HAMi-core limits, the same the device plugin hands a container) and
  the host's control nodes, and the Runtime's mounts for the grant (HAMi-core's library and preload list, or the
  MPS pipe directory: what enforces the share, the same the device plugin hands kubelet; the plugin passes only
  those its allow-list expects, :mod:`domain.device_plugin.response_guard`). A simulated GPU (no driver entry)
  gets the environment only. A MIG claim has one
  device per parent GPU of its instances (``<claim uid>-gpu-<parent index>``, the parent's device node); the
  Runtime's environment names the instances (``NVIDIA_VISIBLE_DEVICES=MIG-…``, ``LJRK_MIG_*``). Every device has
  at least the env edit: CDI refuses a whole spec with a device without edits ("invalid device, empty device edits",
  ``Device.validate`` of tags.cncf.io/container-device-interface), and containerd then finds none of its devices.
* **Answer**: per allocation result, its request name, pool, device, share ID and the CDI id of its GPU.
* **Checkpoint**: :func:`to_document` / :func:`from_document`, a JSON-ready mapping ``{"version": 1, "claims":
  {uid: {"namespace", "name", "devices": [{"requests", "pool", "device", "cdi", "share_id"}]}}}``.

Pure: nothing here reads or writes files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from domain.device_plugin.cdi import CDI_VENDOR, ENV_PREFIX, CdiDevice, CdiDeviceNode, CdiSpec, HostGpuNodes
from domain.dra.claims import AllocationResult, ClaimRef
from domain.runtime.types import ContainerAllocationRequest, ContainerAllocationResponse

CLAIM_CDI_KIND = f"{CDI_VENDOR}/claim"
"""The kind of every per-claim spec."""

CHECKPOINT_VERSION = 1


@attrs.frozen
class PreparedDevice:
    """One device of the answer: ``requests`` (request names), ``pool``, ``device``, ``cdi_ids`` (fully qualified
    CDI names) and ``share_id`` (None without consumable capacity)."""

    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str | None = None


@attrs.frozen
class PreparedClaim:
    """A claim prepared on this node: ``claim`` and its ``devices``."""

    claim: ClaimRef
    devices: tuple[PreparedDevice, ...]


@attrs.frozen
class ClaimOutcome:
    """The answer for one claim: ``prepared`` (None on error) or ``error`` (empty on success)."""

    prepared: PreparedClaim | None = None
    error: str = ""


def cdi_device_name(claim_uid: str, gpu_index: int) -> str:
    """``<claim uid>-gpu-<index>`` (unqualified)."""
    return f"{claim_uid}-gpu-{gpu_index}"


def claim_spec(request: ContainerAllocationRequest, response: ContainerAllocationResponse,
               host: HostGpuNodes) -> CdiSpec:
    """The claim's CDI spec (module docstring) for the Runtime's ``request`` (its ``pod_uid`` is the claim UID)
    and ``response``."""
    devices = []
    real = False
    parents = dict.fromkeys([(g.index, g.uuid) for g in request.gpus] + [(m.index, m.uuid) for m in request.mig])
    for index, uuid in parents:
        minor = host.minors.get(uuid)
        real = real or minor is not None
        nodes = () if minor is None else (CdiDeviceNode(f"/dev/nvidia{minor}"),)
        devices.append(CdiDevice(cdi_device_name(request.pod_uid, index), env=((f"{ENV_PREFIX}{index}", uuid),),
                                 device_nodes=nodes))
    control = tuple(CdiDeviceNode(f"/dev/{name}") for name in host.control_nodes) if real else ()
    env = tuple(sorted(response.envs.items()))
    return CdiSpec(CLAIM_CDI_KIND, tuple(devices), device_nodes=control, env=env, mounts=response.mounts)


def prepared(claim: ClaimRef, results: Iterable[AllocationResult], request: ContainerAllocationRequest) -> (
        PreparedClaim):
    """The answer for ``results`` granted by ``request`` (each result's GPU, or a MIG instance's parent GPU, named
    by its index in the device name ``gpu-<index>[-mig-…]``, as :func:`domain.dra.claims.plan_claim` checked)."""
    devices = tuple(
        PreparedDevice(requests=(r.request,) if r.request else (), pool=r.pool, device=r.device,
                       cdi_ids=(f"{CLAIM_CDI_KIND}={cdi_device_name(claim.uid, int(r.device.split('-')[1]))}",),
                       share_id=r.share_id)
        for r in results)
    return PreparedClaim(claim, devices)


def to_document(claims: Mapping[str, PreparedClaim]) -> dict[str, Any]:
    """The checkpoint mapping of ``claims`` (by UID), JSON-ready."""
    return {"version": CHECKPOINT_VERSION, "claims": {
        uid: {"namespace": p.claim.namespace, "name": p.claim.name, "devices": [
            {"requests": list(d.requests), "pool": d.pool, "device": d.device, "cdi": list(d.cdi_ids),
             "share_id": d.share_id} for d in p.devices]}
        for uid, p in sorted(claims.items())}}


def from_document(document: object) -> dict[str, PreparedClaim]:
    """Parse :func:`to_document`'s mapping. Raises ValueError naming what is malformed (wrong version, missing
    key, wrong type)."""
    if not isinstance(document, dict) or document.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"checkpoint: expected an object with version {CHECKPOINT_VERSION}")
    try:
        return {
            str(uid): PreparedClaim(
                ClaimRef(namespace=str(entry["namespace"]), uid=str(uid), name=str(entry["name"])),
                tuple(PreparedDevice(requests=tuple(map(str, d["requests"])), pool=str(d["pool"]),
                                     device=str(d["device"]), cdi_ids=tuple(map(str, d["cdi"])),
                                     share_id=None if d.get("share_id") is None else str(d["share_id"]))
                      for d in entry["devices"]))
            for uid, entry in dict(document["claims"]).items()}
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"checkpoint: malformed claim entry: {error!r}") from error
