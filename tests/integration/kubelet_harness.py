"""A real Kubernetes node on this machine for integration tests: containerd 2 + runc + kubelet of the live version.

The files come from ``bash scripts/real-kubelet.sh install`` (kubelet, containerd, ctr, the runc shim and runc built
from Go modules, under ``bin/``; the pause and workload images; the no-op CNI plugin; all in ``node-dir``).
:func:`start_node` makes a work folder and starts, against an API server given by a kubeconfig:

- a *namespace holder*: ``unshare --mount --propagation private`` running a shell that makes, in that private
  mount namespace only, the binds of :mod:`kubelet_node_config` (fake ``/proc/sys`` files, ``/run/containerd``,
  kubelet's fixed folders, CNI's ``/run/netns`` and ``/var/lib/cni``): the host's sysctls and those folders are
  never touched; the mount points are made on the host only when missing and removed again;
- containerd and kubelet, entered into that namespace with ``nsenter``, so that volumes kubelet mounts (Secrets,
  service-account tokens) are visible to runc; containerd's sockets, root and state live in the work folder, its
  CRI stream server on 127.0.0.1; kubelet serves only on 127.0.0.1 (random free ports), uses ``cgroupfs`` with
  ``cgroupsPerQOS: false`` and never garbage-collects images (the imported ones cannot be pulled again).

Seen from outside the namespace, kubelet's device-plugin folder is :attr:`RealNode.device_plugin_dir`, its DRA
plugin folders :attr:`RealNode.plugins_registry_dir` and :attr:`RealNode.plugins_dir`, containerd's CDI spec folder
:attr:`RealNode.cdi_spec_dir` and its pod-resources socket :attr:`RealNode.pod_resources_socket` (unix sockets work
through bind mounts); container logs are under :attr:`RealNode.pod_logs_dir`.

:meth:`RealNode.stop` kills every container (through containerd, then every process left in their cgroups, and in
the whole ``k8s.io`` cgroup tree when this node made it, so containers go even when containerd no longer answers),
kubelet, containerd, the shims and the holder (every process in the private namespace, so every mount made there
goes with it), removes those cgroups, the host mount points it made and the work folder, and raises
:class:`NodeError` naming whatever outlived it. The Node object stays in the API server (test planes are thrown
away). Several nodes may run at once (each has its own namespace and ports); the tests share one per session.

Started by ``scripts/real-kubelet.sh start DIR`` (kubelet_cli.py) the processes are left running and their pids
kept in ``DIR/node.json`` for ``stop``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from k8s_harness import free_ports
from kubelet_cleanup import (
    CGROUP_PARENT,
    container_cgroups,
    controllers,
    kill_cgroup_tree,
    kill_wait,
    mount_namespace,
    pids_in_namespace,
    process_alive,
)
from kubelet_node_config import (
    HOST_MOUNT_POINTS,
    WORKLOAD_IMAGE,
    containerd_config,
    holder_script,
    kubelet_config,
    prepare_workdir,
)

__all__ = ["REAL_NODE_NAME", "SECOND_NODE_NAME", "WORKLOAD_IMAGE", "NodeError", "RealNode", "container_cgroups",
           "node_dir", "process_alive", "start_node"]

REAL_NODE_NAME = "ljrk-real-node"
"""The shared real node (the session fixture of ``conftest.py``)."""
SECOND_NODE_NAME = "ljrk-real-node-2"
"""A node test_kubelet_harness.py starts and stops beside the shared one."""

REPO_ROOT = Path(__file__).resolve().parents[2]
_ERROR_LINE = re.compile(r"^[EF]\d{4} |level=(error|fatal)|^(Error|error|failed)[: ]")
"""klog error/fatal lines, containerd's error lines, and the command-line errors of either."""
INSTALL_SCRIPT = REPO_ROOT / "scripts" / "real-kubelet.sh"


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


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


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
    node_files: str = ""
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
    def plugins_registry_dir(self) -> Path:  # kubelet watches it for plugin registration sockets
        return self.kubelet_root / "plugins_registry"

    @property
    def plugins_dir(self) -> Path:
        """Host path of ``/var/lib/kubelet/plugins`` (DRA plugin sockets; kubelet dials the advertised path)."""
        return self.kubelet_root / "plugins"

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
    def cdi_spec_dir(self) -> Path:
        """Host path of the folder containerd reads CDI specs from (``cdi_spec_dirs``)."""
        return self.workdir / "cdi"

    @property
    def node_files(self) -> Path:
        """The installed node files this node runs (``scripts/real-kubelet.sh node-dir``)."""
        return Path(self.state.node_files)

    @property
    def containerd_socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    def log_tails(self, lines: int = 30) -> str:
        """Per process log: its first error lines (kubelet states its reason once, then may dump goroutines)
        and its last ``lines`` lines."""
        parts = []
        for name in ("holder", "containerd", "kubelet"):
            log = self.workdir / "logs" / f"{name}.log"
            errors = [line[:400] for line in _tail(log, 100_000).splitlines() if _ERROR_LINE.search(line)][:5]
            parts.append(f"----- {name}: first error lines\n" + "\n".join(errors) if errors else "")
            parts.append(f"----- {name} log tail\n{_tail(log, lines)}")
        return "\n".join(p for p in parts if p)

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

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = self.workdir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            # setpriv --pdeathsig: the child dies with this process (tests) without Python code between fork and exec
            prefix = ["setpriv", "--pdeathsig", "KILL", "--"] if self._own else []
            popen = subprocess.Popen([*prefix, *argv], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True, env=env)
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
        kill_wait(self.state.kubelet_pid, sig, timeout, self._procs.get("kubelet"))

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
        kill_wait(self.state.containerd_pid, signal.SIGTERM, 10, self._procs.get("containerd"))
        for pid in self.namespace_pids():  # shims and anything else left in the private namespace
            kill_wait(pid, signal.SIGKILL, 5, None)
        kill_wait(self.state.holder_pid, signal.SIGKILL, 5, self._procs.get("holder"))
        for group in container_cgroups(container_ids):
            problems += kill_cgroup_tree(group)
        for parent in self.state.created_cgroups:  # ours alone: whatever containerd left there goes too
            problems += kill_cgroup_tree(Path(parent))
        for popen in self._procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(5)
        for point in reversed(self.state.created_mount_points):
            try:
                os.rmdir(point)
            except FileNotFoundError:
                pass
            except OSError as error:
                problems.append(f"mount point {point} not removed: {error}")
        survivors = [pid for pid in (self.state.kubelet_pid, self.state.containerd_pid, self.state.holder_pid)
                     if pid and process_alive(pid)]
        if survivors:
            problems.append(f"processes still alive: {survivors}")
        if any(str(self.workdir) in line for line in Path("/proc/self/mountinfo").read_text().splitlines()):
            problems.append(f"a mount under {self.workdir} is visible on the host")
        try:
            shutil.rmtree(self.workdir)
        except FileNotFoundError:
            pass
        except OSError as error:
            problems.append(f"work folder not removed: {error}")
        if problems:
            raise NodeError("; ".join(problems))

    def _ctr(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        ctr = [str(self.node_files / "bin" / "ctr"), "--address", str(self.containerd_socket), "-n", "k8s.io"]
        return subprocess.run([*ctr, *args], capture_output=True, text=True, timeout=timeout, check=False)

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
        if not self.state.namespace:
            return []
        return pids_in_namespace(self.state.namespace, skip=(self.state.holder_pid,))


# ---------------------------------------------------------------------- start
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
    prepare_workdir(workdir)
    state = NodeState(workdir=str(workdir), node_name=node_name, node_files=str(nodes))
    for point in HOST_MOUNT_POINTS:
        if not Path(point).exists():
            Path(point).mkdir(parents=True)
            state.created_mount_points.append(point)
    state.created_cgroups = [str(d / CGROUP_PARENT) for d in controllers() if not (d / CGROUP_PARENT).exists()]
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
    (workdir / "holder.sh").write_text(holder_script(workdir))
    holder = node._spawn("holder", ["unshare", "--mount", "--propagation", "private", "--",
                                    "/bin/sh", str(workdir / "holder.sh")])
    state.holder_pid = holder.pid
    _wait("the mount namespace", (workdir / "holder.ready").exists, deadline, node, "holder")
    state.namespace = mount_namespace(holder.pid) or ""
    if not state.namespace or state.namespace == mount_namespace("self"):
        raise NodeError("the namespace holder did not get a private mount namespace")
    (workdir / "containerd" / "config.toml").write_text(containerd_config(workdir, nodes))
    # containerd finds its shim (containerd-shim-runc-v2) on PATH: the node's own bin/ first.
    path = f"{nodes / 'bin'}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    containerd = node._spawn("containerd", node._in_namespace(
        [str(nodes / "bin" / "containerd"), "--config", str(workdir / "containerd" / "config.toml")]),
        env={**os.environ, "PATH": path})
    state.containerd_pid = containerd.pid
    _wait("containerd's socket", node.containerd_socket.exists, deadline, node, "containerd")
    for image in ("pause", "workload"):
        result = node._ctr("images", "import", str(nodes / "images" / f"{image}.tar"), timeout=60)
        if result.returncode != 0:
            raise NodeError(f"ctr images import {image}.tar failed: {result.stderr.strip()}")
    ports = free_ports(3)
    state.kubelet_port, state.read_only_port, state.healthz_port = ports
    config = workdir / "kubelet-config.json"
    minor = int(nodes.name.split(".")[1]) if nodes.name.startswith("v1.") else 0  # node-dir is .../node/v1.Y.Z
    config.write_text(json.dumps(kubelet_config(ports, node.containerd_socket, minor), indent=2))
    state.kubelet_argv = [
        str(nodes / "bin" / "kubelet"),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        "--root-dir=/var/lib/kubelet",
        f"--cert-dir={workdir / 'kubelet-pki'}",
        f"--hostname-override={state.node_name}",
        "--v=2",
    ]
    node.start_kubelet()
    _wait("kubelet /healthz", node.healthz, deadline, node, "kubelet")
    node._save()
