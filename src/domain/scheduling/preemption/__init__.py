"""Preemption: which lower-priority pods to evict so that a pending pod fits (:mod:`.victims`)."""
