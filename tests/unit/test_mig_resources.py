"""MIG extended resource names: ``<prefix>/mig-<canonical profile>`` from the protocol, one shared table.

Behaviours covered:

* the prefix is the domain of the protocol's GPU resource, for the default and a custom protocol; a GPU
  resource without ``<domain>/`` is refused;
* the names for the default models are exactly the canonical profiles (``+me`` written ``.me``), sorted, each a
  valid Kubernetes qualified name; models restrict the table; shared names list every model offering them;
* ``parse`` inverts the mapping, returns None for other resources, and raises ``UnknownMigProfileError`` for an
  alias or unknown ``mig-*`` name, naming the canonical resource to use (B30);
* one table for both sides: the names the device plugin registers (``mig_resource_names``) are exactly the
  names whose requests the MIG plugin admits and plans (every name parses, admits and places on an empty GPU of
  each model offering it).
"""

from __future__ import annotations

import re

import pytest

from domain.errors import InvalidRequestError
from domain.kube.migresources import mig_resource_name, mig_resource_names, mig_resource_table, resource_prefix
from domain.kube.protocol import ProtocolConstants, ResourceNames
from domain.mig.errors import UnknownMigProfileError
from domain.mig.ledger import MigGpu, MigNodeLedger, PlacementMode
from domain.mig.profiles import MIG_MODELS, resolve_profile
from domain.mig.requests import MigContainerRequest, MigPodRequest
from domain.scheduling.mig.plugin import MigPlugin

PROTOCOL = ProtocolConstants()
QUALIFIED = re.compile(r"^[a-z0-9.-]+/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def test_prefix_from_protocol() -> None:
    assert resource_prefix(PROTOCOL) == "alibabacloud.com"
    custom = ProtocolConstants(resources=ResourceNames(gpu="example.org/gpu"))
    assert mig_resource_name(custom, resolve_profile("A30-24GB", "1g.6gb")) == "example.org/mig-1g.6gb"
    with pytest.raises(InvalidRequestError, match=r"resources\.gpu"):
        resource_prefix(ProtocolConstants(resources=ResourceNames(gpu="gpu")))


def test_names_for_models() -> None:
    names = mig_resource_names(PROTOCOL, ["A100-40GB"])
    assert names == tuple(
        f"alibabacloud.com/mig-{n}"
        for n in sorted(["1g.5gb", "1g.5gb.me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"])
    )
    everything = mig_resource_names(PROTOCOL)
    assert len(everything) == len({p.name for m in MIG_MODELS.values() for p in m.profiles})
    assert all(QUALIFIED.match(name) and len(name.split("/")[1]) <= 63 for name in everything)
    table = mig_resource_table(PROTOCOL, ["A100-80GB", "NVIDIA H100 80GB HBM3", "A100-40GB"])
    assert table.models["alibabacloud.com/mig-1g.10gb"] == ("A100-40GB", "A100-80GB", "H100-80GB")
    assert table.models["alibabacloud.com/mig-7g.40gb"] == ("A100-40GB",)


def test_parse() -> None:
    table = mig_resource_table(PROTOCOL)
    assert table.parse("alibabacloud.com/mig-3g.71gb") == "3g.71gb"
    assert table.parse("alibabacloud.com/mig-1g.18gb.me") == "1g.18gb+me"
    assert table.parse("alibabacloud.com/gpu-memory") is None
    assert table.parse("nvidia.com/mig-1g.5gb") is None
    with pytest.raises(UnknownMigProfileError, match=r"use alibabacloud\.com/mig-3g\.71gb"):
        table.parse("alibabacloud.com/mig-3g.70gb")
    with pytest.raises(UnknownMigProfileError, match=r"use alibabacloud\.com/mig-7g\.141gb"):
        table.parse("alibabacloud.com/mig-7g.140gb")
    with pytest.raises(UnknownMigProfileError, match=r"use alibabacloud\.com/mig-1g\.5gb\.me"):
        table.parse("alibabacloud.com/mig-1g.5gb+me")
    with pytest.raises(UnknownMigProfileError, match=r"profile='9g\.1gb'.*valid profiles: 1g\.10gb"):
        table.parse("alibabacloud.com/mig-9g.1gb")


def test_device_plugin_and_scheduler_share_one_table() -> None:
    registered = set(mig_resource_names(PROTOCOL))
    table = mig_resource_table(PROTOCOL)
    assert registered == set(table.names)
    for name in sorted(registered):
        profile = table.parse(name)
        assert profile is not None
        assert mig_resource_name(PROTOCOL, resolve_profile(table.models[name][0], profile)) == name
        pod = MigPlugin.admit(MigPodRequest(f"uid-{name}", (MigContainerRequest("c", profile),)))
        for key in table.models[name]:
            node = MigNodeLedger("n", [MigGpu(0, "GPU-0", MIG_MODELS[key], PlacementMode.DYNAMIC)])
            assert MigPlugin([node]).schedule(pod).scheduled, (name, key)
