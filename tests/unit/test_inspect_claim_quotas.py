"""``ljrk inspect``'s DRA claim quotas (``domain.inspection.quota`` through ``entrypoints.inspect.app.InspectApp``)
over in-memory Namespaces, claims and slices.

Behaviours covered:
- every namespace with a quota label is reported with its limits, what its allocated claims of our driver use
  (shares and whole GPUs from the slices) and how many; namespaces without a label are not;
- a use past a lowered limit is marked over; an invalid label is reported with the label and value named;
- the JSON form carries ``claimQuotas`` with limits, use, claims, over and error; the table a CLAIM QUOTA line.
"""

from __future__ import annotations

from adapters.memory.cluster import InMemoryCluster
from adapters.memory.namespaces import InMemoryNamespaces
from adapters.memory.resource_claims import InMemoryResourceClaims
from adapters.memory.resource_slices import InMemoryResourceSlices
from domain.dra.claims import AllocationResult, ClaimAllocation
from domain.dra.quota import QuotaLimits, Usage
from domain.dra.slices import Capacity, Device, ResourceSlice, SliceContent
from domain.inspection.encode import report_json
from domain.kube.protocol import ProtocolConstants
from entrypoints.inspect.app import InspectApp, InspectSettings
from entrypoints.inspect.render import render

PROTOCOL = ProtocolConstants()
DRA = PROTOCOL.dra
GI = 2**30


def _app() -> InspectApp:
    namespaces = InMemoryNamespaces()
    namespaces.put("team", {DRA.claim_quota_cores: "150", DRA.claim_quota_memory: "64Gi"})
    namespaces.put("tight", {DRA.claim_quota_cores: "50"})
    namespaces.put("broken", {DRA.claim_quota_memory: "lots"})
    namespaces.put("free")
    claims = InMemoryResourceClaims()
    whole = AllocationResult("r", DRA.driver, "n1", "gpu-0")
    share = AllocationResult("r", DRA.driver, "n1", "gpu-1", {"cores": "30", "memory": "8Gi"})
    claims.put(ClaimAllocation("team", "a", "uid-a", (whole,)))
    claims.put(ClaimAllocation("team", "b", "uid-b", (share,)))
    claims.put(ClaimAllocation("team", "pending", "uid-p"))
    claims.put(ClaimAllocation("tight", "c", "uid-c", (whole,)))
    claims.put(ClaimAllocation("free", "d", "uid-d", (whole,)))
    slices = InMemoryResourceSlices()
    devices = tuple(Device(f"gpu-{i}", capacity={"cores": Capacity(100), "memory": Capacity(40 * GI)})
                    for i in range(2))
    slices.create_resource_slice(ResourceSlice("n1", DRA.driver, "n1", 1, 1, SliceContent(devices)))
    return InspectApp(settings=InspectSettings(), cluster=InMemoryCluster(), protocol=PROTOCOL, view=None,
                      clock=lambda: 1000.0, claims=claims, namespaces=namespaces, slices=slices)


def test_namespaces_with_quota_report_limits_use_and_claims() -> None:
    report = _app().report()
    quotas = {q.namespace: q for q in report.claim_quotas}
    assert list(quotas) == ["broken", "team", "tight"]
    team = quotas["team"]
    assert (team.limits, team.used, team.claims, team.over) == (QuotaLimits(150, 64 * GI), Usage(130, 48 * GI), 2,
                                                                False)
    assert quotas["tight"].over
    assert quotas["broken"].error == f"namespace label {DRA.claim_quota_memory}='lots': must be a non-negative " \
                                     "integer quantity such as 8, 16Gi or 500M"


def test_json_and_table_forms() -> None:
    report = _app().report()
    data = report_json(report)["claimQuotas"]
    assert data[1] == {"namespace": "team", "claims": 2, "over": False, "error": "",  # type: ignore[index]
                       "limits": {"cores": 150, "memoryBytes": 64 * GI},
                       "used": {"cores": 130, "memoryBytes": 48 * GI}, "problems": []}
    table = render(report)
    assert "CLAIM QUOTA  team: cores 130/150, memory 48.0/64.0 GiB, 2 claims\n" in table
    assert "CLAIM QUOTA  tight: cores 100/50, memory 40.0/- GiB, 1 claim OVER\n" in table
    assert "CLAIM QUOTA  broken: invalid label" in table
