"""The extender's wire format loads no Kubernetes client: ``adapters.kubernetes.corejson`` is client-free and the
package's own names load ``.cluster`` only when asked for (checked in a fresh interpreter, where nothing else has
imported the client yet)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

PROBE = """
import sys
import entrypoints.scheduler.extender_json
print("after extender_json:", "kubernetes" in sys.modules)
from adapters.kubernetes import KubernetesCluster
print("after KubernetesCluster:", "kubernetes" in sys.modules, KubernetesCluster.__name__)
"""


def test_extender_json_imports_no_kubernetes_client() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=SRC, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(SRC)}).stdout.splitlines()
    assert out == ["after extender_json: False", "after KubernetesCluster: True KubernetesCluster"]
