"""A pod's MIG asks: each container's profile and instance count, and the instances the pod needs per profile.

A container asks for ``count`` instances of one profile; the pod needs, per profile,
``max(Σ app containers, max init container)`` instances (Kubernetes' effective-request rule: kubelet hands an
init container's devices on to the app containers).
"""

from __future__ import annotations

import attrs

from domain.errors import InvalidRequestError


@attrs.frozen
class MigContainerRequest:
    """One container's MIG ask: ``count`` (≥ 1) instances of ``profile`` (any accepted spelling until
    :meth:`domain.scheduling.mig.plugin.MigPlugin.admit` makes it canonical); ``init`` marks an init container."""

    name: str
    profile: str
    count: int = 1
    init: bool = False

    def __attrs_post_init__(self) -> None:
        if not self.name:
            raise InvalidRequestError("container.name", self.name, "must not be empty")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise InvalidRequestError(f"container[{self.name}].count", self.count, "must be an integer ≥ 1")


@attrs.frozen
class MigPodRequest:
    """A pod's MIG asks: ``uid`` and its ``containers`` (names unique, at least one)."""

    uid: str
    containers: tuple[MigContainerRequest, ...]

    def __attrs_post_init__(self) -> None:
        if not self.uid:
            raise InvalidRequestError("pod.uid", self.uid, "must not be empty")
        names = [c.name for c in self.containers]
        if not names or len(set(names)) != len(names):
            raise InvalidRequestError(f"pod[{self.uid}].containers", names, "need at least one, names unique")

    def demand(self) -> dict[str, tuple[str, ...]]:
        """Per profile name: the container label of each instance the pod needs (effective-request rule).

        App containers take their instances in order; extra instances needed by a larger init container are
        labelled with that init container.
        """
        out: dict[str, tuple[str, ...]] = {}
        for profile in dict.fromkeys(c.profile for c in self.containers):
            app = [c for c in self.containers if c.profile == profile and not c.init]
            inits = [c for c in self.containers if c.profile == profile and c.init]
            labels = [c.name for c in app for _ in range(c.count)]
            largest = max(inits, key=lambda c: c.count, default=None)
            if largest is not None and largest.count > len(labels):
                labels += [largest.name] * (largest.count - len(labels))
            out[profile] = tuple(labels)
        return out
