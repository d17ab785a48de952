"""The exporter's domain: pod attribution (``attribution``), the scrape snapshot (``snapshot``) and the table of
metric specs (``metrics``) every Prometheus series is built from."""
