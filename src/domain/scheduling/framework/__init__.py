"""The scheduling framework: the cycle runner and its plugin protocols (:mod:`.cycle`), the reserve-phase GPU
planner (:mod:`.planner`), the generic filters (:mod:`.filters`), the extender's candidate nodes (:mod:`.candidates`)
and the tie rules (:mod:`.tiebreak`). It knows no policy: policies and the MIG plugin build on it."""
