"""Kubernetes resourceVersions compared the one way informers may: as etcd revisions when both are numbers."""

from __future__ import annotations


def older_version(event: str, held: str) -> bool:
    """True when resourceVersion ``event`` is older than ``held``: both are numbers (the API server's etcd
    revisions) and ``event``'s is smaller. Kubernetes calls resourceVersions opaque, so anything else (empty, not a
    number) is never older: the caller applies the event."""
    return held.isdecimal() and event.isdecimal() and int(held) > int(event)
