"""``ljrk protocol``: inspect and compare protocol ConfigMaps."""
