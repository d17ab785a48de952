"""The controller's reader of failed Jobs' causes: the termination message of each failed Job's pod.

A failed toggle Job's condition says only ``BackoffLimitExceeded``; the job agent's own cause is in its pod's
``status.containerStatuses[].state.terminated.message`` (``domain.toggle.jobs.failure_cause``). :class:`JobCauses`
lists the pods of each failed Job once (label ``job-name``, in the Job's namespace: the controller's Role suffices),
through the cluster port, and
remembers the answer by Job UID (bounded), so a failed Job kept for its TTL costs one list, not one per reconcile. A
list that fails gives a note naming the error (the failure is still reported, with the Job condition) and is tried
again at the next reconcile that needs it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from domain.kube.objects import JobObject, JobPhase
from domain.toggle.jobs import JOB_NAME_POD_LABEL, FailureCause, failure_cause
from ports.cluster import ClusterError, PodsApi
from services._shared.logs import fields

log = logging.getLogger(__name__)

MEMORY = 1000
"""Failed Jobs whose cause is remembered (by UID; the oldest is forgotten first)."""


class JobCauses:
    """Causes of failed Jobs (module docstring). Called from the controller's one worker thread."""

    def __init__(self, cluster: PodsApi, *, memory: int = MEMORY) -> None:
        self._cluster = cluster
        self._memory = memory
        self._known: dict[str, FailureCause] = {}

    def of(self, jobs: Sequence[JobObject]) -> dict[str, FailureCause]:
        """The cause of every failed Job in ``jobs``, by Job name. Never raises."""
        out = {}
        for job in jobs:
            if job.status.phase is JobPhase.FAILED:
                out[job.name] = self._cause(job)
        return out

    def _cause(self, job: JobObject) -> FailureCause:
        known = self._known.get(job.uid) if job.uid else None
        if known is not None:
            return known
        try:
            listing = self._cluster.list_pods(label_selector=f"{JOB_NAME_POD_LABEL}={job.name}",
                                              namespace=job.namespace)
        except ClusterError as error:
            log.warning("pods of a failed Job not read", extra=fields(job=job.name, error=str(error)))
            return FailureCause(note=f"pod not read: {error}")
        cause = failure_cause(listing.items)
        if job.uid:
            self._known[job.uid] = cause
            while len(self._known) > self._memory:
                del self._known[next(iter(self._known))]
        return cause
