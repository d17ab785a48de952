"""Application logic of the device_plugin component: drives domain rules and ports; no framework or I/O library."""
