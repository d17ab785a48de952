#!/usr/bin/env bash
# download-deps.sh: switch the build, the deployment and the live tests to the Kubernetes version of the target
# cluster.
#
#   hack/download-deps.sh vX.Y.Z     e.g. v1.28.0; then `make lock build` re-locks, installs, verifies
#   hack/download-deps.sh --default  back to the committed default
#   hack/download-deps.sh --verify   change nothing; exit 1 when pyproject.toml, the installed client, the
#                                    manifests and hack/kubernetes-version disagree (make build and make test run it)
#   hack/download-deps.sh --list     the supported minors, their clients and test-cluster versions
#                                    (hack/kubernetes-versions.toml)
#
# For vX.Y.Z it pins the official `kubernetes` Python client of that minor in pyproject.toml (client majors follow
# Kubernetes minors, except 1.36 on client 37), sets the kube-scheduler image tag (vX.Y.Z) and the
# KubeSchedulerConfiguration apiVersion in deploy/scheduler/, sets the live tests' Kubernetes in
# hack/kubernetes-version (X.Y.Z when the platform built from Go modules has it, else its version of that minor; a
# minor it cannot build leaves the file and says so), re-runs deploy/generate.py and prints each change;
# a second run changes nothing. The work is done by scripts/download_deps.py (standard library, Python >= 3.11:
# $PYTHON, else python3), so it runs before .venv exists.
# Exit codes: 0 done; 1 a file is not as expected, or --verify found a disagreement; 2 bad command line or an
# unsupported version (the message lists the supported ones).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python_bin="${PYTHON:-python3}"

if ! command -v "$python_bin" >/dev/null 2>&1; then
    echo "download-deps.sh: error: $python_bin not found: install Python >= 3.11 or set PYTHON=/path/to/python3" >&2
    exit 1
fi
if ! "$python_bin" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "download-deps.sh: error: $python_bin is older than Python 3.11 (it needs tomllib): set PYTHON" >&2
    exit 1
fi
exec "$python_bin" "$REPO_ROOT/scripts/download_deps.py" "$@"
