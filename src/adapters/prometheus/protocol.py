"""``lj_runtimekit_protocol_info{component,fingerprint}``: the protocol each component loaded, as an info-style
gauge (value 1), so ``count by (fingerprint) (lj_runtimekit_protocol_info)`` shows disagreeing components."""

from __future__ import annotations

import prometheus_client

PROTOCOL_INFO = "lj_runtimekit_protocol_info"
"""Metric name; labels ``component`` (scheduler, exporter, controller) and ``fingerprint``."""


def protocol_info_gauge(registry: prometheus_client.CollectorRegistry) -> prometheus_client.Gauge:
    """The protocol info gauge on ``registry`` (set a label set to 1 to publish)."""
    return prometheus_client.Gauge(
        PROTOCOL_INFO, "Fingerprint of the protocol.yaml this component loaded (always 1)",
        ["component", "fingerprint"], registry=registry)
