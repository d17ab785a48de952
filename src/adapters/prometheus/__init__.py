"""prometheus-client adapters: metrics registries and their HTTP exposition."""

from .scheduler import PrometheusSchedulerMetrics

__all__ = ["PrometheusSchedulerMetrics"]
