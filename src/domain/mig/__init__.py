"""Multi-Instance GPU (MIG) space partitioning: profile tables, a placement-aware ledger and the MIG plugin.

Pure domain code (stdlib + attrs + numpy for the replay's generator). Modules: :mod:`.profiles` (per-model
profile tables from NVIDIA's MIG user guide, name and memory resolution), :mod:`.resources` (extended resource
names), :mod:`.gpu` (one GPU's instances, geometry-checked), :mod:`.ledger` (per-node books),
:mod:`.fragmentation` (the placeability measure), :mod:`.plugin` (filter, score, reserve, unreserve) and
:mod:`.replay` (static versus dynamic replay).
"""
