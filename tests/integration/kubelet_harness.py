"""A real Kubernetes node on this machine for integration tests: Debian's containerd + kubelet 1.20.2.

The files come from ``bash scripts/real-kubelet.sh install`` (kubelet, the pause and workload images, the no-op CNI
plugin, in ``node-dir``). :func:`start_node` makes a work folder and starts, against an API server given by a
kubeconfig:

- a *namespace holder*: ``unshare --mount --propagation private`` running a shell that bind-mounts, in that private
  mount namespace only, read-only files over the ``/proc/sys`` entries kubelet insists on writing (holding the values
  it wants, so it writes nothing), a tmpfs over ``/run/containerd`` (containerd 1.6 puts shim sockets there whatever
  its config says) and folders of the work folder over ``/var/lib/kubelet``, ``/var/log/pods`` and
  ``/var/log/containers`` (paths kubelet 1.20 fixes, whatever ``--root-dir`` says). The host's sysctls and those
  host folders are never touched; the mount points are made on the host only when missing and removed again.
- containerd and kubelet, entered into that namespace with ``nsenter``, so that volumes kubelet mounts (Secrets,
  service-account tokens) are visible to runc; containerd's sockets, root and state live in the work folder, its
  CRI stream server on 127.0.0.1; kubelet serves only on 127.0.0.1 (random free ports), uses ``cgroupfs`` with
  ``cgroupsPerQOS: false`` and never garbage-collects images (the imported ones cannot be pulled again).

Seen from outside the namespace, kubelet's device-plugin folder is :attr:`RealNode.device_plugin_dir` and its
pod-resources socket :attr:`RealNode.pod_resources_socket` (unix sockets work through bind mounts), container logs
are under :attr:`RealNode.pod_logs_dir`.

:meth:`RealNode.stop` kills every container (through containerd, then every process left in their cgroups),
kubelet, containerd, the shims and the holder (every process in the private namespace, so every mount made there
goes with it), removes the container cgroups (and their ``k8s.io`` parents when it made them), the host mount
points it made and the work folder. The Node object stays in the API server (the test planes are thrown away).

Run as a script (``scripts/real-kubelet.sh start|stop DIR``) the processes are left running and their pids kept in
``DIR/node.json`` for ``stop``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO_ROOT / "scripts" / "real-kubelet.sh"
PAUSE_IMAGE = "ljrk.local/pause:3.2"
WORKLOAD_IMAGE = "ljrk.local/workload:1"
HOST_MOUNT_POINTS = ("/run/containerd", "/var/lib/kubelet", "/var/log/pods", "/var/log/containers")
KERNEL_TUNABLES = {  # what kubelet 1.20's container manager sets (pkg/kubelet/cm/container_manager_linux.go)
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PARENT = "k8s.io"
"""Where containerd puts container cgroups when kubelet passes none (``cgroupsPerQOS: false``): ``<ctrl>/k8s.io``."""


class NodeError(RuntimeError):
    """The node could not be started or stopped; the message carries the tails of the process logs."""


def node_dir() -> Path | None:
    """The installed node files (``scripts/real-kubelet.sh node-dir``), or None when not installed."""
    env = os.environ.get("LJRK_KUBELET_NODE_DIR")
    if env:
        return Path(env) if (Path(env) / "bin" / "kubelet").is_file() else None
    try:
        result = subprocess.run(["bash", str(INSTALL_SCRIPT), "node-dir"], capture_output=True, text=True,
                                timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    out = result.stdout.strip()
    return Path(out) if result.returncode == 0 and out else None


def _pdeathsig() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


def process_alive(pid: int) -> bool:
    """``pid`` runs (a zombie, killed and waiting for its parent to reap it, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):  # a zombie counts as gone
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def _mnt_ns(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


@dataclass
class NodeState:
    """What ``stop`` needs, kept in ``<workdir>/node.json``."""

    workdir: str
    node_name: str
    holder_pid: int = 0
    containerd_pid: int = 0
    kubelet_pid: int = 0
    namespace: str = ""
    created_mount_points: list[str] = field(default_factory=list)
    created_cgroups: list[str] = field(default_factory=list)
    kubelet_argv: list[str] = field(default_factory=list)
    kubelet_port: int = 0
    read_only_port: int = 0
    healthz_port: int = 0


class RealNode:
    """containerd + kubelet started by :func:`start_node` (module docstring). Paths are as seen from the host."""

    def __init__(self, state: NodeState, *, own_processes: bool) -> None:
        self.state = state
        self.workdir = Path(state.workdir)
        self.node_name = state.node_name
        self._own = own_processes
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._stopped = False

    # ------------------------------------------------------------------ paths
    @property
    def kubelet_root(self) -> Path:
        """Host path of kubelet's ``/var/lib/kubelet`` (its ``--root-dir``)."""
        return self.workdir / "var-lib-kubelet"

    @property
    def device_plugin_dir(self) -> Path:
        """Host path of ``/var/lib/kubelet/device-plugins`` (``kubelet.sock`` and the plugins' sockets)."""
        return self.kubelet_root / "device-plugins"

    @property
    def pod_resources_socket(self) -> Path:
        """Host path of kubelet's pod-resources socket."""
        return self.kubelet_root / "pod-resources" / "kubelet.sock"

    @property
    def pod_logs_dir(self) -> Path:
        """Host path of ``/var/log/pods`` (``<ns>_<pod>_<uid>/<container>/<restart>.log``, CRI log format)."""
        return self.workdir / "var-log-pods"

    @property
    def kubelet_log(self) -> Path:
        return self.workdir / "logs" / "kubelet.log"

    @property
    def containerd_socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    def log_tails(self, lines: int = 30) -> str:
        return "\n".join(f"----- {name} log tail\n{_tail(self.workdir / 'logs' / f'{name}.log', lines)}"
                         for name in ("holder", "containerd", "kubelet"))

    # ------------------------------------------------------------------ kubelet
    def healthz(self) -> bool:
        """kubelet's ``/healthz`` answers ``ok`` now."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.state.healthz_port}/healthz", timeout=2) as r:
                return bool(r.read().decode().strip() == "ok")
        except (OSError, urllib.error.URLError):
            return False

    def read_only_pods(self) -> list[dict[str, object]]:
        """kubelet's own view of its pods (read-only port ``/pods``), as JSON objects."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.state.read_only_port}/pods", timeout=5) as reply:
            items: list[dict[str, object]] = json.loads(reply.read()).get("items") or []
            return items

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = self.workdir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=_pdeathsig if self._own else None)
        self._procs[name] = popen
        return popen

    def _in_namespace(self, argv: list[str]) -> list[str]:
        return ["nsenter", f"--mount=/proc/{self.state.holder_pid}/ns/mnt", "--", *argv]

    def start_kubelet(self) -> None:
        """Start kubelet (again) with the arguments it was first started with."""
        self.state.kubelet_pid = self._spawn("kubelet", self._in_namespace(self.state.kubelet_argv)).pid
        self._save()

    def stop_kubelet(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        """Stop kubelet (``sig``, then SIGKILL after ``timeout`` seconds); containers keep running."""
        _kill_wait(self.state.kubelet_pid, sig, timeout, self._procs.get("kubelet"))

    def restart_kubelet(self) -> None:
        """Stop kubelet with SIGTERM and start it again; running containers stay (containerd owns them)."""
        self.stop_kubelet()
        self.start_kubelet()

    def _save(self) -> None:
        (self.workdir / "node.json").write_text(json.dumps(asdict(self.state), indent=2))

    # ------------------------------------------------------------------ stop
    def stop(self) -> None:
        """Stop everything and remove what start made (module docstring). Idempotent; raises NodeError when a
        process or cgroup outlives the stop."""
        if self._stopped:
            return
        self._stopped = True
        problems: list[str] = []
        self.stop_kubelet(timeout=10)
        container_ids = self.containers()
        self._kill_containers(container_ids)
        _kill_wait(self.state.containerd_pid, signal.SIGTERM, 10, self._procs.get("containerd"))
        for pid in self.namespace_pids():  # shims and anything else left in the private namespace
            _kill_wait(pid, signal.SIGKILL, 5, None)
        _kill_wait(self.state.holder_pid, signal.SIGKILL, 5, self._procs.get("holder"))
        problems += _remove_cgroups(container_ids)
        for parent in self.state.created_cgroups:
            with contextlib.suppress(OSError):
                os.rmdir(parent)
        for popen in self._procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(5)
        for point in reversed(self.state.created_mount_points):
            with contextlib.suppress(OSError):
                os.rmdir(point)
        survivors = [pid for pid in (self.state.kubelet_pid, self.state.containerd_pid, self.state.holder_pid)
                     if pid and process_alive(pid)]
        if survivors:
            problems.append(f"processes still alive: {survivors}")
        if any(str(self.workdir) in line for line in Path("/proc/self/mountinfo").read_text().splitlines()):
            problems.append(f"a mount under {self.workdir} is visible on the host")
        shutil.rmtree(self.workdir, ignore_errors=True)
        if problems:
            raise NodeError("; ".join(problems))

    def _ctr(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ctr", "--address", str(self.containerd_socket), "-n", "k8s.io", *args],
                              capture_output=True, text=True, timeout=timeout, check=False)

    def containers(self) -> list[str]:
        """IDs of every container containerd holds for kubelet (sandboxes included); [] when it is not serving."""
        if not self.containerd_socket.exists():
            return []
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            return self._ctr("containers", "ls", "-q").stdout.split()
        return []

    def _kill_containers(self, ids: Iterable[str]) -> None:
        for cid in ids:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self._ctr("tasks", "kill", "--signal", "SIGKILL", cid, timeout=10)
        for cid in ids:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self._ctr("tasks", "delete", "--force", cid, timeout=10)
                self._ctr("containers", "delete", cid, timeout=10)

    def namespace_pids(self) -> list[int]:
        """Pids of the processes in the node's private mount namespace, the holder left out."""
        ns = self.state.namespace
        if not ns:
            return []
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != self.state.holder_pid and _mnt_ns(entry.name) == ns:
                pids.append(int(entry.name))
        return pids


def _kill_wait(pid: int, sig: int, timeout: float, popen: subprocess.Popen[bytes] | None) -> None:
    """Send ``sig`` to ``pid`` and wait up to ``timeout`` seconds, then SIGKILL; reaps ``popen`` (its Popen)."""
    if pid and process_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while process_alive(pid) and time.monotonic() < deadline and (popen is None or popen.poll() is None):
            time.sleep(0.05)
        if process_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if popen is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(5)


def container_cgroups(ids: Iterable[str]) -> list[Path]:
    """Every cgroup folder (any v1 controller, or the v2 tree) named by one of the container ``ids``."""
    wanted = set(ids)
    found: list[Path] = []
    if not wanted or not CGROUP_ROOT.is_dir():
        return found
    for base, dirs, _files in os.walk(CGROUP_ROOT):
        depth = Path(base).relative_to(CGROUP_ROOT).parts
        if len(depth) > 3:
            dirs[:] = []
            continue
        for name in dirs:
            if name in wanted:
                found.append(Path(base) / name)
    return found


def _cgroup_controllers() -> list[Path]:
    """Each cgroup v1 controller folder (or the v2 root) once, links to a shared one left out."""
    if not CGROUP_ROOT.is_dir():
        return []
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]
    return [d for d in sorted(CGROUP_ROOT.iterdir()) if d.is_dir() and not d.is_symlink()]


def _remove_cgroups(ids: list[str]) -> list[str]:
    problems = []
    for group in sorted(container_cgroups(ids), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            for pid in (group / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        for _ in range(50):
            try:
                group.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)
        else:
            problems.append(f"cgroup {group} could not be removed")
    return problems


# ---------------------------------------------------------------------- start
def _holder_script(workdir: Path) -> str:
    lines = ["set -eu"]
    for key in KERNEL_TUNABLES:
        fake = workdir / "sysctl" / key.replace("/", ".")
        lines.append(f"mount --bind -o ro {fake} /proc/sys/{key}")
    lines.append("mount -t tmpfs -o size=16m,mode=0711 ljrk-containerd-run /run/containerd")
    for host, inner in (("/var/lib/kubelet", "var-lib-kubelet"), ("/var/log/pods", "var-log-pods"),
                        ("/var/log/containers", "var-log-containers")):
        lines.append(f"mount --bind {workdir / inner} {host}")
    lines.append(f"echo ready > {workdir / 'holder.ready'}")
    lines.append("exec sleep 2147483647")
    return "\n".join(lines) + "\n"


def _containerd_config(workdir: Path, nodes: Path) -> str:
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
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.cni]
  bin_dir = "{nodes / 'cni' / 'bin'}"
  conf_dir = "{workdir / 'cni'}"
"""


def _kubelet_config(ports: list[int]) -> dict[str, object]:
    port, ro_port, healthz = ports
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
        "resolvConf": "",
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "0%", "imagefs.available": "0%"},
        "nodeStatusUpdateFrequency": "2s",
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
        "serializeImagePulls": False,
        "maxPods": 50,
    }


def start_node(kubeconfig: Path, node_name: str, workdir: Path, *, nodes: Path | None = None,
               own_processes: bool = True, timeout: float = 90.0) -> RealNode:
    """Start containerd + kubelet registering ``node_name`` with the API server of ``kubeconfig``, all state in
    ``workdir`` (created; must be empty). Waits until kubelet's ``/healthz`` answers (the Node's ``Ready`` comes
    some seconds later: the caller waits for it through the API). ``own_processes``: the processes die with this
    Python process (tests); otherwise they are left running (the ``start`` command). Raises NodeError when the
    node files are not installed or a process fails to come up (with the log tails)."""
    nodes = nodes or node_dir()
    if nodes is None:
        raise NodeError("real node not installed; run: bash scripts/real-kubelet.sh install")
    if os.geteuid() != 0:
        raise NodeError("a real node needs root (mount namespaces, containerd)")
    workdir.mkdir(parents=True, exist_ok=True)
    if any(workdir.iterdir()):
        raise NodeError(f"{workdir} is not empty")
    for sub in ("logs", "sysctl", "cni", "containerd", "var-lib-kubelet/device-plugins", "var-log-pods",
                "var-log-containers"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    for key, value in KERNEL_TUNABLES.items():
        (workdir / "sysctl" / key.replace("/", ".")).write_text(value + "\n")
    (workdir / "cni" / "10-ljrk-noop.conflist").write_text(json.dumps(
        {"cniVersion": "0.4.0", "name": "ljrk-noop", "plugins": [{"type": "ljrk-noop"}]}))
    state = NodeState(workdir=str(workdir), node_name=node_name)
    for point in HOST_MOUNT_POINTS:
        if not Path(point).exists():
            Path(point).mkdir(parents=True)
            state.created_mount_points.append(point)
    state.created_cgroups = [str(d / CGROUP_PARENT) for d in _cgroup_controllers() if not (d / CGROUP_PARENT).exists()]
    node = RealNode(state, own_processes=own_processes)
    try:
        _start(node, kubeconfig, nodes, timeout)
    except BaseException as exc:
        tails = node.log_tails()
        with contextlib.suppress(Exception):
            node.stop()
        if isinstance(exc, NodeError | OSError | subprocess.SubprocessError):
            raise NodeError(f"{exc}\n{tails}") from exc
        raise
    return node


def _wait(what: str, check: object, deadline: float, node: RealNode, proc: str) -> None:
    assert callable(check)
    while not check():
        popen = node._procs.get(proc)
        if popen is not None and popen.poll() is not None:
            raise NodeError(f"{proc} exited with code {popen.returncode} before {what}")
        if time.monotonic() > deadline:
            raise NodeError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _start(node: RealNode, kubeconfig: Path, nodes: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    workdir, state = node.workdir, node.state
    (workdir / "holder.sh").write_text(_holder_script(workdir))
    holder = node._spawn("holder", ["unshare", "--mount", "--propagation", "private", "--",
                                    "/bin/sh", str(workdir / "holder.sh")])
    state.holder_pid = holder.pid
    _wait("the mount namespace", (workdir / "holder.ready").exists, deadline, node, "holder")
    state.namespace = _mnt_ns(holder.pid) or ""
    if not state.namespace or state.namespace == _mnt_ns("self"):
        raise NodeError("the namespace holder did not get a private mount namespace")
    (workdir / "containerd" / "config.toml").write_text(_containerd_config(workdir, nodes))
    containerd = node._spawn("containerd", node._in_namespace(
        ["containerd", "--config", str(workdir / "containerd" / "config.toml")]))
    state.containerd_pid = containerd.pid
    _wait("containerd's socket", node.containerd_socket.exists, deadline, node, "containerd")
    for image in ("pause", "workload"):
        result = node._ctr("images", "import", str(nodes / "images" / f"{image}.tar"), timeout=60)
        if result.returncode != 0:
            raise NodeError(f"ctr images import {image}.tar failed: {result.stderr.strip()}")
    ports = _free_ports(3)
    state.kubelet_port, state.read_only_port, state.healthz_port = ports
    config = workdir / "kubelet-config.json"
    config.write_text(json.dumps(_kubelet_config(ports), indent=2))
    state.kubelet_argv = [
        str(nodes / "bin" / "kubelet"),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        "--container-runtime=remote",
        f"--container-runtime-endpoint=unix://{node.containerd_socket}",
        "--runtime-request-timeout=2m",
        "--root-dir=/var/lib/kubelet",
        f"--cert-dir={workdir / 'kubelet-pki'}",
        f"--hostname-override={state.node_name}",
        f"--pod-infra-container-image={PAUSE_IMAGE}",
        "--v=2",
    ]
    node.start_kubelet()
    _wait("kubelet /healthz", node.healthz, deadline, node, "kubelet")
    node._save()


def load_node(workdir: Path) -> RealNode:
    """The node recorded in ``workdir/node.json`` (for ``stop``). Raises NodeError when there is none."""
    try:
        raw = json.loads((workdir / "node.json").read_text())
    except (OSError, ValueError) as exc:
        raise NodeError(f"no node recorded in {workdir}: {exc}") from exc
    return RealNode(NodeState(**raw), own_processes=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="real-kubelet.sh", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start containerd + kubelet with their state in DIR")
    start.add_argument("dir", type=Path)
    start.add_argument("--kubeconfig", type=Path, required=True, help="kubelet's kubeconfig (its node identity)")
    start.add_argument("--node-name", required=True)
    stop = sub.add_parser("stop", help="stop the node started in DIR and remove everything it made")
    stop.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            node = start_node(args.kubeconfig.resolve(), args.node_name, args.dir.resolve(), own_processes=False)
            print(json.dumps({"device_plugin_dir": str(node.device_plugin_dir),
                              "pod_resources_socket": str(node.pod_resources_socket),
                              "kubelet_log": str(node.kubelet_log)}, indent=2))
        else:
            load_node(args.dir.resolve()).stop()
    except NodeError as exc:
        print(f"real-kubelet: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
