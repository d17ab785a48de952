"""Scheduling: where a pod goes and which GPUs it gets, in rooms that import inward.

``registry`` (the policy table) and ``sync`` (the ledger kept equal to the cluster) sit above ``policies`` (the
classic policies; ``policies/fgd`` FGD and ``fgd-plus``), ``mig`` (the MIG plugin, its books and replay) and
``nodefit`` (per-node gates and admission holds), which import only ``framework`` (the cycle: candidates, filters,
scores, the GPU planner, tie rules) and not each other. The import contracts in ``pyproject.toml`` hold this.
"""
