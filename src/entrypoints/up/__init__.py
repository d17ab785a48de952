"""``ljrk up``: the whole stack on one machine — simulated nodes (Runtime, kubelet emulator, device plugin,
exporter), the scheduler, the controller and its Jobs — driven by a workload, ending with an agreement report."""
