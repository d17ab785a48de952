"""``ljrk scheduler``: the GPU-sharing scheduler as a kube-scheduler extender or a standalone loop."""
