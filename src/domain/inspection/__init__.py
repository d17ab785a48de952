"""``ljrk inspect``: the per-node and per-GPU report of what the API objects (and the scheduler) say."""
