"""Which of the Runtime's container rows belong to pods that ended, from the Kubernetes API.

Pod-resources alone is not enough: kubelets before 1.34 (and later ones with ``KubeletPodResourcesListUseActivePods``
off) keep listing a terminated pod until it is deleted, and the
Runtime keeps the pod's record until the device plugin releases it, so without the API a completed pod's series
outlive it by up to a minute. A pod has ended when the API lists it in a terminal phase (Succeeded, Failed) or
does not list it at all (deleted, or replaced by a pod of the same name with a new UID). "Not listed" is only
evidence when the listing was taken after the rows were read: every pod with a record was in the API before its
record existed, so a pod missing from a later listing is gone. A container that restarted keeps its pod (same UID,
still Running), so its series stay. Pod UIDs are never reused, so an ended pod stays ended.

Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import attrs

from domain.kube.objects import PodObject
from domain.runtime.types import ExporterData


def ended_uids(uids: Iterable[str], pods: Iterable[PodObject]) -> frozenset[str]:
    """The non-empty ``uids`` whose pod is terminal in ``pods`` or absent from it (``pods``: the node's pods,
    listed after the rows naming ``uids`` were read)."""
    live = {pod.uid for pod in pods if not pod.phase.terminal}
    return frozenset(uid for uid in uids if uid and uid not in live)


def drop_pods(data: ExporterData, ended: Collection[str]) -> ExporterData:
    """``data`` without the container rows of the pods in ``ended`` (UIDs) and with their MIG instances shown
    free; ``data`` itself when nothing changes. GPU rows are never dropped."""
    if not ended:
        return data
    kept = tuple(row for row in data.containers if row.pod_uid not in ended)
    mig = tuple(
        attrs.evolve(row, instance=attrs.evolve(row.instance, owner=None))
        if row.instance.owner is not None and row.instance.owner.pod_uid in ended else row
        for row in data.mig
    )
    if len(kept) == len(data.containers) and mig == data.mig:
        return data
    return attrs.evolve(data, containers=kept, mig=mig)
