"""The exporter's domain: pod attribution with its GPU cross-check (``attribution``), the scrape snapshot
(``snapshot``), the table of metric specs (``metrics``) every Prometheus series is built from, and the detector's
transitions that become Kubernetes Events on the node (``detector``)."""
