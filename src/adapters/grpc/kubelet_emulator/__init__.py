"""A kubelet emulator for one node, speaking kubelet's real gRPC protocols on unix sockets (for ``ljrk up`` and
integration tests): device-plugin Registration and the device manager's pod admission (:mod:`.devicemanager`),
pod-resources ``List`` (:mod:`.podresources`), DRA driver registration and claim preparation (:mod:`.dra`) and the
pod lifecycle over the cluster port (:mod:`.node`). Behaviour follows kubelet's ``pkg/kubelet/cm/devicemanager``,
``pkg/kubelet/cm/dra`` and ``pkg/kubelet/apis/podresources``; what is not emulated is listed in :mod:`.devicemanager`
and :mod:`.dra`.

It lives inside ``adapters.grpc`` because only that package may import ``grpc`` and the generated kubelet code
(import-linter contracts in ``pyproject.toml``).
"""

from .admission import (
    UNEXPECTED_ADMISSION_ERROR,
    AdmissionError,
    AdmissionResult,
    ClaimDevice,
    ContainerAdmission,
    ContainerClaim,
    PodAdmission,
    PreferredFn,
    container_requests,
    merge_responses,
    pick_devices,
)
from .clock import Clock, ManualClock, SystemClock
from .devicemanager import CREATE_CONTAINER_ERROR, RUN_CONTAINER_ERROR, DeviceManager
from .dra import FAILED_PREPARE_REASON, DraManager, DraOutcome
from .endpoint import PluginEndpoint, PluginOptions
from .node import DURATION_ANNOTATION, INVALID_DURATION_REASON, NodeKubelet, Rejection, parse_duration
from .podresources import PodResourcesServer, list_response
from .registration import KUBELET_SOCKET_NAME, SUPPORTED_VERSIONS, PluginRegistry

__all__ = [
    "CREATE_CONTAINER_ERROR",
    "DURATION_ANNOTATION",
    "FAILED_PREPARE_REASON",
    "INVALID_DURATION_REASON",
    "KUBELET_SOCKET_NAME",
    "RUN_CONTAINER_ERROR",
    "SUPPORTED_VERSIONS",
    "UNEXPECTED_ADMISSION_ERROR",
    "AdmissionError",
    "AdmissionResult",
    "ClaimDevice",
    "Clock",
    "ContainerAdmission",
    "ContainerClaim",
    "DeviceManager",
    "DraManager",
    "DraOutcome",
    "ManualClock",
    "NodeKubelet",
    "PluginEndpoint",
    "PluginOptions",
    "PluginRegistry",
    "PodAdmission",
    "PodResourcesServer",
    "PreferredFn",
    "Rejection",
    "SystemClock",
    "container_requests",
    "list_response",
    "merge_responses",
    "parse_duration",
    "pick_devices",
]
