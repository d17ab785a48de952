"""Figures of ``make images`` (scripts/images.sh): wall time of a build, then of a second, cached one, and each
image's size and build time.

Runs ``bash scripts/images.sh build`` twice and prints both wall times (seconds), then one row per image from the
set's ``images.tsv`` (image, name, bytes, build seconds, as scripts/images.sh writes it) with its size in MB
(10^6 bytes) and MiB. Without ``--cold`` the first build reuses whatever ``/var/cache/ljrk-images`` holds (an
unchanged tree: about half a second; after a change of README.md, src/ or docker/: the six images again, on the
cached base and wheels). ``--cold`` builds into a new, empty cache folder (``LJRK_IMAGES_CACHE``; mmdebstrap and
``pip download`` need the Debian mirror and PyPI) and removes it afterwards (``dist/images`` keeps its hard links or
copies; the usual cache does not get that set).

Needs root (buildah, mmdebstrap). Usage: ``.venv/bin/python bench/images_build.py [--cold]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _build(env: dict[str, str]) -> float:
    """Wall seconds of one ``scripts/images.sh build``; exits with its code when it fails."""
    started = time.monotonic()
    result = subprocess.run(["bash", str(REPO / "scripts" / "images.sh"), "build"], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    took = time.monotonic() - started
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-4000:])
        raise SystemExit(result.returncode)
    return took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", action="store_true", help="build into a new, empty cache folder")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("needs root (buildah, mmdebstrap)")
    env = dict(os.environ)
    cache = Path(tempfile.mkdtemp(prefix="ljrk-images-cold-", dir="/var/tmp")) if args.cold else None
    if cache is not None:
        env["LJRK_IMAGES_CACHE"] = str(cache)
    try:
        first = _build(env)
        second = _build(env)
        rows = [line.split("\t") for line in (REPO / "dist" / "images" / "images.tsv").read_text().splitlines()
                if line]
    finally:
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)
    print(f"first build ({'empty cache' if cache else 'the cache as found'}): {first:.1f} s")
    print(f"second build (cached): {second:.1f} s")
    print(f"{'image':<14}{'MB':>8}{'MiB':>8}{'build s':>9}")
    for image, _name, size, seconds in rows:
        print(f"{image:<14}{int(size) / 1e6:>8.0f}{int(size) / 2**20:>8.0f}{int(seconds):>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
