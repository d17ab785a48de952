"""The Helm 4 post-renderer of the live Helm tests: the chart's render with the test node's overlay.

``python helm_postrender.py SETTINGS`` reads Helm's rendered manifests on stdin and writes them on stdout with
deployed_stack.py's overlay (:func:`deployed_stack.overlay_manifests`, the same edits the deployed-stack test makes
to its kustomize copy), ``SETTINGS`` being a :class:`deployed_stack.NodeSettings` JSON file. Helm 4 runs
post-renderers only as plugins: :func:`write_plugin` writes one (``plugin.yaml``: ``apiVersion: v1``,
``type: postrenderer/v1``, ``runtime: subprocess``, the command in ``runtimeConfig.platformCommand``, as
helm.sh/helm/v4's internal/plugin reads it) into a folder that ``HELM_PLUGINS`` names; ``helm install|upgrade
--post-renderer PLUGIN_NAME`` then pipes each render through this script, with this interpreter.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
PLUGIN_NAME = "ljrk-test-node"


def write_plugin(plugins: Path, settings_file: Path) -> str:
    """Write the post-renderer plugin under ``plugins`` (the ``HELM_PLUGINS`` folder); return its name."""
    folder = plugins / PLUGIN_NAME
    folder.mkdir(parents=True, exist_ok=True)
    plugin = {
        "apiVersion": "v1", "name": PLUGIN_NAME, "version": "0.1.0", "type": "postrenderer/v1",
        "runtime": "subprocess",
        "runtimeConfig": {"platformCommand": [{"command": sys.executable,
                                               "args": [str(HERE / "helm_postrender.py"), str(settings_file)]}]},
    }
    (folder / "plugin.yaml").write_text(yaml.safe_dump(plugin, sort_keys=False))
    return PLUGIN_NAME


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(HERE))
    from deployed_stack import NodeSettings, overlay_manifests

    if len(argv) != 1:
        print("usage: helm_postrender.py SETTINGS_JSON < manifests", file=sys.stderr)
        return 2
    settings = NodeSettings.from_json(Path(argv[0]).read_text())
    sys.stdout.write(overlay_manifests(sys.stdin.read(), settings))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
