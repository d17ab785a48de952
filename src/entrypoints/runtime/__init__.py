"""``ljrk runtime``: the reference node Runtime serving ``ljrk.runtime.v1.Runtime`` and ``ljrk.config.v1.ConfigService``
on a unix socket, over NVML or simulated GPUs."""
