"""``ljrk claim-migrate``: the mutating webhook that turns classic GPU requests into DRA claims."""
