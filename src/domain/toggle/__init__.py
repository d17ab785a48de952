"""Runtime toggle per node, driven by the enable label: the state machine (:mod:`.states`), the retry policy
(:mod:`.policy`), the per-node record and its annotations (:mod:`.record`), the Jobs (:mod:`.jobs`) and the
pure reconcile function (:mod:`.reconcile`) that the controller entrypoint runs for every node that changes."""
