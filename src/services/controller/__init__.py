"""Application logic of the controller component: drives domain rules and ports; no framework or I/O library."""
