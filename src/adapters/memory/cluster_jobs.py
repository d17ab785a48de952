"""batch/v1 Jobs of :class:`~adapters.memory.cluster.InMemoryCluster` (a mixin over
:class:`~.cluster_store.InMemoryStore`).

What kube-apiserver (1.37) does with Jobs when no Job controller runs (batch/v1 API reference):

* **create** assigns a uuid4 ``uid``, an RV and ``created_at`` (the cluster's clock) and stores the Job ACTIVE
  with zero pod counts, whatever status it was given. A name longer than 63 characters is refused with 422: the
  server copies it into the pod template's ``job-name`` label, whose values are at most 63 characters. An
  existing name raises :class:`ConflictError`.
* **delete** removes the Job at once whatever the propagation (this twin has no pods for Jobs, so there is
  nothing to propagate to); each deletion is recorded with its propagation in :attr:`InMemoryJobs.job_deletions`
  so tests can check that callers asked for background propagation.
* **status** is written only through :meth:`InMemoryJobs.set_job_status` (the Job controller's status updates).
* **list/watch** filter by namespace and label selector (:func:`~.cluster_watch.parse_label_selector`); a
  watched Job that stops matching arrives as DELETED, one that starts matching as ADDED.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator

import attrs

from domain.kube.objects import JobObject, JobPhase, JobStatus, Listing, Propagation, WatchEvent
from ports.cluster import ClusterError, ConflictError, NotFoundError

from .cluster_store import InMemoryStore
from .cluster_watch import History, parse_label_selector, status_error

MAX_JOB_NAME = 63
"""Longest Job name the API server accepts (the name becomes the value of the pods' ``job-name`` label)."""


class InMemoryJobs(InMemoryStore):
    """The Job methods of :class:`~adapters.memory.cluster.InMemoryCluster` (module docstring)."""

    _jobs: dict[tuple[str, str], JobObject]
    _job_history: History[JobObject]
    _job_deletions: list[tuple[str, str, Propagation]]

    @property
    def job_deletions(self) -> list[tuple[str, str, Propagation]]:
        """``(namespace, name, propagation)`` of every Job deleted so far, oldest first (a copy)."""
        with self._cond:
            return list(self._job_deletions)

    def list_jobs(self, namespace: str, *, label_selector: str = "") -> Listing[JobObject]:
        """Jobs of ``namespace`` sorted by name, filtered by ``label_selector``. Raises ClusterError (400)."""
        match = parse_label_selector(label_selector)
        with self._cond:
            items = tuple(
                self._jobs[key] for key in sorted(self._jobs) if key[0] == namespace and match(self._jobs[key].labels)
            )
            return Listing(items, str(self._rv_now()))

    def watch_jobs(
        self, namespace: str, *, resource_version: str, timeout_seconds: float, label_selector: str = ""
    ) -> Iterator[WatchEvent[JobObject]]:
        """Job changes in ``namespace`` after ``resource_version`` seen through ``label_selector``, for
        ``timeout_seconds`` (s). Raises ClusterError (400) for a bad selector at once; the iterator raises
        GoneError."""
        labels = parse_label_selector(label_selector)

        def match(job: JobObject) -> bool:
            return job.namespace == namespace and labels(job.labels)

        return self._watch(self._job_history, self._current_jobs, resource_version, timeout_seconds, match)

    def get_job(self, namespace: str, name: str) -> JobObject:
        """One Job. Raises NotFoundError."""
        with self._cond:
            return self._job(namespace, name)

    def create_job(self, job: JobObject) -> JobObject:
        """Store a new ACTIVE Job with a fresh uid, RV and creation time. Raises ConflictError if it exists,
        ClusterError 422 without a namespace or name, or for a name over :data:`MAX_JOB_NAME` characters."""
        if not job.name or not job.namespace:
            raise status_error(422, "job namespace and name are required")
        if len(job.name) > MAX_JOB_NAME:
            raise status_error(422, f'jobs "{job.name[:100]}": must be no more than {MAX_JOB_NAME} characters')
        with self._cond:
            if (job.namespace, job.name) in self._jobs:
                raise ConflictError(f'jobs.batch "{job.name}" already exists')
            fresh = attrs.evolve(
                job,
                uid=str(uuid.uuid4()),
                labels=dict(job.labels),
                annotations=dict(job.annotations),
                created_at=float(int(self._clock())),  # metav1.Time has whole seconds
                deletion_timestamp=None,
                status=JobStatus(),
            )
            return self._put_job(fresh, None)

    def delete_job(self, namespace: str, name: str, *, propagation: Propagation = Propagation.BACKGROUND) -> None:
        """Remove a Job at once and record ``propagation`` (module docstring). Raises NotFoundError."""
        with self._cond:
            self._job(namespace, name)
            self._drop(self._jobs, (namespace, name), self._job_history)
            self._job_deletions.append((namespace, name, propagation))

    def set_job_status(self, namespace: str, name: str, status: JobStatus) -> JobObject:
        """Replace the Job's status (the Job controller's write). Raises NotFoundError, and ClusterError when the
        Job finished and ``status`` names another phase (a terminal condition is final, as kube-apiserver rules)."""
        with self._cond:
            prev = self._job(namespace, name)
            if prev.status.phase.finished and status.phase is not prev.status.phase:
                terminal = "Complete" if prev.status.phase is JobPhase.SUCCEEDED else "Failed"
                raise ClusterError(f'Job.batch "{name[:100]}" is invalid: status.conditions: cannot disable the '
                                   f"terminal {terminal}=True condition")
            return prev if prev.status == status else self._put_job(attrs.evolve(prev, status=status), prev)

    # ------------------------------------------------------------------ internals (callers hold the lock)
    def _job(self, namespace: str, name: str) -> JobObject:
        try:
            return self._jobs[(namespace, name)]
        except KeyError:
            raise NotFoundError(f'jobs.batch "{name[:100]}" not found') from None

    def _put_job(self, job: JobObject, prev: JobObject | None) -> JobObject:
        return self._put(self._jobs, (job.namespace, job.name), self._job_history, job, prev)

    def _current_jobs(self) -> Iterable[JobObject]:
        return [self._jobs[key] for key in sorted(self._jobs)]
