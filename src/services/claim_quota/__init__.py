"""The claim quota webhook's logic: allocations of DRA claims against namespace quotas (:mod:`.gate`)."""
