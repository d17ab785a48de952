"""The six images `make images` builds (scripts/images.sh) run as the table of ``docs/deploy.md`` says.

For each image's docker-archive tarball in ``dist/images`` (the set matching the current inputs hash): it carries
the name the manifests in ``deploy/`` use, its entrypoint is ``ljrk <command>``, and run by runc with a read-only
root filesystem as the image's own user, ``--help`` prints that command's usage; inside it the process has uid
65532 (scheduler, controller) or 0 (node components) and cannot write to its root filesystem.

Without current images (or without root and runc) these tests are skipped with the command that builds them;
``LJRK_REQUIRE_IMAGES=1`` (set by .ci/run, which runs ``make images`` first) turns the skip into a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from image_runner import Archive, images_dir, read_archive, run, runc_available, unpack
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.images

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
MAKE_IMAGES = re.search(r"^IMAGES\s*:=\s*(.+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
IMAGES = MAKE_IMAGES.group(1).split() if MAKE_IMAGES else []
NON_ROOT = {"scheduler", "controller"}
"""``docs/deploy.md``'s table: scheduler and controller run as uid 65532, the node components (and the Jobs) as root."""

PROBE = (
    "import errno, os\n"
    "try:\n"
    "    open('/opt/lj-runtimekit/probe', 'w')\n"
    "    print(os.getuid(), os.getgid(), 'writable')\n"
    "except OSError as exc:\n"
    "    print(os.getuid(), os.getgid(), errno.errorcode[exc.errno])\n"
)
"""Prints ``uid gid`` and what writing a file into the image's own folder gave (``EROFS`` when read-only)."""


@pytest.fixture(scope="module")
def image_dir() -> Path:
    """dist/images with the current set (skips, or fails with LJRK_REQUIRE_IMAGES=1, when it cannot be used)."""
    found, why = images_dir()
    if found is None or not runc_available():
        hint = why if found is None else "runc needs root and a runc (k8s-control-plane.sh install builds one)"
        if os.environ.get("LJRK_REQUIRE_IMAGES") == "1":
            pytest.fail(f"LJRK_REQUIRE_IMAGES=1 but the images cannot be run: {hint}", pytrace=False)
        pytest.skip(f"no current images: {hint}")
    return found


@pytest.fixture(scope="module")
def names(image_dir: Path) -> dict[str, str]:
    """Image → name, from the set's images.tsv (image, name, bytes, build seconds)."""
    rows = [line.split("\t") for line in (image_dir / "images.tsv").read_text().splitlines() if line]
    return {row[0]: row[1] for row in rows}


@pytest.fixture(scope="module")
def root_filesystems(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, ...], Path]]:
    """Unpacked root filesystems by layer list, shared by the images made of the same layers (~450 MB each,
    removed at the end of the module). The six Dockerfiles copy the one environment as their first step, so the
    images share their layers and differ only in their config (entrypoint, user, env): one unpack, not six
    (:func:`test_the_six_images_share_their_layers`). The key is the layers' content digests
    (``rootfs.diff_ids``), so an equal key means equal files; the containers mount them read-only, so sharing
    cannot leak a write."""
    unpacked: dict[tuple[str, ...], Path] = {}
    try:
        yield unpacked
    finally:
        for root in unpacked.values():
            shutil.rmtree(root.parent, ignore_errors=True)


@pytest.fixture(scope="module", params=IMAGES)
def unpacked(request: pytest.FixtureRequest, image_dir: Path, root_filesystems: dict[tuple[str, ...], Path],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Archive, Path, Path]]:
    """(image, archive, root filesystem, bundle folder) of one image; the root filesystem comes from
    ``root_filesystems`` (unpacked on first use of its layer list)."""
    image = str(request.param)
    archive = read_archive(image_dir / f"{image}.tar")
    layers = tuple(archive.diff_ids)
    if layers not in root_filesystems:
        rootfs = tmp_path_factory.mktemp(f"rootfs-{image}") / "rootfs"
        unpack(archive, rootfs)
        root_filesystems[layers] = rootfs
    bundles = tmp_path_factory.mktemp(f"bundle-{image}")
    try:
        yield image, archive, root_filesystems[layers], bundles
    finally:
        shutil.rmtree(bundles, ignore_errors=True)


def test_the_set_holds_the_six_images_under_the_manifests_names(image_dir: Path, names: dict[str, str]) -> None:
    assert sorted(names) == sorted(IMAGES)
    assert len(IMAGES) == 6
    for image in IMAGES:
        # the manifests say lj-runtimekit/<image>:<version>; containerd and kubelet read it as docker.io/…
        assert names[image] == f"docker.io/lj-runtimekit/{image}:{VERSION}"
        assert names[image] in read_archive(image_dir / f"{image}.tar").tags


def test_the_six_images_share_their_layers(image_dir: Path) -> None:
    # docker/*.Dockerfile: the COPY of the environment comes before any per-image line, so buildah's layer cache
    # gives the six the same layers; containerd then stores them once and the tests above unpack them once
    layers = {image: tuple(read_archive(image_dir / f"{image}.tar").diff_ids) for image in IMAGES}
    assert len(set(layers.values())) == 1, layers
    assert len(layers[IMAGES[0]]) == 3  # the Debian + Python base, the environment, its SBOM


def locked_runtime() -> dict[str, str]:
    """requirements/runtime.lock's pins for the images' Python (3.11, Linux): canonical name → version."""
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    env.update(python_version="3.11", python_full_version="3.11.2", sys_platform="linux", platform_system="Linux")
    pins: dict[str, str] = {}
    text = re.sub(r"\\\n", " ", (REPO / "requirements" / "runtime.lock").read_text())
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            requirement = Requirement(line.split(" --hash")[0].strip())
            if requirement.marker is None or requirement.marker.evaluate(env):
                (pin,) = requirement.specifier
                pins[canonicalize_name(requirement.name)] = pin.version
    return pins


def test_each_image_has_an_sbom_of_what_it_holds(image_dir: Path) -> None:
    # dist/images/<image>.sbom.cdx.json (scripts/images.sh): cyclonedx-py's record of the image's environment,
    # the image's Debian packages and its base; it names our project at its version, every locked runtime
    # dependency at its locked version and nothing else from PyPI, and the base digest the image's label carries
    locked = locked_runtime()
    assert len(locked) > 20
    for image in IMAGES:
        sbom = json.loads((image_dir / f"{image}.sbom.cdx.json").read_text())
        assert (sbom["bomFormat"], sbom["specVersion"]) == ("CycloneDX", "1.6")
        root = sbom["metadata"]["component"]
        assert (root["name"], root["version"], root["type"]) == ("lj-runtimekit", VERSION, "application")
        components = sbom["components"]
        pypi: dict[str, str] = {canonicalize_name(c["name"]): c["version"] for c in components
                                if c.get("purl", "").startswith("pkg:pypi/")}
        assert pypi.pop("lj-runtimekit", VERSION) == VERSION
        assert pypi == locked, image
        debian = {c["name"]: c["version"] for c in components
                  if c.get("purl", "").startswith("pkg:deb/debian/")}
        assert {"libc6", "python3.11", "libssl3"} <= set(debian), image
        assert [c["name"] for c in components if c["type"] == "operating-system"] == ["debian"]
        properties = {p["name"]: p["value"] for p in sbom["metadata"]["properties"]}
        labels = read_archive(image_dir / f"{image}.tar").config["Labels"]
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", properties["lj-runtimekit:base:digest"])
        assert properties["lj-runtimekit:base:digest"] == labels["org.opencontainers.image.base.digest"]
        assert properties["lj-runtimekit:base:name"] == labels["org.opencontainers.image.base.name"]


def test_help_runs_in_the_image_read_only_as_its_user(unpacked: tuple[str, Archive, Path, Path]) -> None:
    image, archive, rootfs, bundle = unpacked
    config = archive.config
    assert config["Entrypoint"] == ["ljrk", image]
    assert config["User"] == ("65532:65532" if image in NON_ROOT else "0:0")
    assert "PYTHONDONTWRITEBYTECODE=1" in config["Env"]
    result = run(archive, rootfs, bundle / "help", ["--help"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: ljrk {image} "), result.stdout[:300]


def test_the_process_runs_as_documented_on_a_read_only_root(unpacked: tuple[str, Archive, Path, Path]) -> None:
    image, archive, rootfs, bundle = unpacked
    result = run(archive, rootfs, bundle / "probe", ["-c", PROBE], entrypoint=["python"])
    assert result.returncode == 0, result.stderr
    uid = 65532 if image in NON_ROOT else 0
    assert result.stdout.split() == [str(uid), str(uid), "EROFS"]
