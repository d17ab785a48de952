"""``ljrk dra-driver``: the DRA driver's node component (ResourceSlices now; the kubelet DRA plugin next)."""
