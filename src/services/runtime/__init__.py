"""Application logic of the runtime component: drives domain rules and ports; no framework or I/O library."""
