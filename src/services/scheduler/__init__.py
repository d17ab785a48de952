"""Application logic of the scheduler component: drives domain rules and ports; no framework or I/O library."""
