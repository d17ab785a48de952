"""Write the build module of a Kubernetes version, ``hack/kubebuild/kubernetes-v<version>/`` (``kube_platform.py
gen X.Y.Z`` runs this): its ``go.mod`` requires ``k8s.io/kubernetes`` at that version, replaces every staging module
listed in that release's own ``go.mod`` with its published ``v0.<minor>.<patch>`` tag and names the five commands
as ``tool`` directives; ``go mod tidy`` then writes ``go.sum``. It prints the table entry (the module's ``h1:``
hash) to add under ``[platform.kubernetes]`` in ``hack/kubernetes-versions.toml``. Standard library only.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from kube_platform import KUBE_COMMANDS, KUBE_MODULE, MODULES, REPO, VERSION, PlatformError, go_env


def generate(version: str) -> None:
    """Write ``hack/kubebuild/kubernetes-v<version>/go.mod`` from the upstream go.mod's staging replaces, then
    ``go mod tidy`` (which writes go.sum); prints the ``h1:`` hash to put into the table."""
    if not VERSION.match(version):
        raise PlatformError(f"not a version: {version!r} (want 1.Y.Z)", code=2)
    version = version.removeprefix("v")
    info = subprocess.run(["go", "mod", "download", "-json", f"{KUBE_MODULE}@v{version}"], capture_output=True,
                          text=True, check=False, env=go_env(False) | {"GOFLAGS": "-buildvcs=false"})
    if info.returncode != 0:
        raise PlatformError(f"the module proxy does not serve {KUBE_MODULE} v{version}: {info.stdout}{info.stderr}",
                            code=2)
    meta = json.loads(info.stdout)
    upstream = Path(meta["GoMod"]).read_text()
    go_line = re.search(r"^go (\S+)$", upstream, re.M)
    staging = re.findall(r"^\s+(k8s\.io/[A-Za-z0-9._-]+) => \./staging/", upstream, re.M)
    if go_line is None or not staging:
        raise PlatformError(f"{KUBE_MODULE} v{version}'s go.mod has no go line or no staging replaces")
    minor_patch = version.split(".", 1)[1]
    body = [
        f"// Builds Kubernetes v{version}'s commands (scripts/kube_platform.py). Written by",
        f"// `scripts/kube_platform.py gen {version}`: the staging replaces are copied from that release's go.mod.",
        "module ljrk.local/kubebuild",
        "",
        f"go {go_line.group(1)}",
        "",
        f"require {KUBE_MODULE} v{version}",
        "",
        "replace (",
        *(f"\t{module} => {module} v0.{minor_patch}" for module in staging),
        ")",
        "",
        "tool (",
        *(f"\t{KUBE_MODULE}/cmd/{c}" for c in KUBE_COMMANDS),
        ")",
        "",
    ]
    target = MODULES / f"kubernetes-v{version}"
    target.mkdir(parents=True, exist_ok=True)
    (target / "go.mod").write_text("\n".join(body))
    tidy = subprocess.run(["go", "mod", "tidy"], cwd=target, capture_output=True, text=True, check=False,
                          env=go_env(False) | {"GOFLAGS": "-buildvcs=false"})
    if tidy.returncode != 0:
        raise PlatformError(f"go mod tidy in {target.relative_to(REPO)} failed:\n{tidy.stderr[-3000:]}")
    print(f'[platform.kubernetes."{version}"]\nsum = "{meta["Sum"]}"')
