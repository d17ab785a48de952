#!/usr/bin/env bash
# The Kubernetes platform of the live tests, built from Go modules (scripts/kube_platform.py does the work).
#
#   bash scripts/k8s-control-plane.sh install   # build kube-apiserver, kube-controller-manager, kube-scheduler,
#                                               # kubelet, kubectl, etcd, containerd, runc, and helm (the
#                                               # chart tests' Helm 4) (pinned, cached)
#   bash scripts/k8s-control-plane.sh bin-dir   # print the folder with the control plane (exit 1 if not built)
#
# The Kubernetes version is $LJRK_K8S_VERSION, else hack/kubernetes-version (what hack/download-deps.sh selects),
# else hack/kubernetes-versions.toml's platform.default; an unsupported one exits 2 listing the supported ones.
# `install` (as root on Debian bookworm or a derivative) apt-installs what the builds need (openssl for the tests'
# certificates, gcc, libc6-dev and libseccomp-dev for runc), then builds with the machine's Go (>= 1.26; never
# downloaded) from the build modules under hack/kubebuild/ into ${LJRK_K8S_CACHE:-/var/cache/ljrk-k8s}: a cold
# build takes 20-30 minutes on 2 cores, a second install builds nothing. Nothing built here is ever committed.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
LOG_TAG="k8s-control-plane"
# shellcheck source=scripts/lib/common.sh
source "$HERE/lib/common.sh"  # log, die, apt_install
APT_PACKAGES=(openssl gcc libc6-dev libseccomp-dev pkg-config)

# The machine's Go lives in /usr/local/go on these machines; a PATH without it still finds it.
if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    export PATH="/usr/local/go/bin:$PATH"
fi

case "${1:-}" in
    install)
        [[ "$(id -u)" == 0 ]] || die "install must run as root (it uses apt-get and writes the cache)"
        apt_install "${APT_PACKAGES[@]}"
        exec python3 "$HERE/kube_platform.py" install
        ;;
    bin-dir) exec python3 "$HERE/kube_platform.py" bin-dir ;;
    -h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2 ;;
    *)
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
