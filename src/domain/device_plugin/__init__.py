"""Device plugin domain: kubelet device IDs of our three resources, and mapping kubelet's Allocate calls back to
the scheduler's per-container plan (failure cases B14, B17, B18)."""
