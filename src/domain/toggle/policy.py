"""Retry and clean-up policy of the node toggle: tries, exponential backoff, Job deadlines and TTLs (seconds).

Pure functions of the values passed in; the domain reads no clock. A failed Job is retried after
``min(backoff_cap, backoff_base × 2^(failures − 1))`` seconds without waiting for a label change; after
``max_tries`` failed Jobs in a row for the same target the node is ``failed``.
"""

from __future__ import annotations

import attrs

from domain.errors import InvalidRequestError

STUCK_GRACE_SECONDS = 60.0
"""Seconds past ``job_deadline`` after which the controller itself treats a still-active Job as failed (the Job
controller normally fails it at ``activeDeadlineSeconds``; without a Job controller or kubelet nothing would)."""


@attrs.frozen
class TogglePolicy:
    """``max_tries`` Jobs per target before ``failed``; ``backoff_base``/``backoff_cap`` (s) of the retry delay;
    ``failed_job_ttl`` (s) a failed Job is kept for debugging after it finished; ``job_deadline`` (s) the Job's
    ``activeDeadlineSeconds``. Raises :class:`InvalidRequestError` naming the field for values out of range
    (``max_tries`` ≥ 1, ``0 < backoff_base ≤ backoff_cap``, ``failed_job_ttl`` ≥ 0, ``job_deadline`` ≥ 1)."""

    max_tries: int = 5
    backoff_base: float = 10.0
    backoff_cap: float = 300.0
    failed_job_ttl: float = 3600.0
    job_deadline: float = 300.0

    def __attrs_post_init__(self) -> None:
        if self.max_tries < 1:
            raise InvalidRequestError("max_tries", self.max_tries, "must be >= 1")
        if not 0 < self.backoff_base <= self.backoff_cap:
            raise InvalidRequestError("backoff_base", (self.backoff_base, self.backoff_cap),
                                      "need 0 < backoff_base <= backoff_cap")
        if self.failed_job_ttl < 0:
            raise InvalidRequestError("failed_job_ttl", self.failed_job_ttl, "must be >= 0")
        if self.job_deadline < 1:
            raise InvalidRequestError("job_deadline", self.job_deadline, "must be >= 1 s")

    def backoff(self, failures: int) -> float:
        """Seconds to wait before the next try after ``failures`` failed Jobs (:func:`backoff_delay`)."""
        return backoff_delay(failures, base=self.backoff_base, cap=self.backoff_cap)

    @property
    def stuck_after(self) -> float:
        """Age (s) at which an active Job counts as failed: ``job_deadline`` + :data:`STUCK_GRACE_SECONDS`."""
        return self.job_deadline + STUCK_GRACE_SECONDS


def backoff_delay(failures: int, *, base: float, cap: float) -> float:
    """``min(cap, base × 2^(failures − 1))`` seconds for ``failures`` ≥ 1 (0 for none): 10, 20, 40 … capped.
    Raises :class:`InvalidRequestError` for a negative count."""
    if failures < 0:
        raise InvalidRequestError("failures", failures, "must be >= 0")
    if failures == 0:
        return 0.0
    return float(min(cap, base * 2.0 ** min(failures - 1, 62)))
