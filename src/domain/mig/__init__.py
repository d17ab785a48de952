"""Multi-Instance GPU (MIG) space partitioning, the resource model: profile tables, requests and a placement-aware
ledger.

Pure domain code (stdlib + attrs). Modules: :mod:`.profiles` (per-model profile tables from NVIDIA's MIG user guide,
name and memory resolution), :mod:`.requests` (a pod's MIG asks), :mod:`.gpu` (one GPU's instances, geometry-checked),
:mod:`.ledger` (per-node books) and :mod:`.fragmentation` (the placeability measure). Scheduling over this model
(filter, score, reserve, the replay) is :mod:`domain.scheduling.mig`, and the Kubernetes resource names of the
profiles are :mod:`domain.kube.migresources`; nothing here imports either.
"""
