"""``ljrk device-plugin``: the kubelet device plugin of the GPU-sharing stack."""
