"""The DRA driver's node-side logic: ResourceSlices of the node's GPUs (:mod:`.publisher`)."""
