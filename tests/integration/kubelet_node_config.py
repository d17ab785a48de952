"""What the real-node harness (kubelet_harness.py) writes: the namespace holder's script, containerd's and kubelet's
configuration, and the work folder's layout.

In the node's private mount namespace the holder bind-mounts read-only files over the ``/proc/sys`` entries kubelet
insists on writing (:data:`KERNEL_TUNABLES`, holding the values it wants, so it writes nothing), a tmpfs over
``/run/containerd`` (containerd puts shim sockets there whatever its config says) and work-folder folders over
the host paths of :data:`HOST_BINDS`: kubelet's fixed ``/var/lib/kubelet``, ``/var/log/pods`` and
``/var/log/containers``, and CNI's ``/run/netns`` (the pods' network namespaces) and ``/var/lib/cni`` (the plugins'
result cache). So the host's sysctls and those folders are never touched.
"""

from __future__ import annotations

import json
from pathlib import Path

PAUSE_IMAGE = "ljrk.local/pause:3.10"
WORKLOAD_IMAGE = "ljrk.local/workload:1"
CONTAINERD_RUN = "/run/containerd"
HOST_BINDS = {
    "/var/lib/kubelet": "var-lib-kubelet",
    "/var/log/pods": "var-log-pods",
    "/var/log/containers": "var-log-containers",
    "/run/netns": "run-netns",
    "/var/lib/cni": "var-lib-cni",
}
"""Host path → work-folder subfolder bound over it in the node's namespace."""
HOST_MOUNT_POINTS = (CONTAINERD_RUN, *HOST_BINDS)
"""Host folders the namespace mounts over; made on the host only when missing, and removed again."""
KERNEL_TUNABLES = {  # what kubelet's container manager sets (pkg/kubelet/cm/container_manager_linux.go)
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}


def prepare_workdir(workdir: Path) -> None:
    """Make the folders the binds and the processes use, the fake sysctl files and the CNI configuration."""
    for sub in ("logs", "sysctl", "cni", "cdi", "containerd", "var-lib-kubelet/device-plugins", *HOST_BINDS.values()):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    for key, value in KERNEL_TUNABLES.items():
        (workdir / "sysctl" / key.replace("/", ".")).write_text(value + "\n")
    (workdir / "cni" / "10-ljrk-noop.conflist").write_text(json.dumps(
        {"cniVersion": "0.4.0", "name": "ljrk-noop", "plugins": [{"type": "ljrk-noop"}]}))


def holder_script(workdir: Path) -> str:
    """The namespace holder's shell script: the binds of the module docstring, then ``holder.ready``, then sleep."""
    lines = ["set -eu"]
    for key in KERNEL_TUNABLES:
        fake = workdir / "sysctl" / key.replace("/", ".")
        lines.append(f"mount --bind -o ro {fake} /proc/sys/{key}")
    lines.append(f"mount -t tmpfs -o size=16m,mode=0711 ljrk-containerd-run {CONTAINERD_RUN}")
    for host, inner in HOST_BINDS.items():
        lines.append(f"mount --bind {workdir / inner} {host}")
    lines.append(f"echo ready > {workdir / 'holder.ready'}")
    lines.append("exec sleep 2147483647")
    return "\n".join(lines) + "\n"


def containerd_config(workdir: Path, nodes: Path) -> str:
    """containerd's config.toml: sockets, root and state in ``workdir``, CRI on, the node files' CNI plugins and runc,
    CDI on with its specs read from ``workdir/cdi``. Written in config version 2, which containerd 2 migrates."""
    c = workdir / "containerd"
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    disabled = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
                "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs",
                "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
    return f"""version = 2
root = "{c / 'root'}"
state = "{c / 'state'}"
disabled_plugins = {json.dumps(disabled)}
[grpc]
  address = "{c / 'containerd.sock'}"
[ttrpc]
  address = "{c / 'containerd-ttrpc.sock'}"
[debug]
  address = ""
[metrics]
  address = ""
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  enable_selinux = false
  enable_cdi = true
  cdi_spec_dirs = ["{workdir / 'cdi'}"]
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  BinaryName = "{nodes / 'bin' / 'runc'}"
[{cri}.cni]
  bin_dir = "{nodes / 'cni' / 'bin'}"
  conf_dir = "{workdir / 'cni'}"
"""


def kubelet_config(ports: list[int], containerd_socket: Path, minor: int) -> dict[str, object]:
    """The KubeletConfiguration of kubelet 1.``minor`` for the ports (kubelet API, read-only, healthz), all on
    127.0.0.1, and containerd at ``containerd_socket``. ``failCgroupV1: false``: kubelet >= 1.35 refuses cgroup v1
    hosts (KEP-5573) unless told, and these machines are cgroup v1 (hybrid). Kubelet 1.34 runs with
    ``InPlacePodVerticalScaling`` off: with it (beta, on by default) kubelet 1.34.4 logs "Missing actuated resource
    record" for every container of this node and panics right after (nil pointer in kuberuntime's resize check), so
    no pod after the first reaches Running; 1.35 (where the gate is GA) and later do not."""
    port, ro_port, healthz = ports
    gates = {"InPlacePodVerticalScaling": False} if minor == 34 else {}
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": port,
        "readOnlyPort": ro_port,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "failSwapOn": False,
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "containerRuntimeEndpoint": f"unix://{containerd_socket}",
        "runtimeRequestTimeout": "2m",
        "resolvConf": "",
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "0%", "imagefs.available": "0%"},
        "nodeStatusUpdateFrequency": "2s",
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
        "serializeImagePulls": False,
        "maxPods": 50,
        **({"featureGates": gates} if gates else {}),
    }
