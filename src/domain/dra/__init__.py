"""Dynamic Resource Allocation (``resource.k8s.io/v1``): the node's GPUs as ResourceSlices (:mod:`.slices` the
values, :mod:`.build` the inventory → content function, :mod:`.pool` the generation and the writes)."""
