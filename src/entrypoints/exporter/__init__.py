"""``ljrk exporter``: Runtime data to Prometheus metrics, attributed to pods."""
