"""A real, throw-away Kubernetes control plane on 127.0.0.1 for integration tests.

Starts etcd, kube-apiserver and, on request, kube-scheduler and kube-controller-manager from a directory of binaries
(built from Go modules by ``scripts/k8s-control-plane.sh install``, the Kubernetes version it selects; etcd falls
back to the one on PATH). Everything listens on
loopback ports picked at random, all state (etcd data, certificates, keys, token file, kubeconfig, component configs,
process logs) lives in one temporary directory that ``stop()`` removes.

- TLS: a throw-away CA and a serving certificate for IP 127.0.0.1 / localhost made with ``openssl``; the client
  verifies them (no InsecureRequestWarning).
- Auth: a static token (``--token-auth-file``) in group ``system:masters``; ``--authorization-mode=AlwaysAllow``;
  admission plugin ServiceAccount disabled (no token controller runs).
- kube-scheduler: ``KubeSchedulerConfiguration`` (kubescheduler.config.k8s.io/v1) is generated (client kubeconfig,
  leader election off); ``scheduler_config`` adds or replaces top-level fields (e.g. ``extenders``, ``profiles``).
  ``scheduler_config_file`` instead passes a file of your own verbatim (it must set ``clientConnection.kubeconfig``
  itself), so prefer ``scheduler_config``. Its health and metrics are served only over HTTPS (a self-signed
  certificate) on a free loopback ``--secure-port``, probed at ``/healthz`` (always allowed without credentials).
  Leader election is off for both scheduler and controller manager.
- kube-controller-manager: controllers ``job,ttl-after-finished,garbagecollector`` by default; HTTPS health on a
  free loopback ``--secure-port`` like the scheduler (the insecure port is gone since 1.24).

Processes never outlive the test run: each child gets ``PR_SET_PDEATHSIG=SIGKILL`` (dies with the Python process even
on SIGKILL), runs in its own process group, and ``stop()`` (also run at interpreter exit) sends SIGTERM, waits, then
SIGKILL. If start-up fails, every process already started is stopped and the tail of each log is put in the error.
Temp dirs left behind by a SIGKILLed test process are swept at the next start (``owner.pid`` names a dead process).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_CONTROLLERS: tuple[str, ...] = ("job", "ttl-after-finished", "garbagecollector")
LOG_TAIL_LINES = 40
WORKDIR_PREFIX = "ljrk-k8s-"

_live: set[ControlPlane] = set()
_live_lock = threading.Lock()


class ControlPlaneError(RuntimeError):
    """The control plane could not be started; the message carries the tails of the process logs."""


def _pdeathsig() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (held open together so that they differ)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def find_binary(bin_dir: Path | None, name: str) -> Path:
    if bin_dir is not None:
        candidate = bin_dir / name
        if candidate.exists() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found:
        return Path(found)
    raise ControlPlaneError(
        f"{name} not found in {bin_dir} nor on PATH; run: bash scripts/k8s-control-plane.sh install"
    )


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path


@dataclass(eq=False)
class ControlPlane:
    """A running control plane. Use as a context manager or call ``stop()``."""

    workdir: Path
    host: str
    token: str
    ca_file: Path
    kubeconfig: Path
    etcd_url: str
    bin_dir: Path | None
    startup_seconds: float = 0.0
    scheduler_config_path: Path | None = None
    node_tokens: dict[str, str] = field(default_factory=dict)
    _procs: list[_Proc] = field(default_factory=list)
    _stopped: bool = False

    # ---------------------------------------------------------------- clients
    def client_configuration(self) -> Any:
        """A ``kubernetes.client.Configuration`` for this API server (verifies TLS against the test CA)."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.host
        cfg.ssl_ca_cert = str(self.ca_file)
        cfg.verify_ssl = True
        cfg.api_key = {"authorization": f"Bearer {self.token}"}
        return cfg

    def node_kubeconfig(self, node_name: str) -> Path:
        """A kubeconfig for kubelet of ``node_name`` (user ``system:node:<name>``, group ``system:nodes``); the node
        must have been named in ``start_control_plane(nodes=...)``. Raises KeyError otherwise."""
        path = self.workdir / f"kubeconfig-{node_name}.json"
        write_kubeconfig(path, self.host, self.ca_file, self.node_tokens[node_name])
        return path

    def api_client(self) -> Any:
        """A new ``kubernetes.client.ApiClient``; close it (``with`` or ``.close()``) when done."""
        from kubernetes import client

        return client.ApiClient(self.client_configuration())

    # ---------------------------------------------------------------- introspection
    def processes(self) -> dict[str, int]:
        """name -> pid of the processes still running."""
        return {p.name: p.popen.pid for p in self._procs if p.popen.poll() is None}

    def log_path(self, name: str) -> Path:
        return self.workdir / "logs" / f"{name}.log"

    def log_tails(self, lines: int = LOG_TAIL_LINES) -> str:
        parts = []
        for p in self._procs:
            parts.append(f"----- {p.name} (pid {p.popen.pid}, exit {p.popen.poll()}) log tail: {p.log}")
            parts.append(_tail(p.log, lines))
        return "\n".join(parts)

    # ---------------------------------------------------------------- lifecycle
    def stop(self, timeout: float = 10.0) -> None:
        """Stop every process (reverse start order: SIGTERM, wait, SIGKILL) and remove the temp dir. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            for p in reversed(self._procs):
                _terminate(p.popen, timeout)
        finally:
            with _live_lock:
                _live.discard(self)
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, name: str, argv: Sequence[str]) -> _Proc:
        log = self.log_path(name)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            popen = subprocess.Popen(  # the log file handle is inherited by the child; ours closes here
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,
                preexec_fn=_pdeathsig,
            )
        proc = _Proc(name, popen, log)
        self._procs.append(proc)
        return proc


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def _terminate(popen: subprocess.Popen[bytes], timeout: float) -> None:
    if popen.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(popen.pid, signal.SIGTERM)
    try:
        popen.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait(5)


@atexit.register
def _stop_all() -> None:
    with _live_lock:
        planes = list(_live)
    for plane in planes:
        with contextlib.suppress(Exception):
            plane.stop(timeout=5)


# ---------------------------------------------------------------- certificates and files
def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ControlPlaneError(f"openssl {' '.join(args)} failed: {result.stderr.strip()}")


def make_pki(pki: Path) -> tuple[Path, Path, Path, Path]:
    """CA, serving cert+key for 127.0.0.1/localhost, and a service-account key pair, all EC P-256 (fast to make).

    Returns (ca, crt, key, sa_key); the public half of sa_key is next to it as sa.pub.
    """
    if shutil.which("openssl") is None:
        raise ControlPlaneError("openssl is needed to make test certificates (apt-get install openssl)")
    pki.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "ca.key", "-out", "ca.crt", "-days", "3",
        "-subj", "/CN=ljrk-test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        cwd=pki,
    )  # fmt: skip
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "apiserver.key", "-out", "apiserver.csr",
        "-subj", "/CN=kube-apiserver",
        cwd=pki,
    )  # fmt: skip
    (pki / "apiserver.ext").write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc\n"
    )
    _openssl(
        "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "apiserver.crt", "-days", "3", "-extfile", "apiserver.ext",
        cwd=pki,
    )  # fmt: skip
    # SEC1 "EC PRIVATE KEY" + "PUBLIC KEY": kube-apiserver 1.20 cannot read a public key from a PKCS#8 private key.
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=pki)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    return pki / "ca.crt", pki / "apiserver.crt", pki / "apiserver.key", pki / "sa.key"


def write_kubeconfig(path: Path, host: str, ca_file: Path, token: str) -> None:
    """A kubeconfig (JSON, which YAML readers accept) with one cluster/user/context named ``ljrk-test``."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "ljrk-test", "cluster": {"server": host, "certificate-authority": str(ca_file)}}],
        "users": [{"name": "ljrk-test", "user": {"token": token}}],
        "contexts": [{"name": "ljrk-test", "context": {"cluster": "ljrk-test", "user": "ljrk-test"}}],
        "current-context": "ljrk-test",
        "preferences": {},
    }
    path.write_text(json.dumps(doc, indent=2))


def scheduler_configuration(kubeconfig: Path, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """The KubeSchedulerConfiguration (v1) the harness gives kube-scheduler; ``extra`` replaces top-level fields,
    except ``clientConnection``, whose keys (e.g. ``qps``, ``burst``) are added beside the kubeconfig."""
    cfg: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": False},
    }
    extra = dict(extra or {})
    connection = {**cfg["clientConnection"], **extra.pop("clientConnection", {})}
    cfg.update(extra)
    cfg["clientConnection"] = connection
    return cfg


# ---------------------------------------------------------------- readiness
def _get(url: str, *, context: ssl.SSLContext | None = None, token: str | None = None, timeout: float = 2.0) -> str:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
        body: bytes = resp.read()
        return body.decode(errors="replace")


def _self_signed() -> ssl.SSLContext:
    """A TLS context for kube-scheduler's and kube-controller-manager's own self-signed serving certificates (made at
    start in their ``--cert-dir``): loopback only, health probes only, so the certificate is not verified."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _wait_until(plane: ControlPlane, what: str, proc: _Proc, probe: Any, deadline: float) -> None:
    last = "no answer yet"
    while True:
        if proc.popen.poll() is not None:
            raise ControlPlaneError(f"{proc.name} exited with code {proc.popen.returncode} before {what}")
        try:
            if probe():
                return
            last = "probe said not ready"
        except (OSError, urllib.error.URLError) as exc:  # HTTPError is a URLError
            last = repr(exc)
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"timed out waiting for {what}; last: {last}")
        time.sleep(0.1)


def _sweep_orphaned_workdirs(parent: Path) -> None:
    """Remove temp dirs left by a test process that was SIGKILLed (its children died with it, its files did not)."""
    for workdir in parent.glob(f"{WORKDIR_PREFIX}*"):
        try:
            owner = int((workdir / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(workdir, ignore_errors=True)
        except PermissionError:
            pass


# ---------------------------------------------------------------- start
def start_control_plane(
    bin_dir: Path | str | None,
    *,
    scheduler: bool = False,
    controller_manager: bool = False,
    scheduler_config: Mapping[str, Any] | None = None,
    scheduler_config_file: Path | str | None = None,
    controllers: Sequence[str] = DEFAULT_CONTROLLERS,
    feature_gates: Mapping[str, bool] | None = None,
    extra_apiserver_args: Sequence[str] = (),
    nodes: Sequence[str] = (),
    authorization_mode: str = "AlwaysAllow",
    timeout: float = 90.0,
    workdir_parent: Path | str | None = None,
) -> ControlPlane:
    """Start etcd + kube-apiserver (+ scheduler, + controller manager) and wait until each answers its health check.

    ``nodes``: node names that get a kubelet identity (a static token, :meth:`ControlPlane.node_kubeconfig`).
    ``authorization_mode``: kube-apiserver's ``--authorization-mode`` (``RBAC`` to judge ServiceAccounts by the
    roles applied; the harness's own token is in ``system:masters`` either way)."""
    started = time.monotonic()
    deadline = started + timeout
    bdir = Path(bin_dir) if bin_dir is not None else None
    etcd_bin = find_binary(bdir, "etcd")
    apiserver_bin = find_binary(bdir, "kube-apiserver")
    scheduler_bin = find_binary(bdir, "kube-scheduler") if scheduler else None
    cm_bin = find_binary(bdir, "kube-controller-manager") if controller_manager else None
    gates = dict(feature_gates or {})
    gates_arg = ",".join(f"{k}={str(v).lower()}" for k, v in sorted(gates.items()))
    gate_args = [f"--feature-gates={gates_arg}"] if gates else []

    _sweep_orphaned_workdirs(Path(workdir_parent or tempfile.gettempdir()))
    workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir=workdir_parent))
    (workdir / "owner.pid").write_text(str(os.getpid()))
    etcd_client, etcd_peer, api_port, sched_port, cm_port = free_ports(5)
    token = secrets.token_hex(16)
    host = f"https://127.0.0.1:{api_port}"
    plane = ControlPlane(
        workdir=workdir,
        host=host,
        token=token,
        ca_file=workdir / "pki" / "ca.crt",
        kubeconfig=workdir / "kubeconfig.json",
        etcd_url=f"http://127.0.0.1:{etcd_client}",
        bin_dir=bdir,
    )
    with _live_lock:
        _live.add(plane)
    try:
        ca, crt, key, sa_key = make_pki(workdir / "pki")
        plane.node_tokens = {name: secrets.token_hex(16) for name in nodes}
        (workdir / "tokens.csv").write_text(
            f'{token},ljrk-test-admin,ljrk-test-admin,"system:masters"\n'
            + "".join(f'{t},system:node:{n},node-{n},"system:nodes"\n' for n, t in plane.node_tokens.items())
        )
        write_kubeconfig(plane.kubeconfig, host, ca, token)

        etcd = plane._spawn(
            "etcd",
            [
                str(etcd_bin),
                "--name=ljrk-test",
                f"--data-dir={workdir / 'etcd'}",
                f"--listen-client-urls={plane.etcd_url}",
                f"--advertise-client-urls={plane.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster=ljrk-test=http://127.0.0.1:{etcd_peer}",
                "--logger=zap",
            ],
        )
        _wait_until(plane, "etcd /health", etcd, lambda: '"true"' in _get(f"{plane.etcd_url}/health"), deadline)

        apiserver = plane._spawn(
            "kube-apiserver",
            [
                str(apiserver_bin),
                f"--etcd-servers={plane.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",  # it refuses a loopback advertise address; nothing reads it here
                f"--secure-port={api_port}",
                f"--cert-dir={workdir / 'pki'}",
                f"--tls-cert-file={crt}",
                f"--tls-private-key-file={key}",
                f"--client-ca-file={ca}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={sa_key.with_suffix('.pub')}",
                f"--service-account-signing-key-file={sa_key}",
                f"--token-auth-file={workdir / 'tokens.csv'}",
                f"--authorization-mode={authorization_mode}",
                "--disable-admission-plugins=ServiceAccount",
                "--enable-priority-and-fairness=false",
                *gate_args,
                *extra_apiserver_args,
            ],
        )
        ctx = ssl.create_default_context(cafile=str(ca))
        _wait_until(
            plane,
            "kube-apiserver /readyz",
            apiserver,
            lambda: _get(f"{host}/readyz", context=ctx, token=token) == "ok",
            deadline,
        )

        if scheduler_bin is not None:
            if scheduler_config_file is not None:
                sched_cfg_path = Path(scheduler_config_file)
            else:
                sched_cfg_path = workdir / "kube-scheduler.json"
                sched_cfg_path.write_text(
                    json.dumps(scheduler_configuration(plane.kubeconfig, scheduler_config), indent=2)
                )
            plane.scheduler_config_path = sched_cfg_path
            sched = plane._spawn(
                "kube-scheduler",
                [
                    str(scheduler_bin),
                    f"--config={sched_cfg_path}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={sched_port}",
                    f"--cert-dir={workdir / 'kube-scheduler-pki'}",
                    *gate_args,
                ],
            )
            if scheduler_config_file is None:
                _wait_until(
                    plane,
                    "kube-scheduler /healthz",
                    sched,
                    lambda: _get(f"https://127.0.0.1:{sched_port}/healthz", context=_self_signed()) == "ok",
                    deadline,
                )
            else:  # the port is the file's business; just make sure it did not die at once
                time.sleep(1.0)
                if sched.popen.poll() is not None:
                    raise ControlPlaneError(f"kube-scheduler exited with code {sched.popen.returncode}")

        if cm_bin is not None:
            cm = plane._spawn(
                "kube-controller-manager",
                [
                    str(cm_bin),
                    f"--kubeconfig={plane.kubeconfig}",
                    f"--controllers={','.join(controllers)}",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={cm_port}",
                    f"--cert-dir={workdir / 'kube-controller-manager-pki'}",
                    "--use-service-account-credentials=false",
                    *gate_args,
                ],
            )
            _wait_until(
                plane,
                "kube-controller-manager /healthz",
                cm,
                lambda: _get(f"https://127.0.0.1:{cm_port}/healthz", context=_self_signed()) == "ok",
                deadline,
            )
    except BaseException as exc:
        tails = plane.log_tails()
        plane.stop(timeout=5)
        if isinstance(exc, ControlPlaneError | OSError | subprocess.SubprocessError):
            raise ControlPlaneError(f"{exc}\n{tails}") from exc
        raise
    plane.startup_seconds = time.monotonic() - started
    return plane


@contextlib.contextmanager
def control_plane(bin_dir: Path | str | None, **kwargs: Any) -> Iterator[ControlPlane]:
    """``with control_plane(bin_dir, scheduler=True) as cp: ...`` — always stopped on exit."""
    plane = start_control_plane(bin_dir, **kwargs)
    try:
        yield plane
    finally:
        plane.stop()
