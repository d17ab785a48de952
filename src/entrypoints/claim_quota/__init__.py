"""``ljrk claim-quota``: the validating webhook that enforces per-namespace quotas on DRA claims of our driver."""
