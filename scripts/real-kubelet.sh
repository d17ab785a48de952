#!/usr/bin/env bash
# A real Kubernetes node for the integration tests: kubelet 1.20.2 built from Debian's source package, Debian's
# containerd + runc, a pause image, a small workload image, a kube-scheduler image and a no-op CNI plugin, all made
# here without any registry. The node itself is started and stopped by tests/integration/kubelet_harness.py (or `start`/`stop`,
# through tests/integration/kubelet_cli.py).
#
#   bash scripts/real-kubelet.sh install        # Debian packages, kubelet, pause/workload/kube-scheduler images, CNI
#   bash scripts/real-kubelet.sh node-dir       # print the cache folder holding them (exit 1 if not installed)
#   bash scripts/real-kubelet.sh start DIR [--kubeconfig F --node-name N]   # containerd + kubelet in DIR
#   bash scripts/real-kubelet.sh stop DIR       # stop them and remove every process, mount, cgroup and file
#
# `install` (as root on Debian bookworm) is idempotent and offline apart from apt-get:
#   1. apt-get installs containerd, runc, containernetworking-plugins (its `loopback`), busybox-static, buildah,
#      gcc and libc6-dev (no service is started: a policy-rc.d denies it while packages install);
#   2. runs scripts/k8s-control-plane.sh install (the source tree it unpacks) and builds cmd/kubelet in that tree
#      under the same lock, with the same offline recipe (GOPROXY=off, vendored modules, CGO_ENABLED=0);
#   3. compiles Kubernetes' own build/pause/linux/pause.c statically and packs it, busybox-static, and the control
#      plane's static kube-scheduler binary (scripts/k8s-control-plane.sh, built from the same source tree) as
#      one-layer images with buildah (vfs storage under a temporary root, removed afterwards), written as
#      docker-archive tarballs that containerd imports (`ljrk.local/pause:3.2`, `ljrk.local/workload:1`, and
#      `registry.k8s.io/kube-scheduler:v<its version>`: the upstream image's name, so deploy/'s scheduler Deployment
#      runs it with `deploy-all.sh --kube-scheduler-tag`; the binary at /usr/local/bin/kube-scheduler, on PATH);
#   4. writes the no-op CNI plugin `ljrk-noop` (answers ADD with a fixed documentation-range address and touches no
#      interface, route or firewall rule) beside a link to Debian's `loopback`.
# Everything lands in ${LJRK_K8S_CACHE:-/var/cache/ljrk-k8s}/node; nothing built here is ever committed.
# LJRK_KUBELET_REBUILD=1 rebuilds kubelet; the images and the CNI plugin are remade whenever this script changes.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
CACHE="${LJRK_K8S_CACHE:-/var/cache/ljrk-k8s}"
NODE="$CACHE/node"
SRC_ROOT="$CACHE/src"
APT_PACKAGES=(containerd runc containernetworking-plugins busybox-static buildah gcc libc6-dev util-linux)
PAUSE_IMAGE="ljrk.local/pause:3.2"
WORKLOAD_IMAGE="ljrk.local/workload:1"
KUBE_SCHEDULER_REPO="registry.k8s.io/kube-scheduler"

LOG_TAG="real-kubelet"
# shellcheck source=scripts/lib/common.sh
source "$HERE/lib/common.sh"  # log, die, apt_install, buildah_store

usage() {
    cat >&2 <<'EOF'
usage: real-kubelet.sh install | node-dir | start DIR [harness flags] | stop DIR
  install    install containerd/runc/CNI/busybox/buildah from Debian, build kubelet from Debian's kubernetes
             source package, make the pause and workload images and the no-op CNI plugin (idempotent)
  node-dir   print the folder holding them; exit 1 when `install` has not completed
  start DIR  start containerd + kubelet with their state in DIR (tests/integration/kubelet_cli.py)
  stop DIR   stop the node started in DIR and remove everything it made
EOF
}

script_hash() { sha256sum "$0" | cut -c1-16; }

is_installed() {
    [[ -x "$NODE/bin/kubelet" && -f "$NODE/images/pause.tar" && -f "$NODE/images/workload.tar" ]] || return 1
    [[ -f "$NODE/images/kube-scheduler.tar" ]] || return 1
    [[ -x "$NODE/cni/bin/ljrk-noop" && -f "$NODE/.complete" ]] || return 1
    [[ "$(cat "$NODE/.complete")" == "$(script_hash)" ]]
}

cmd_node_dir() {
    if is_installed; then
        printf '%s\n' "$NODE"
        return 0
    fi
    log "real node not installed in $NODE; run: bash scripts/real-kubelet.sh install"
    return 1
}

install_packages() { apt_install "${APT_PACKAGES[@]}"; }

build_kubelet() {
    if [[ "${LJRK_KUBELET_REBUILD:-0}" != 1 && -x "$NODE/bin/kubelet" ]]; then
        log "reusing kubelet $("$NODE/bin/kubelet" --version 2>/dev/null)"
        return 0
    fi
    local src version upstream log_file started=$SECONDS
    src="$(find "$SRC_ROOT" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' -print -quit)"
    [[ -n "$src" && -f "$src/Makefile" ]] || die "no unpacked kubernetes source under $SRC_ROOT"
    version="$(cat "$SRC_ROOT/.version")"
    upstream="${version#*:}"
    upstream="${upstream%%-*}"
    upstream="${upstream##*really}"
    log_file="$CACHE/kubelet-build.log"
    log "building kubelet (v$upstream) from $src; a cold build takes about 8 minutes on 2 cores, log: $log_file"
    mkdir -p "$src/.go/src/k8s.io"
    ln -sfn "$src" "$src/.go/src/k8s.io/kubernetes"
    if ! (
        cd "$src/.go/src/k8s.io/kubernetes"
        export GOPATH="$src/.go" GOPROXY=off CGO_ENABLED=0 GOTOOLCHAIN=local
        export KUBE_GIT_VERSION="v$upstream" KUBE_GIT_TREE_STATE=clean KUBE_GIT_COMMIT=debian-source
        make WHAT=cmd/kubelet
    ) >"$log_file" 2>&1; then
        tail -n 40 "$log_file" >&2
        die "kubelet build failed (last lines above; full log $log_file)"
    fi
    local out
    out="$(find "$src/_output" -type f -name kubelet -perm -u+x -print -quit)"
    [[ -n "$out" ]] || die "built kubelet not found under $src/_output"
    mkdir -p "$NODE/bin"
    install -m 0755 "$out" "$NODE/bin/kubelet"
    rm -rf "$src/_output"
    log "kubelet built in $((SECONDS - started)) s: $("$NODE/bin/kubelet" --version)"
}

# One-layer image from the folder $2, entrypoint $3 (JSON array), written as docker-archive $4 named $1; PATH is
# the usual one (a container command without a slash is looked up there).
pack_image() {
    local name="$1" rootfs="$2" entrypoint="$3" out="$4" store ctr BH
    store="$(mktemp -d /tmp/ljrk-buildah-XXXXXX)"
    buildah_store "$store"
    local bh=("${BH[@]}")
    ctr="$("${bh[@]}" from scratch)"
    "${bh[@]}" copy --quiet "$ctr" "$rootfs/" / >/dev/null
    "${bh[@]}" config --entrypoint "$entrypoint" --cmd '' --os linux --arch amd64 \
        --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
    "${bh[@]}" commit --quiet "$ctr" "$name" >/dev/null
    rm -f "$out"
    "${bh[@]}" push --quiet "$name" "docker-archive:$out:$name" >/dev/null
    "${bh[@]}" rm "$ctr" >/dev/null
    rm -rf "$store"
}

make_images() {
    local src work
    src="$(find "$SRC_ROOT" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' -print -quit)"
    work="$(mktemp -d /tmp/ljrk-node-build-XXXXXX)"
    mkdir -p "$NODE/bin" "$NODE/images" "$work/pause" "$work/workload/bin"
    gcc -Os -static -DVERSION=v3.2-ljrk -o "$NODE/bin/pause" "$src/build/pause/linux/pause.c"
    strip "$NODE/bin/pause"
    install -m 0755 "$NODE/bin/pause" "$work/pause/pause"
    pack_image "$PAUSE_IMAGE" "$work/pause" '["/pause"]' "$NODE/images/pause.tar"
    install -m 0755 /bin/busybox "$work/workload/bin/busybox"
    local applet
    for applet in sh env sleep cat ls echo test true false printenv; do
        ln -s busybox "$work/workload/bin/$applet"
    done
    pack_image "$WORKLOAD_IMAGE" "$work/workload" '["/bin/sh"]' "$NODE/images/workload.tar"
    local scheduler_bin scheduler_version scheduler_image
    scheduler_bin="$CACHE/bin/kube-scheduler"
    [[ -x "$scheduler_bin" ]] || die "no $scheduler_bin (scripts/k8s-control-plane.sh install builds it)"
    scheduler_version="$("$scheduler_bin" --version | awk '{print $2}')"  # "Kubernetes v1.20.2"
    [[ "$scheduler_version" =~ ^v1\.[0-9]+\.[0-9]+$ ]] || die "$scheduler_bin --version: no vX.Y.Z"
    scheduler_image="$KUBE_SCHEDULER_REPO:$scheduler_version"
    mkdir -p "$work/kube-scheduler/usr/local/bin" "$work/kube-scheduler/tmp"
    install -m 0755 "$scheduler_bin" "$work/kube-scheduler/usr/local/bin/kube-scheduler"
    pack_image "$scheduler_image" "$work/kube-scheduler" '["/usr/local/bin/kube-scheduler"]' \
        "$NODE/images/kube-scheduler.tar"
    rm -rf "$work"
    printf '%s\n%s\n%s\n' "$PAUSE_IMAGE" "$WORKLOAD_IMAGE" "$scheduler_image" >"$NODE/images/names"
    log "images: $PAUSE_IMAGE ($(du -h "$NODE/images/pause.tar" | cut -f1)), $WORKLOAD_IMAGE" \
        "($(du -h "$NODE/images/workload.tar" | cut -f1)), $scheduler_image" \
        "($(du -h "$NODE/images/kube-scheduler.tar" | cut -f1))"
}

make_cni() {
    mkdir -p "$NODE/cni/bin"
    ln -sfn /usr/lib/cni/loopback "$NODE/cni/bin/loopback"
    cat >"$NODE/cni/bin/ljrk-noop" <<'EOF'
#!/bin/sh
# No-op CNI plugin for test nodes: no interface, route or firewall rule is touched. ADD reports eth0 with a fixed
# address from the documentation range (RFC 5737), so containerd accepts the sandbox; pods have no network.
cat >/dev/null
case "$CNI_COMMAND" in
    ADD) printf '{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","sandbox":"%s"}],' "$CNI_NETNS"
         printf '"ips":[{"version":"4","address":"192.0.2.2/24","interface":0}],"dns":{}}\n' ;;
    VERSION) printf '{"cniVersion":"0.4.0","supportedVersions":["0.3.0","0.3.1","0.4.0"]}\n' ;;
    *) : ;;
esac
EOF
    chmod 0755 "$NODE/cni/bin/ljrk-noop"
}

cmd_install() {
    [[ "$(id -u)" == 0 ]] || die "install must run as root (apt-get, $CACHE)"
    local started=$SECONDS
    install_packages
    bash "$HERE/k8s-control-plane.sh" install >/dev/null
    if is_installed && [[ "${LJRK_KUBELET_REBUILD:-0}" != 1 ]]; then
        log "already installed in $NODE ($("$NODE/bin/kubelet" --version))"
        printf '%s\n' "$NODE"
        return 0
    fi
    exec 9>"$CACHE/.lock"
    flock 9 || die "cannot lock $CACHE/.lock"
    build_kubelet
    make_images
    make_cni
    script_hash >"$NODE/.complete"
    log "done in $((SECONDS - started)) s; the node's files are in $NODE"
    printf '%s\n' "$NODE"
}

run_harness() {
    local python="$HERE/../.venv/bin/python"
    [[ -x "$python" ]] || python="python3"
    exec "$python" "$HERE/../tests/integration/kubelet_cli.py" "$@"
}

case "${1:-}" in
    install) cmd_install ;;
    node-dir) cmd_node_dir ;;
    start | stop)
        [[ $# -ge 2 ]] || { usage; exit 2; }
        run_harness "$@"
        ;;
    -h | --help | help) usage ;;
    *)
        usage
        exit 2
        ;;
esac
