#!/usr/bin/env bash
# A real Kubernetes node for the integration tests: kubelet, containerd 2 (CDI on) and runc of the live Kubernetes
# version, all built from Go modules by scripts/k8s-control-plane.sh install, plus a pause image, a small workload
# image, a kube-scheduler image and a no-op CNI plugin, all made here without any registry. The node itself is
# started and stopped by tests/integration/kubelet_harness.py (or `start`/`stop`, through
# tests/integration/kubelet_cli.py).
#
#   bash scripts/real-kubelet.sh install        # Debian packages, the platform build, images, CNI plugin
#   bash scripts/real-kubelet.sh node-dir       # print the node's folder (exit 1 if not installed)
#   bash scripts/real-kubelet.sh start DIR [--kubeconfig F --node-name N]   # containerd + kubelet in DIR
#   bash scripts/real-kubelet.sh stop DIR       # stop them and remove every process, mount, cgroup and file
#
# `install` (as root on Debian bookworm) is idempotent:
#   1. apt-get installs containernetworking-plugins (its `loopback`), busybox-static, buildah, gcc, libc6-dev and
#      util-linux (no service is started: a policy-rc.d denies it while packages install);
#   2. runs scripts/k8s-control-plane.sh install: kubelet, kube-scheduler, containerd, ctr, the runc shim and runc
#      of the selected Kubernetes version ($LJRK_K8S_VERSION, else hack/kubernetes-version);
#   3. compiles Kubernetes' own build/pause/linux/pause.c (from the k8s.io/kubernetes module, `kube_platform.py
#      module-dir`)
#      statically and packs it, busybox-static, and that version's kube-scheduler binary as one-layer images with
#      buildah (vfs storage under a temporary root, removed afterwards), written as docker-archive tarballs that
#      containerd imports (`ljrk.local/pause:3.10`, `ljrk.local/workload:1`, and
#      `registry.k8s.io/kube-scheduler:v<version>`: the upstream image's name, so deploy/'s scheduler Deployment
#      runs it with `deploy-all.sh --kube-scheduler-tag`; the binary at /usr/local/bin/kube-scheduler, on PATH);
#   4. writes the no-op CNI plugin `ljrk-noop` (answers ADD with a fixed documentation-range address and touches no
#      interface, route or firewall rule) beside a link to Debian's `loopback`.
# Everything lands in ${LJRK_K8S_CACHE:-/var/cache/ljrk-k8s}/node/v<version> (bin/ holds links to the built
# programs); nothing built here is ever committed. The images and the CNI plugin are remade whenever this script
# or the platform build changes.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
CACHE="${LJRK_K8S_CACHE:-/var/cache/ljrk-k8s}"
APT_PACKAGES=(containernetworking-plugins busybox-static buildah gcc libc6-dev util-linux)
PAUSE_IMAGE="ljrk.local/pause:3.10"
WORKLOAD_IMAGE="ljrk.local/workload:1"
KUBE_SCHEDULER_REPO="registry.k8s.io/kube-scheduler"

LOG_TAG="real-kubelet"
# shellcheck source=scripts/lib/common.sh
source "$HERE/lib/common.sh"  # log, die, apt_install, buildah_store

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
    export PATH="/usr/local/go/bin:$PATH"
fi

usage() {
    cat >&2 <<'EOF'
usage: real-kubelet.sh install | node-dir | start DIR [harness flags] | stop DIR
  install    install the CNI loopback, busybox and buildah from Debian, build the platform from Go modules
             (scripts/k8s-control-plane.sh install), make the pause, workload and kube-scheduler images and the
             no-op CNI plugin (idempotent)
  node-dir   print the folder holding them; exit 1 when `install` has not completed
  start DIR  start containerd + kubelet with their state in DIR (tests/integration/kubelet_cli.py)
  stop DIR   stop the node started in DIR and remove everything it made
EOF
}

# The selected Kubernetes version's control-plane folder (kube-*, kubectl, etcd); empty when not built.
plane_dir() { python3 "$HERE/kube_platform.py" bin-dir 2>/dev/null || true; }

# What the node's files are made from: this script and the built programs' stamps.
install_hash() {
    local plane="$1" tools f
    tools="$(python3 "$HERE/kube_platform.py" node-bin-dir 2>/dev/null)" || return 1
    {
        sha256sum <"$0"
        cat "$plane/.complete"
        for f in "$tools"/*; do cat "$(dirname "$(readlink -f "$f")")/.complete"; done
    } | sha256sum | cut -c1-16
}

node_of() { printf '%s/node/%s' "$CACHE" "$(basename "$1")"; }

is_installed() {
    local plane node
    plane="$(plane_dir)"
    [[ -n "$plane" ]] || return 1
    node="$(node_of "$plane")"
    [[ -x "$node/bin/kubelet" && -x "$node/bin/containerd" && -x "$node/bin/runc" ]] || return 1
    [[ -f "$node/images/pause.tar" && -f "$node/images/workload.tar" ]] || return 1
    [[ -f "$node/images/kube-scheduler.tar" ]] || return 1
    [[ -x "$node/cni/bin/ljrk-noop" && -f "$node/.complete" ]] || return 1
    [[ "$(cat "$node/.complete")" == "$(install_hash "$plane")" ]]
}

cmd_node_dir() {
    if is_installed; then
        node_of "$(plane_dir)"
        printf '\n'
        return 0
    fi
    log "real node not installed for the selected Kubernetes version; run: bash scripts/real-kubelet.sh install"
    return 1
}

install_packages() { apt_install "${APT_PACKAGES[@]}"; }

# bin/: links to kubelet and kube-scheduler of the version, and to containerd, its shim, ctr and runc.
link_binaries() {
    local plane="$1" node="$2" tools f
    tools="$(python3 "$HERE/kube_platform.py" node-bin-dir)"
    mkdir -p "$node/bin"
    ln -sfn "$plane/kubelet" "$node/bin/kubelet"
    ln -sfn "$plane/kube-scheduler" "$node/bin/kube-scheduler"
    for f in "$tools"/*; do ln -sfn "$(readlink -f "$f")" "$node/bin/$(basename "$f")"; done
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
    local plane="$1" node="$2" work version pause_c
    version="$(basename "$plane")"  # v1.37.2
    pause_c="$(python3 "$HERE/kube_platform.py" module-dir --version "$version")/build/pause/linux/pause.c"
    [[ -f "$pause_c" ]] || die "no $pause_c in the k8s.io/kubernetes $version module"
    work="$(mktemp -d /tmp/ljrk-node-build-XXXXXX)"
    mkdir -p "$node/images" "$work/pause" "$work/workload/bin"
    gcc -Os -static -DVERSION=v3.10-ljrk -o "$work/pause/pause" "$pause_c"
    strip "$work/pause/pause"
    pack_image "$PAUSE_IMAGE" "$work/pause" '["/pause"]' "$node/images/pause.tar"
    install -m 0755 /bin/busybox "$work/workload/bin/busybox"
    local applet
    for applet in sh env sleep cat ls echo test true false printenv; do
        ln -s busybox "$work/workload/bin/$applet"
    done
    pack_image "$WORKLOAD_IMAGE" "$work/workload" '["/bin/sh"]' "$node/images/workload.tar"
    local scheduler_image="$KUBE_SCHEDULER_REPO:$version"
    mkdir -p "$work/kube-scheduler/usr/local/bin" "$work/kube-scheduler/tmp"
    install -m 0755 "$plane/kube-scheduler" "$work/kube-scheduler/usr/local/bin/kube-scheduler"
    pack_image "$scheduler_image" "$work/kube-scheduler" '["/usr/local/bin/kube-scheduler"]' \
        "$node/images/kube-scheduler.tar"
    rm -rf "$work"
    printf '%s\n%s\n%s\n' "$PAUSE_IMAGE" "$WORKLOAD_IMAGE" "$scheduler_image" >"$node/images/names"
    log "images: $PAUSE_IMAGE ($(du -h "$node/images/pause.tar" | cut -f1)), $WORKLOAD_IMAGE" \
        "($(du -h "$node/images/workload.tar" | cut -f1)), $scheduler_image" \
        "($(du -h "$node/images/kube-scheduler.tar" | cut -f1))"
}

make_cni() {
    local node="$1"
    mkdir -p "$node/cni/bin"
    ln -sfn /usr/lib/cni/loopback "$node/cni/bin/loopback"
    cat >"$node/cni/bin/ljrk-noop" <<'EOF'
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
    chmod 0755 "$node/cni/bin/ljrk-noop"
}

cmd_install() {
    [[ "$(id -u)" == 0 ]] || die "install must run as root (apt-get, $CACHE)"
    local started=$SECONDS plane node
    install_packages
    bash "$HERE/k8s-control-plane.sh" install >/dev/null
    plane="$(python3 "$HERE/kube_platform.py" bin-dir)"
    node="$(node_of "$plane")"
    if is_installed; then
        log "already installed in $node ($("$node/bin/kubelet" --version))"
        printf '%s\n' "$node"
        return 0
    fi
    exec 9>"$CACHE/.node.lock"
    flock 9 || die "cannot lock $CACHE/.node.lock"
    link_binaries "$plane" "$node"
    make_images "$plane" "$node"
    make_cni "$node"
    install_hash "$plane" >"$node/.complete"
    log "done in $((SECONDS - started)) s; the node's files are in $node ($("$node/bin/kubelet" --version)," \
        "containerd $("$node/bin/containerd" --version | awk '{print $3}'), $("$node/bin/runc" --version | head -n 1))"
    printf '%s\n' "$node"
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
