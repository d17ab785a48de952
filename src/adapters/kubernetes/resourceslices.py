"""ResourceSlices (:class:`~ports.resource_slices.ResourceSlicesApi` and
:class:`~ports.resource_slices.ResourceSlicesWatch`) over the official client's
``ResourceV1Api`` (``resource.k8s.io/v1``, served from Kubernetes 1.34; consumable capacity and partitionable devices
need 1.36+, where they are beta and on; taints GA in 1.37).

Lists select ``spec.driver`` and ``spec.nodeName`` with a field selector (both are supported field selectors of
ResourceSlice); updates are PUTs (``replace``), conditional when the slice carries a resourceVersion; a delete of a
missing slice is swallowed (idempotent). Errors become the cluster port's (:mod:`.errors`). Translation:
:mod:`.translate_dra`.

``list_driver_slices``/``watch_driver_slices`` (all nodes, ``/apis/resource.k8s.io/v1/resourceslices`` with the
field selector ``spec.driver``) read the API server's JSON directly (:mod:`.rawjson`), as the claim, node and pod
informers do, through :func:`~.translate_dra.slice_from_json`: every slice they return, and every event object, goes
through that one translation (the driver-side calls above read the client's models through ``slice_from_v1``, which
yields equal values). A watch from a compacted resourceVersion raises GoneError.
"""

from __future__ import annotations

from collections.abc import Iterator

from kubernetes import client

from domain.dra.slices import ResourceSlice
from domain.kube.objects import Listing, WatchEvent
from ports.cluster import NotFoundError

from .compat import wire_timeout
from .errors import api_errors
from .rawjson import list_json, watch_json
from .translate_dra import slice_from_json, slice_from_v1, slice_to_v1


class KubernetesResourceSlices:
    """ResourceSlices through ``api_client`` (module docstring); ``request_timeout``: seconds per call. The caller
    owns and closes ``api_client``."""

    def __init__(self, api_client: client.ApiClient, *, request_timeout: float = 30.0) -> None:
        self._api = client.ResourceV1Api(api_client)
        self._timeout = wire_timeout(request_timeout)

    def list_resource_slices(self, *, driver: str, node: str) -> tuple[ResourceSlice, ...]:
        """The slices of ``driver`` on ``node``, by name. Raises ClusterError."""
        with api_errors(f"list resourceslices of {driver[:100]} on {node[:100]}"):
            listing = self._api.list_resource_slice(field_selector=f"spec.driver={driver},spec.nodeName={node}",
                                                    _request_timeout=self._timeout)
        return tuple(sorted((slice_from_v1(item) for item in listing.items or ()), key=lambda s: s.name))

    def create_resource_slice(self, resource_slice: ResourceSlice) -> ResourceSlice:
        """Create a slice. Raises ConflictError when the name exists."""
        with api_errors(f"create resourceslice {resource_slice.name[:100]}"):
            created = self._api.create_resource_slice(slice_to_v1(resource_slice), _request_timeout=self._timeout)
        return slice_from_v1(created)

    def update_resource_slice(self, resource_slice: ResourceSlice) -> ResourceSlice:
        """Replace a slice. Raises NotFoundError, ConflictError (stale resourceVersion)."""
        with api_errors(f"update resourceslice {resource_slice.name[:100]}"):
            replaced = self._api.replace_resource_slice(resource_slice.name, slice_to_v1(resource_slice),
                                                        _request_timeout=self._timeout)
        return slice_from_v1(replaced)

    def delete_resource_slice(self, name: str) -> None:
        """Delete a slice; a missing one is no error. Raises ClusterError."""
        try:
            with api_errors(f"delete resourceslice {name[:100]}"):
                self._api.delete_resource_slice(name, _request_timeout=self._timeout)
        except NotFoundError:
            return

    def list_driver_slices(self, *, driver: str) -> Listing[ResourceSlice]:
        """Every slice of ``driver`` on every node and the list's resourceVersion. Raises ClusterError."""
        slices, rv = list_json(self._api.list_resource_slice, slice_from_json,
                               f"list resourceslices of {driver[:100]}", field_selector=f"spec.driver={driver}",
                               _request_timeout=self._timeout)
        return Listing(slices, rv)

    def watch_driver_slices(self, *, driver: str, resource_version: str,
                            timeout_seconds: float) -> Iterator[WatchEvent[ResourceSlice]]:
        """Changes of ``driver``'s slices after ``resource_version`` for about ``timeout_seconds`` (s). The iterator
        raises GoneError (410) and ClusterError."""
        return watch_json(self._api.list_resource_slice, slice_from_json, resource_version, timeout_seconds,
                          f"watch resourceslices of {driver[:100]}", field_selector=f"spec.driver={driver}")
