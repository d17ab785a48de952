"""MIG scheduling over the MIG model of :mod:`domain.mig`: the plugin (:mod:`.plugin`), the scheduler's MIG books
(:mod:`.books`), one MIG pod's cycle (:mod:`.cycle`), the refusal of time-sharing pods on MIG GPUs
(:mod:`.timesharing`) and the static-versus-dynamic replay (:mod:`.replay`)."""
