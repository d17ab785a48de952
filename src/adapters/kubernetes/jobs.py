"""The Job half of :class:`~adapters.kubernetes.cluster.KubernetesCluster` over ``BatchV1Api`` (a mixin over
:class:`~.base.KubernetesApis`; its watches go through ``kubernetes.watch.Watch``).

Protocol facts (batch/v1 API reference; checked by ``tests/contract``):

* deletes pass ``propagationPolicy`` explicitly: the batch/v1 default orphans the Job's pods;
* status is written with a JSON merge patch through ``jobs/status`` (:func:`~.translate_jobs.job_status_patch`);
  a Job whose ``Complete``/``Failed`` condition is ``True`` is left alone by the Job controller from then on;
* label selectors are passed to the server verbatim (it answers 400 for a malformed one).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from kubernetes import watch

from domain.kube.objects import EventType, JobObject, JobStatus, Listing, Propagation, WatchEvent

from .base import KubernetesApis
from .compat import JOB_STATUS, MERGE_PATCH, merge_patch, wire_timeout
from .errors import api_errors
from .rawjson import WATCH_SOCKET_SLACK
from .translate_jobs import job_from_v1, job_status_patch, job_to_v1

_T = TypeVar("_T")


class KubernetesJobs(KubernetesApis):
    """The Job methods of :class:`~adapters.kubernetes.cluster.KubernetesCluster` (module docstring)."""

    def list_jobs(self, namespace: str, *, label_selector: str = "") -> Listing[JobObject]:
        """Jobs of ``namespace`` matching ``label_selector``. Raises ClusterError (400 for a bad selector)."""
        with api_errors(f"list jobs in {namespace[:64]}"):
            jobs = self._batch.list_namespaced_job(
                namespace, label_selector=label_selector or None, _request_timeout=self._timeout
            )
        rv = (jobs.metadata.resource_version or "") if jobs.metadata is not None else ""
        return Listing(tuple(job_from_v1(j) for j in jobs.items), rv)

    def watch_jobs(
        self, namespace: str, *, resource_version: str, timeout_seconds: float, label_selector: str = ""
    ) -> Iterator[WatchEvent[JobObject]]:
        """Job changes in ``namespace`` after ``resource_version`` through ``label_selector``, for about
        ``timeout_seconds`` (s, rounded up). The iterator raises GoneError (410) and ClusterError."""
        return self._watch(
            self._batch.list_namespaced_job,
            job_from_v1,
            resource_version,
            timeout_seconds,
            f"watch jobs in {namespace[:64]}",
            namespace=namespace,
            label_selector=label_selector or None,
        )

    def get_job(self, namespace: str, name: str) -> JobObject:
        """One Job. Raises NotFoundError."""
        with api_errors(f"get job {namespace[:64]}/{name[:100]}"):
            return job_from_v1(self._batch.read_namespaced_job(name, namespace, _request_timeout=self._timeout))

    def create_job(self, job: JobObject) -> JobObject:
        """Create a Job (:func:`~.translate_jobs.job_to_v1`). Raises ConflictError if it exists, NotFoundError if
        the namespace does not, ClusterError (422) if invalid (for example a name over 63 characters)."""
        with api_errors(f"create job {job.namespace[:64]}/{job.name[:100]}"):
            created = self._batch.create_namespaced_job(job.namespace, job_to_v1(job), _request_timeout=self._timeout)
        return job_from_v1(created)

    def delete_job(self, namespace: str, name: str, *, propagation: Propagation = Propagation.BACKGROUND) -> None:
        """Delete a Job with ``propagationPolicy`` = ``propagation``. Raises NotFoundError."""
        with api_errors(f"delete job {namespace[:64]}/{name[:100]}"):
            self._batch.delete_namespaced_job(
                name, namespace, propagation_policy=propagation.value, _request_timeout=self._timeout
            )

    def set_job_status(self, namespace: str, name: str, status: JobStatus) -> JobObject:
        """Merge-patch ``status`` through the status subresource. Raises NotFoundError."""
        body = job_status_patch(status, now=time.time())
        with api_errors(f"set status of job {namespace[:64]}/{name[:100]}"):
            job = merge_patch(
                lambda: self._batch.patch_namespaced_job_status(
                    name, namespace, body, _content_type=MERGE_PATCH, _request_timeout=self._timeout),
                self._batch.api_client, JOB_STATUS, body, timeout=self._timeout,
                path={"name": name, "namespace": namespace})
        return job_from_v1(job)

    def _watch(self, list_fn: Callable[..., Any], convert: Callable[[Any], _T], resource_version: str,
               timeout_seconds: float, what: str, **kwargs: Any) -> Iterator[WatchEvent[_T]]:
        """``list_fn``'s changes through ``kubernetes.watch.Watch`` (which raises ``ERROR`` events as
        ``ApiException``), for about ``timeout_seconds`` (s, rounded up; the socket waits
        :data:`.rawjson.WATCH_SOCKET_SLACK` longer)."""
        server_timeout = max(1, math.ceil(timeout_seconds))
        watcher = watch.Watch()
        stream = watcher.stream(
            list_fn,
            resource_version=resource_version,
            timeout_seconds=server_timeout,
            allow_watch_bookmarks=True,
            _request_timeout=wire_timeout(server_timeout + WATCH_SOCKET_SLACK),
            **kwargs,
        )
        try:
            with api_errors(f"{what} from resourceVersion {resource_version[:40]}"):
                for raw in stream:
                    kind = EventType(raw["type"])
                    if kind is EventType.BOOKMARK:
                        metadata = raw["raw_object"].get("metadata", {})
                        yield WatchEvent(kind, None, str(metadata.get("resourceVersion", "")))
                        continue
                    obj = raw["object"]
                    yield WatchEvent(kind, convert(obj), obj.metadata.resource_version or "")
        finally:
            watcher.stop()
            stream.close()
