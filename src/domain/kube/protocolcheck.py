"""Which protocol each running component instance loaded, against its own component's ConfigMap (``ljrk protocol
check --kubeconfig``).

Where each component publishes its fingerprint (:data:`PUBLISHERS`): the device plugin and the exporter on their
Node (annotation keys ``annotations.node-protocol`` and ``annotations.node-exporter-protocol``), the scheduler and
the controller on their own Pod (key ``annotations.node-protocol``, :mod:`services._shared.publish`). The
Runtime does not load the protocol: its ConfigMap is compared with the others, no instance is expected.

Invariants:

* a component's ConfigMap is the one whose ``app.kubernetes.io/component`` label names it (the manifests label
  every object so), else the one named ``lj-runtimekit-<component>-config``;
* the annotation keys come from the protocols themselves: an instance is read with its own component's ConfigMap
  keys first, then every other ConfigMap's, then the embedded default's (a component that has not restarted since
  a key was renamed still writes the old key); the first key present wins;
* a Node annotation is an instance only while a Running pod of that component (labels
  ``app.kubernetes.io/name=lj-runtimekit`` and ``…/component``) is on that Node in the namespace; without one
  it is :attr:`Verdict.LEFT_OVER` (uninstalled, or deployed in another namespace), which is no problem;
* a scheduler or controller pod is an instance while it is Running; a terminating one is
  :attr:`Verdict.TERMINATING` (being replaced), no problem either; a pod of a component that is not Running yet
  (Pending after a rollout restart), and a Node whose component pod is such a pod, is :attr:`Verdict.STARTING`,
  which fails the check: what it will run is not known yet (run the check again once it is up);
* an instance is :attr:`Verdict.STALE` when its fingerprint is none of its component's ConfigMaps' (it loaded an
  older copy: restart it), :attr:`Verdict.UNPUBLISHED` when it runs but published nothing (starting, an older
  release, or its write is refused: see its log), :attr:`Verdict.NO_CONFIGMAP` when its component has no ConfigMap.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence

import attrs

from domain.kube.objects import NodeObject, PodObject, PodPhase
from domain.kube.protocol import ProtocolConstants

NAME_LABEL, COMPONENT_LABEL = "app.kubernetes.io/name", "app.kubernetes.io/component"
"""Labels every object of the manifests carries (Kubernetes' recommended labels)."""
PART_OF = "lj-runtimekit"
"""Value of :data:`NAME_LABEL` on our pods."""
POD_SELECTOR = f"{NAME_LABEL}={PART_OF}"
"""Label selector of our pods."""
_CONFIGMAP_NAME = re.compile(r"lj-runtimekit-(?P<component>[a-z0-9-]+)-config")


class Target(enum.Enum):
    """Where a component publishes its fingerprint."""

    NODE = "node"
    POD = "pod"


@attrs.frozen
class Publisher:
    """A component that publishes its fingerprint: on its Node or its Pod, under the protocol's annotation key
    ``key_field`` (an :class:`~domain.kube.protocol.AnnotationKeys` attribute); ``workload`` is the kubectl
    resource that runs it (``daemonset`` or ``deployment``)."""

    component: str
    target: Target
    key_field: str
    workload: str

    def key(self, protocol: ProtocolConstants) -> str:
        """The annotation key ``protocol`` gives this component."""
        value: str = getattr(protocol.annotations, self.key_field)
        return value


PUBLISHERS = (
    Publisher("device-plugin", Target.NODE, "node_protocol", "daemonset"),
    Publisher("exporter", Target.NODE, "node_exporter_protocol", "daemonset"),
    Publisher("scheduler", Target.POD, "node_protocol", "deployment"),
    Publisher("controller", Target.POD, "node_protocol", "deployment"),
)
"""Every publishing component (module docstring)."""


def configmap_component(name: str, labels: Mapping[str, str]) -> str | None:
    """The component a ConfigMap configures: its ``app.kubernetes.io/component`` label, else the ``<component>``
    of a name ``lj-runtimekit-<component>-config``, else None."""
    label = labels.get(COMPONENT_LABEL)
    if label:
        return label
    match = _CONFIGMAP_NAME.fullmatch(name)
    return None if match is None else match["component"]


@attrs.frozen
class ConfigMapProtocol:
    """The protocol held by ConfigMap ``name`` (``data["protocol.yaml"]``) and the component it configures."""

    name: str
    component: str | None
    protocol: ProtocolConstants

    @property
    def fingerprint(self) -> str:
        """The protocol's fingerprint (16 hex digits)."""
        return self.protocol.fingerprint()


class Verdict(enum.Enum):
    """How one instance compares with its component's ConfigMap (module docstring)."""

    AGREES = "agrees"
    STALE = "stale"
    UNPUBLISHED = "unpublished"
    NO_CONFIGMAP = "no-configmap"
    LEFT_OVER = "left-over"
    TERMINATING = "terminating"
    STARTING = "starting"

    @property
    def problem(self) -> bool:
        """True for the verdicts that make the check fail (stale, unpublished, no ConfigMap, still starting)."""
        return self in (Verdict.STALE, Verdict.UNPUBLISHED, Verdict.NO_CONFIGMAP, Verdict.STARTING)


@attrs.frozen
class Instance:
    """One running component instance: ``where`` is ``node NAME`` or ``pod NS/NAME``; ``pod`` the pod's
    ``NS/NAME`` (for a Node instance, the component's pod on that Node; empty when none); ``fingerprint`` and
    ``key`` what it published (None: nothing); ``expected`` its component's ConfigMaps."""

    publisher: Publisher
    where: str
    pod: str
    fingerprint: str | None
    key: str | None
    expected: tuple[ConfigMapProtocol, ...]
    verdict: Verdict


def _keys(publisher: Publisher, configmaps: Sequence[ConfigMapProtocol], default: ProtocolConstants) -> list[str]:
    own = [c.protocol for c in configmaps if c.component == publisher.component]
    others = [c.protocol for c in configmaps if c.component != publisher.component]
    return list(dict.fromkeys(publisher.key(p) for p in [*own, *others, default]))


def _published(annotations: Mapping[str, str], keys: Iterable[str]) -> tuple[str | None, str | None]:
    for key in keys:
        if key in annotations:
            return key, annotations[key]
    return None, None


def _verdict(fingerprint: str | None, expected: Sequence[ConfigMapProtocol]) -> Verdict:
    if fingerprint is None:
        return Verdict.UNPUBLISHED
    if not expected:
        return Verdict.NO_CONFIGMAP
    return Verdict.AGREES if fingerprint in {c.fingerprint for c in expected} else Verdict.STALE


def _ours(pod: PodObject, component: str, namespace: str) -> bool:
    return (pod.namespace == namespace and pod.labels.get(NAME_LABEL) == PART_OF
            and pod.labels.get(COMPONENT_LABEL) == component and not pod.phase.terminal)


def _running(pod: PodObject, component: str, namespace: str) -> bool:
    return _ours(pod, component, namespace) and pod.phase is PodPhase.RUNNING


def read_instances(
    configmaps: Sequence[ConfigMapProtocol], nodes: Sequence[NodeObject], pods: Sequence[PodObject], *,
    namespace: str, default: ProtocolConstants | None = None,
) -> list[Instance]:
    """Every instance of every :data:`PUBLISHERS` component, in that order, then by Node or pod name, with its
    verdict (module docstring). ``pods`` are those of ``namespace`` (others are ignored); ``default`` is the
    embedded protocol (None: ``ProtocolConstants()``). Pure; never raises for cluster content."""
    default = ProtocolConstants() if default is None else default
    found: list[Instance] = []
    for publisher in PUBLISHERS:
        keys = _keys(publisher, configmaps, default)
        expected = tuple(c for c in configmaps if c.component == publisher.component)
        mine = sorted((p for p in pods if _running(p, publisher.component, namespace)), key=lambda p: p.key)
        starting = sorted((p for p in pods if _ours(p, publisher.component, namespace)
                           and p.phase is not PodPhase.RUNNING and p.deletion_timestamp is None), key=lambda p: p.key)
        if publisher.target is Target.NODE:
            for node in sorted(nodes, key=lambda n: n.name):
                key, fingerprint = _published(node.annotations, keys)
                here = [p for p in mine if p.node_name == node.name and p.deletion_timestamp is None]
                coming = [p for p in starting if p.node_name == node.name]
                if fingerprint is None and not here and not coming:
                    continue
                if here:
                    verdict, pod_key = _verdict(fingerprint, expected), here[0].key
                elif coming:  # its pod is being (re)started: what the Node says is not yet what it will run
                    verdict, pod_key = Verdict.STARTING, coming[0].key
                else:
                    verdict, pod_key = Verdict.LEFT_OVER, ""
                found.append(Instance(publisher, f"node {node.name}", pod_key, fingerprint, key, expected, verdict))
            continue
        for pod in mine:
            key, fingerprint = _published(pod.annotations, keys)
            verdict = Verdict.TERMINATING if pod.deletion_timestamp is not None else _verdict(fingerprint, expected)
            found.append(Instance(publisher, f"pod {pod.key}", pod.key, fingerprint, key, expected, verdict))
        for pod in starting:
            key, fingerprint = _published(pod.annotations, keys)
            found.append(Instance(publisher, f"pod {pod.key}", pod.key, fingerprint, key, expected, Verdict.STARTING))
    return found


def restart_hint(instance: Instance, namespace: str) -> str:
    """The kubectl command that restarts ``instance``'s workload (every workload of its component, by label,
    whatever its name): ``kubectl rollout restart daemonset -n NS -l app.kubernetes.io/name=lj-runtimekit,
    app.kubernetes.io/component=C``; for a Node instance, also deleting its pod (that Node only)."""
    component = instance.publisher.component
    command = (f"kubectl rollout restart {instance.publisher.workload} -n {namespace} "
               f"-l {POD_SELECTOR},{COMPONENT_LABEL}={component}")
    if instance.publisher.target is Target.NODE and instance.pod:
        pod_namespace, _, pod_name = instance.pod.partition("/")
        return f"{command}, or for this node only: kubectl delete pod -n {pod_namespace} {pod_name}"
    return command
