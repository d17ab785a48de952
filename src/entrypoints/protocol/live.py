"""``ljrk protocol check --kubeconfig FILE [--namespace NS] [--context C]``: the protocol ConfigMaps of a live
cluster against the fingerprints its running components publish.

Reads, through the cluster port, every ConfigMap of the namespace whose data has ``protocol.yaml``, every Node and
the namespace's pods labelled ``app.kubernetes.io/name=lj-runtimekit``; the comparison is
:func:`domain.kube.protocolcheck.read_instances`. Prints each ConfigMap with its fingerprint and component, every
constant that differs between them (as the file mode does), each running instance with the fingerprint it runs,
then one line per problem naming the instance, both fingerprints and the command that restarts it. Returns 0 when
every ConfigMap and every instance agree and at least one instance runs, 1 otherwise; an unreachable or refusing
API server, an invalid ConfigMap or a namespace without any protocol ConfigMap raise (the caller prints one line
and exits 2).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Protocol

from adapters.kubernetes import KubernetesCluster, from_kubeconfig
from adapters.protocolfile import PROTOCOL_DATA_KEY, ProtocolFileError, parse_protocol
from domain.kube.protocolcheck import (
    POD_SELECTOR,
    ConfigMapProtocol,
    Instance,
    Verdict,
    configmap_component,
    read_instances,
    restart_hint,
)
from ports.cluster import ClusterApi, ConfigMapsApi, NodesApi, PodsApi

from .compare import differences

REQUEST_TIMEOUT = 10.0
"""Client timeout (s) of each API call of the check."""

EXIT_OK, EXIT_DIFFERENT = 0, 1


class KubeconfigError(ValueError):
    """The kubeconfig (or its context) cannot be loaded; the message names the file."""


@contextlib.contextmanager
def open_cluster(kubeconfig: str, context: str | None) -> Iterator[ClusterApi]:
    """The API server of ``kubeconfig`` (its ``context``, default the current one); closed on exit. Raises
    :class:`KubeconfigError` for a missing or invalid file or an unknown context."""
    try:
        api_client = from_kubeconfig(kubeconfig, context=context)
    except Exception as error:  # the client's ConfigException, OSError, YAML errors: all "cannot load"
        raise KubeconfigError(f"--kubeconfig {kubeconfig}: cannot load it: {error}") from error
    with contextlib.closing(api_client):
        yield KubernetesCluster(api_client, component="ljrk-protocol-check", request_timeout=REQUEST_TIMEOUT)


def read_configmaps(cluster: ConfigMapsApi, namespace: str) -> list[ConfigMapProtocol]:
    """The protocol ConfigMaps of ``namespace`` by name. Raises ClusterError, :class:`ProtocolFileError` for an
    invalid ``protocol.yaml`` (naming the ConfigMap and the key) or when there is none."""
    found: list[ConfigMapProtocol] = []
    for config_map in cluster.list_config_maps(namespace).items:
        if PROTOCOL_DATA_KEY not in config_map.data:
            continue
        protocol = parse_protocol(config_map.data[PROTOCOL_DATA_KEY],
                                  source=f"ConfigMap {namespace}/{config_map.name}")
        found.append(ConfigMapProtocol(config_map.name, configmap_component(config_map.name, config_map.labels),
                                       protocol))
    if not found:
        raise ProtocolFileError(f"no ConfigMap with {PROTOCOL_DATA_KEY} in namespace {namespace} (is the stack "
                                "deployed there? --namespace)")
    return sorted(found, key=lambda c: c.name)


def _expected(instance: Instance) -> str:
    return ", ".join(f"ConfigMap {c.name} has {c.fingerprint}" for c in instance.expected)


def describe(instance: Instance, namespace: str) -> str:
    """One line for ``instance``: what it runs and, for a problem, what to do."""
    name = f"{instance.publisher.component} on {instance.where}"
    verdict = instance.verdict
    if verdict is Verdict.STALE:
        return (f"{name} runs {instance.fingerprint}, {_expected(instance)}: restart it "
                f"({restart_hint(instance, namespace)})")
    if verdict is Verdict.UNPUBLISHED:
        return (f"{name} publishes no protocol fingerprint (still starting, an older release, or it cannot write "
                f"its {instance.publisher.target.value}: see its log)")
    if verdict is Verdict.NO_CONFIGMAP:
        return (f"{name} runs {instance.fingerprint}, but no ConfigMap of {instance.publisher.component} is in "
                f"{namespace}")
    if verdict is Verdict.LEFT_OVER:
        return (f"{name}: annotation {instance.key}={instance.fingerprint} left over (no running "
                f"{instance.publisher.component} pod there in {namespace})")
    if verdict is Verdict.TERMINATING:
        return f"{name} runs {instance.fingerprint} (terminating)"
    if verdict is Verdict.STARTING:
        return (f"{name}: pod {instance.pod} is not running yet (starting after a restart?): check again once it "
                "is up")
    return f"{name} runs {instance.fingerprint}"


class CheckedCluster(NodesApi, PodsApi, ConfigMapsApi, Protocol):
    """The cluster roles the live check reads: ConfigMaps, nodes and the components' pods."""


def check_cluster(cluster: CheckedCluster, namespace: str, *, out: Callable[[str], None] = print) -> int:
    """Run the live check (module docstring) over ``cluster``, printing with ``out``. Returns :data:`EXIT_OK` or
    :data:`EXIT_DIFFERENT`. Raises ClusterError, ProtocolFileError."""
    configmaps = read_configmaps(cluster, namespace)
    nodes = cluster.list_nodes().items
    pods = cluster.list_pods(namespace=namespace, label_selector=POD_SELECTOR).items
    out(f"ConfigMaps in namespace {namespace}:")
    for c in configmaps:
        out(f"{c.fingerprint}  ConfigMap {namespace}/{c.name} ({c.component or 'no component label'})")
    differing = differences([(f"ConfigMap {namespace}/{c.name}", c.protocol) for c in configmaps])
    for key, values in differing.items():
        out(f"{key}: " + "; ".join(f"{where}={value!r}" for where, value in values.items()))
    instances = read_instances(configmaps, nodes, pods, namespace=namespace)
    out("Running components:" if instances else "Running components: none publishes a fingerprint")
    for instance in instances:
        out(f"{instance.fingerprint or '-':16}  {describe(instance, namespace)}")
    problems = [i for i in instances if i.verdict.problem]
    for instance in problems:
        out(f"problem: {describe(instance, namespace)}")
    running = sum(i.verdict is Verdict.AGREES for i in instances)
    if not differing and not problems and not running:
        out(f"protocol check: {len(configmaps)} ConfigMap(s) agree, but no running instance publishes a fingerprint "
            "(nothing deployed yet, or every component is restarting): nothing to compare them with")
        return EXIT_DIFFERENT
    if not differing and not problems:
        out(f"protocol check: {len(configmaps)} ConfigMap(s) and {running} running instance(s) agree")
        return EXIT_OK
    out(f"protocol check: {len(differing)} constant(s) differ across {len(configmaps)} ConfigMap(s); "
        f"{len(problems)} of {len(problems) + running} running instance(s) need attention")
    return EXIT_DIFFERENT
