"""``ljrk job-agent``: enable or disable the node Runtime from a Job's pod pinned to the node."""
