"""Scheduling policies, the score plugins a profile ranks nodes with: the classic heuristics (:mod:`.classic`) and
Fragmentation Gradient Descent with its variants (:mod:`.fgd`)."""
