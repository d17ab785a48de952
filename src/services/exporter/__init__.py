"""Application logic of the exporter component: drives domain rules and ports; no framework or I/O library."""
