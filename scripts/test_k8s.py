#!/usr/bin/env python3
"""Run the whole live suite against a Kubernetes version and record the result (``make test-k8s``).

``test_k8s.py [VERSION ...]`` (``1.35.4``, ``v1.35.4`` or ``all``; default: the selected version, see
``scripts/kube_platform.py``) does, per version:

1. ``scripts/real-kubelet.sh install`` with ``LJRK_K8S_VERSION`` set: the control plane, kubelet, containerd, runc
   and the node's images of that version, built from Go modules (cached: a second run builds nothing);
2. the live tests — every test marked ``k8s``, ``kubelet`` or ``images`` — with ``LJRK_K8S_VERSION`` and
   ``LJRK_REQUIRE_K8S/KUBELET/IMAGES=1`` (a missing piece fails instead of skipping), pytest's JUnit XML report
   written to ``out/test-k8s/<version>.xml``;
3. the counts from that report (passed, failed = failures + errors, skipped), the date (UTC) and the run's
   minutes written as that version's row of the table between the ``results`` markers of
   ``docs/compatibility.md`` (other rows are kept; rows are sorted by version).

The images (``make images``) must exist first; the Makefile target builds them. Extra pytest arguments follow
``--``. Exit status: 0 every version passed with no failure; 1 a failure, an error or a build that failed; 2 bad
arguments or an unsupported version (the message lists the supported ones). Standard library only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kube_platform  # the sibling script (standard library only)

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "compatibility.md"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
HEADER = ("| Kubernetes | containerd | runc | etcd | date (UTC) | passed | failed | skipped | minutes |\n"
          "|---|---|---|---|---|---|---|---|---|")
LIVE_MARKERS = "k8s or kubelet or images"




@dataclass(frozen=True)
class Result:
    """One version's run: the counts of pytest's JUnit report and the wall minutes of install + tests; ``broken``
    names what stopped the run before pytest reported (its row says so instead of counts)."""

    version: str
    passed: int
    failed: int
    skipped: int
    minutes: float
    broken: str = ""

    def row(self, platform: dict[str, object], today: str) -> str:
        tools = {c.name: c.version for c in kube_platform.node_components(platform)}
        counts = (f"{self.broken} | - | -" if self.broken else f"{self.passed} | {self.failed} | {self.skipped}")
        return (f"| v{self.version} | {tools['containerd']} | {tools['runc']} | {tools['etcd']} | {today} | "
                f"{counts} | {self.minutes:.1f} |")


def counts(report: Path) -> tuple[int, int, int]:
    """``(passed, failed, skipped)`` of a JUnit XML report (failed counts failures and errors)."""
    root = ET.parse(report).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = sum(int(s.get("tests", 0)) for s in suites)
    failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    return total - failed - skipped, failed, skipped


def record(results: list[Result], platform: dict[str, object], today: str, doc: Path = DOC) -> None:
    """Write each result as its version's row between the markers of ``doc`` (module docstring)."""
    text = doc.read_text()
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise SystemExit(f"{doc}: needs exactly one {BEGIN} and one {END}")
    head, rest = text.split(BEGIN)
    body, tail = rest.split(END)
    rows = {m.group(1): line for line in body.splitlines() if (m := re.match(r"^\| v([0-9.]+) \|", line))}
    for result in results:
        rows[result.version] = result.row(platform, today)
    ordered = [rows[v] for v in sorted(rows, key=lambda v: [int(p) for p in v.split(".")])]
    doc.write_text(f"{head}{BEGIN}\n{HEADER}\n" + "\n".join(ordered) + f"\n{END}{tail}")


def run_version(version: str, pytest_args: list[str]) -> Result:
    started = time.monotonic()
    env = {**os.environ, "LJRK_K8S_VERSION": version, "LJRK_REQUIRE_K8S": "1", "LJRK_REQUIRE_KUBELET": "1",
           "LJRK_REQUIRE_IMAGES": "1"}
    print(f"[test-k8s] v{version}: installing the platform (scripts/real-kubelet.sh install)", flush=True)
    install = subprocess.run(["bash", str(REPO / "scripts" / "real-kubelet.sh"), "install"], env=env, check=False)
    if install.returncode != 0:
        print(f"[test-k8s] v{version}: install failed (exit {install.returncode})", flush=True)
        return Result(version, 0, 1, 0, (time.monotonic() - started) / 60, broken="install failed")
    report = REPO / "out" / "test-k8s" / f"{version}.xml"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "pytest", "-q", "-m", LIVE_MARKERS, f"--junitxml={report}", "tests", *pytest_args]
    print(f"[test-k8s] v{version}: {' '.join(argv[1:])}", flush=True)
    subprocess.run(argv, cwd=REPO, env=env, check=False)
    if not report.is_file():
        return Result(version, 0, 1, 0, (time.monotonic() - started) / 60, broken="no pytest report")
    passed, failed, skipped = counts(report)
    return Result(version, passed, failed, skipped, (time.monotonic() - started) / 60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="test_k8s.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="*", help="1.37.2 (or v1.37.2), or all; default: the selected version")
    parser.add_argument("--no-record", action="store_true", help="do not write docs/compatibility.md")
    args, extra = parser.parse_known_args(argv)
    pytest_args = extra[1:] if extra[:1] == ["--"] else extra
    platform = kube_platform.load_table()
    try:
        if args.versions == ["all"]:
            versions = sorted(kube_platform.kube_versions(platform), key=lambda v: [int(p) for p in v.split(".")])
        else:
            versions = [kube_platform.select_version(platform, v) for v in (args.versions or [None])]
    except kube_platform.PlatformError as error:
        print(f"[test-k8s] ERROR: {error}", file=sys.stderr)
        return error.code
    results = [run_version(v, pytest_args) for v in versions]
    if not args.no_record:
        record(results, platform, dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"))
    for r in results:
        print(f"[test-k8s] v{r.version}: {r.passed} passed, {r.failed} failed, {r.skipped} skipped "
              f"in {r.minutes:.1f} min", flush=True)
    return 0 if all(r.failed == 0 and r.passed > 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
