"""What the device plugin reports about itself at a scrape (``ljrk device-plugin --listen``)."""

from __future__ import annotations

from collections.abc import Mapping

import attrs


def _int_map(value: Mapping[str, int]) -> dict[str, int]:
    return dict(value)


@attrs.frozen
class DevicePluginStatus:
    """A point-in-time view of the device plugin.

    ``registered``: resource name → True while registered with the current kubelet (every resource it serves,
    False for one being re-registered); ``registrations``: successful Register calls since start;
    ``reregistrations``: completed re-serve rounds (kubelet restarts, lost streams); ``runtime_allocates``:
    Runtime Allocate calls made (one per container); ``preferred_allocations``: GetPreferredAllocation requests
    kubelet made (one per container it asked about); ``gpus``: GPU count per health value (``Healthy``,
    ``Unhealthy``); ``released_records``: Runtime allocation records the release reconciler released since start
    (records of pods that left the node or ended).
    """

    registered: Mapping[str, bool] = attrs.field(factory=dict)
    registrations: int = 0
    reregistrations: int = 0
    runtime_allocates: int = 0
    gpus: Mapping[str, int] = attrs.field(factory=dict, converter=_int_map)
    released_records: int = 0
    preferred_allocations: int = 0
