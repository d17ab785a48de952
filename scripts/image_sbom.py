#!/usr/bin/env python3
"""One image's SBOM (scripts/images.sh, once per image): the CycloneDX JSON that cyclonedx-py wrote in the image's
build stage for its Python environment (``/usr/share/lj-runtimekit/sbom/python.cdx.json`` in the image), plus the
image's Debian packages and what the image was built on, validated against the CycloneDX schema.

    image_sbom.py --python-sbom FILE --dpkg FILE --os-release FILE --base-name NAME --base-digest DIGEST
                  [--base-sources TEXT] --output FILE

``--dpkg``: ``dpkg-query --admindir=ROOT/var/lib/dpkg -W -f='${Package}\\t${Version}\\t${Architecture}\\n'`` of the
image's root (one ``name<TAB>version<TAB>arch`` line per package); each becomes a ``library`` component with its
``pkg:deb`` package URL (packageurl-python), beside one ``operating-system`` component from ``--os-release``. The
base (name, digest, Debian sources) goes into ``metadata.properties`` (``lj-runtimekit:base:*``). The result is
checked by cyclonedx-python-lib's strict JSON validator for the document's own spec version. Exit 1 on bad input
(named), 0 after writing ``--output``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL


def read_os_release(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip('"')
    return fields


def debian_components(dpkg: str, distro: str) -> list[dict[str, Any]]:
    components = []
    for number, line in enumerate(dpkg.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 3 or not all(fields):
            raise ValueError(f"--dpkg line {number}: {line!r} is not name<TAB>version<TAB>arch")
        name, version, arch = fields
        purl = PackageURL(type="deb", namespace="debian", name=name, version=version,
                          qualifiers={"arch": arch, "distro": distro}).to_string()
        components.append({"type": "library", "bom-ref": purl, "name": name, "version": version, "purl": purl})
    if not components:
        raise ValueError("--dpkg lists no package")
    return components


def merge(python_sbom: dict[str, Any], dpkg: str, os_release: dict[str, str], base: dict[str, str]) -> dict[str, Any]:
    os_id, os_version = os_release.get("ID", ""), os_release.get("VERSION_ID", "")
    if not os_id or not os_version:
        raise ValueError("--os-release has no ID or VERSION_ID")
    distro = f"{os_id}-{os_version}"
    sbom = dict(python_sbom)
    components = list(sbom.get("components", []))
    components.append({"type": "operating-system", "bom-ref": f"os:{distro}", "name": os_id, "version": os_version,
                       "description": os_release.get("PRETTY_NAME", distro)})
    components += debian_components(dpkg, distro)
    sbom["components"] = components
    metadata = dict(sbom.get("metadata", {}))
    properties = list(metadata.get("properties", []))
    properties += [{"name": f"lj-runtimekit:base:{key}", "value": value} for key, value in base.items() if value]
    metadata["properties"] = properties
    sbom["metadata"] = metadata
    return sbom


def validate(sbom: dict[str, Any]) -> None:
    version = SchemaVersion.from_version(str(sbom.get("specVersion", "")))
    error = JsonStrictValidator(version).validate_str(json.dumps(sbom))
    if error is not None:
        raise ValueError(f"the merged SBOM is not valid CycloneDX {version.to_version()}: {error}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python-sbom", type=Path, required=True)
    parser.add_argument("--dpkg", type=Path, required=True)
    parser.add_argument("--os-release", type=Path, required=True)
    parser.add_argument("--base-name", required=True)
    parser.add_argument("--base-digest", required=True)
    parser.add_argument("--base-sources", default="")
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        python_sbom = json.loads(args.python_sbom.read_text())
        if python_sbom.get("bomFormat") != "CycloneDX":
            raise ValueError(f"{args.python_sbom} is not a CycloneDX JSON document")
        sbom = merge(python_sbom, args.dpkg.read_text(), read_os_release(args.os_release.read_text()),
                     {"name": args.base_name, "digest": args.base_digest, "sources": args.base_sources})
        validate(sbom)
    except (OSError, ValueError) as exc:
        print(f"image_sbom.py: {exc}", file=sys.stderr)
        return 1
    args.output.write_text(json.dumps(sbom, indent=2, sort_keys=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
