#!/usr/bin/env bash
# A real Kubernetes control plane for the integration tests, built only from Debian packages.
#
#   bash scripts/k8s-control-plane.sh install   # apt-get install etcd-server + Go, build kube-* from Debian's source
#   bash scripts/k8s-control-plane.sh bin-dir   # print the directory with the binaries (exit 1 if not built)
#
# `install` (as root on Debian bookworm or a derivative):
#   1. installs etcd-server, golang-go, rsync, make, dpkg-dev and openssl with apt-get (only what is missing);
#   2. adds a deb-src entry for <codename> main, copied from the mirror the machine's apt sources already use,
#      unless source packages for main can already be fetched;
#   3. `apt-get source kubernetes` (Debian's package ships the full vendored Go dependency tree, so the build is
#      offline: GOPROXY=off) and builds kube-apiserver, kube-scheduler and kube-controller-manager with make;
#   4. copies them (and a link to Debian's etcd) into ${LJRK_K8S_CACHE:-/var/cache/ljrk-k8s}/bin.
# The build lives outside the repository and is reused while it is complete: a second `install` does nothing.
# Set LJRK_K8S_REBUILD=1 to force a rebuild. Nothing built here is ever committed.
set -euo pipefail

CACHE="${LJRK_K8S_CACHE:-/var/cache/ljrk-k8s}"
BIN_DIR="$CACHE/bin"
SRC_ROOT="$CACHE/src"
STAMP="$BIN_DIR/.complete"
SOURCE_PACKAGE="kubernetes"
BINARIES=(kube-apiserver kube-scheduler kube-controller-manager)
APT_PACKAGES=(etcd-server golang-go rsync make dpkg-dev openssl)
DEB_SRC_FILE="/etc/apt/sources.list.d/ljrk-deb-src.sources"

log() { printf '[k8s-control-plane] %s\n' "$*" >&2; }
die() { printf '[k8s-control-plane] ERROR: %s\n' "$*" >&2; exit 1; }

usage() {
    cat >&2 <<'EOF'
usage: k8s-control-plane.sh install | bin-dir
  install   install etcd + Go from Debian and build kube-apiserver, kube-scheduler and kube-controller-manager
            from Debian's `kubernetes` source package into ${LJRK_K8S_CACHE:-/var/cache/ljrk-k8s}/bin (idempotent)
  bin-dir   print the directory holding the binaries; exit 1 when they have not been built
EOF
}

is_built() {
    [[ -f "$STAMP" ]] || return 1
    local b
    for b in "${BINARIES[@]}"; do
        [[ -x "$BIN_DIR/$b" ]] || return 1
    done
}

cmd_bin_dir() {
    if is_built; then
        printf '%s\n' "$BIN_DIR"
        return 0
    fi
    log "control plane not built in $BIN_DIR; run: bash scripts/k8s-control-plane.sh install"
    return 1
}

os_codename() {
    local codename=""
    if [[ -r /etc/os-release ]]; then
        # shellcheck disable=SC1091
        codename="$(. /etc/os-release && printf '%s' "${VERSION_CODENAME:-}")"
    fi
    [[ -n "$codename" ]] || die "cannot read VERSION_CODENAME from /etc/os-release (need Debian bookworm or similar)"
    printf '%s' "$codename"
}

# Print "URI<TAB>Signed-By" of the first configured binary (deb) source that serves <codename> with component main.
# Reads deb822 *.sources files and one-line *.list files; prints nothing when none is found.
find_main_mirror() {
    local codename="$1"
    python3 - "$codename" <<'PY'
import glob
import sys

codename = sys.argv[1]


def deb822(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    for stanza in text.split("\n\n"):
        fields, key = {}, None
        for line in stanza.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line[0] in " \t" and key:
                fields[key] += " " + line.strip()
                continue
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if fields.get("enabled", "yes").lower() == "no":
            continue
        if "deb" not in fields.get("types", "").split():
            continue
        if codename not in fields.get("suites", "").split():
            continue
        if "main" not in fields.get("components", "").split():
            continue
        uris = fields.get("uris", "").split()
        if uris:
            yield uris[0], fields.get("signed-by", "")


def one_line(path):
    for raw in open(path, encoding="utf-8", errors="replace"):
        line = raw.split("#", 1)[0].split()
        if len(line) < 3 or line[0] != "deb":
            continue
        options, rest = "", line[1:]
        if rest[0].startswith("["):
            opts = []
            while rest and not rest[0].endswith("]"):
                opts.append(rest.pop(0))
            if rest:
                opts.append(rest.pop(0))
            options = " ".join(opts).strip("[]")
        if len(rest) >= 3 and rest[1] == codename and "main" in rest[2:]:
            signed = ""
            for opt in options.split():
                if opt.startswith("signed-by="):
                    signed = opt.split("=", 1)[1]
            yield rest[0], signed


paths = sorted(glob.glob("/etc/apt/sources.list.d/*.sources"))
lists = ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]
for path in paths:
    for uri, signed in deb822(path):
        print(f"{uri}\t{signed}")
        sys.exit(0)
for path in lists:
    try:
        for uri, signed in one_line(path):
            print(f"{uri}\t{signed}")
            sys.exit(0)
    except FileNotFoundError:
        pass
PY
}

apt_updated=0
apt_update_once() {
    if [[ "$apt_updated" == 0 ]]; then
        log "apt-get update"
        apt-get update -qq
        apt_updated=1
    fi
}

install_packages() {
    local missing=() p
    for p in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if ((${#missing[@]})); then
        apt_update_once
        log "apt-get install ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        log "Debian packages already installed: ${APT_PACKAGES[*]}"
    fi
    command -v go >/dev/null || die "golang-go installed but 'go' is not on PATH"
    [[ -x /usr/bin/etcd ]] || command -v etcd >/dev/null || die "etcd-server installed but 'etcd' not found"
}

source_available() {
    apt-cache showsrc "$SOURCE_PACKAGE" 2>/dev/null | grep -q '^Package:'
}

ensure_deb_src() {
    if source_available; then
        return 0
    fi
    local codename mirror uri signed
    codename="$(os_codename)"
    mirror="$(find_main_mirror "$codename")"
    [[ -n "$mirror" ]] || die "no configured apt source serves '$codename main'; cannot derive a deb-src entry"
    uri="${mirror%%$'\t'*}"
    signed="${mirror#*$'\t'}"
    log "adding deb-src for '$codename main' from the already configured mirror -> $DEB_SRC_FILE"
    {
        printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: main\n' "$uri" "$codename"
        [[ -z "$signed" ]] || printf 'Signed-By: %s\n' "$signed"
    } >"$DEB_SRC_FILE"
    apt_updated=0
    apt_update_once
    source_available || die "apt-get still finds no source package '$SOURCE_PACKAGE' after adding $DEB_SRC_FILE"
}

fetch_source() {
    # Prints the unpacked source directory.
    local version dir
    version="$(apt-cache showsrc "$SOURCE_PACKAGE" | awk '/^Version:/ {print $2; exit}')"
    [[ -n "$version" ]] || die "cannot read the version of source package '$SOURCE_PACKAGE'"
    mkdir -p "$SRC_ROOT"
    dir="$(find "$SRC_ROOT" -mindepth 1 -maxdepth 1 -type d -name "${SOURCE_PACKAGE}-*" -print -quit)"
    if [[ -n "$dir" && -f "$SRC_ROOT/.version" && "$(cat "$SRC_ROOT/.version")" == "$version" ]]; then
        log "reusing unpacked source $dir ($SOURCE_PACKAGE $version)"
        printf '%s' "$dir"
        return 0
    fi
    log "fetching source package $SOURCE_PACKAGE $version into $SRC_ROOT"
    rm -rf "$SRC_ROOT"
    mkdir -p "$SRC_ROOT"
    (cd "$SRC_ROOT" && apt-get source -qq "$SOURCE_PACKAGE=$version" >"$SRC_ROOT/apt-source.log" 2>&1) || {
        tail -n 30 "$SRC_ROOT/apt-source.log" >&2
        die "apt-get source $SOURCE_PACKAGE failed (log above)"
    }
    dir="$(find "$SRC_ROOT" -mindepth 1 -maxdepth 1 -type d -name "${SOURCE_PACKAGE}-*" -print -quit)"
    [[ -n "$dir" && -f "$dir/Makefile" ]] || die "unpacked source not found under $SRC_ROOT"
    printf '%s' "$version" >"$SRC_ROOT/.version"
    printf '%s' "$dir"
}

build_binaries() {
    local src="$1" version upstream what=() b log_file
    version="$(cat "$SRC_ROOT/.version")"
    upstream="${version#*:}"
    upstream="${upstream%%-*}"
    upstream="${upstream##*really}"
    for b in "${BINARIES[@]}"; do what+=("cmd/$b"); done
    log_file="$CACHE/build.log"
    log "building ${BINARIES[*]} (v$upstream) from $src; a cold build takes several minutes, log: $log_file"
    local started=$SECONDS
    mkdir -p "$src/.go/src/k8s.io"
    ln -sfn "$src" "$src/.go/src/k8s.io/kubernetes"
    if ! (
        cd "$src/.go/src/k8s.io/kubernetes"
        export GOPATH="$src/.go" GOPROXY=off
        export CGO_ENABLED=0 GOTOOLCHAIN=local
        export KUBE_GIT_VERSION="v$upstream" KUBE_GIT_TREE_STATE=clean KUBE_GIT_COMMIT=debian-source
        make WHAT="${what[*]}"
    ) >"$log_file" 2>&1; then
        tail -n 40 "$log_file" >&2
        die "build failed (last lines above; full log $log_file)"
    fi
    log "build finished in $((SECONDS - started)) s"
    rm -rf "$BIN_DIR"
    mkdir -p "$BIN_DIR"
    for b in "${BINARIES[@]}"; do
        local out
        out="$(find "$src/_output" -type f -name "$b" -perm -u+x -print -quit)"
        [[ -n "$out" ]] || die "built binary $b not found under $src/_output"
        install -m 0755 "$out" "$BIN_DIR/$b"
    done
    printf '%s\n' "$version" >"$STAMP"
    # The object tree is not needed once the binaries are copied; keep the source and the Go cache.
    rm -rf "$src/_output"
}

cmd_install() {
    [[ "$(id -u)" == 0 ]] || die "install must run as root (it uses apt-get and writes $CACHE)"
    local started=$SECONDS
    install_packages
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.lock"
    flock 9 || die "cannot lock $CACHE/.lock"
    if [[ "${LJRK_K8S_REBUILD:-0}" != 1 ]] && is_built; then
        log "reusing existing build ($(cat "$STAMP")) in $BIN_DIR"
    else
        ensure_deb_src
        local src
        src="$(fetch_source)"
        build_binaries "$src"
    fi
    # Debian's etcd next to them, so that one directory holds the whole control plane.
    ln -sfn "$(command -v etcd || echo /usr/bin/etcd)" "$BIN_DIR/etcd"
    local b
    for b in "${BINARIES[@]}"; do
        "$BIN_DIR/$b" --version 2>/dev/null | sed 's/^/[k8s-control-plane]   /' >&2 || die "$BIN_DIR/$b does not run"
    done
    log "etcd: $("$BIN_DIR/etcd" --version 2>/dev/null | head -n 1)"
    log "done in $((SECONDS - started)) s; binaries are in $BIN_DIR"
    printf '%s\n' "$BIN_DIR"
}

case "${1:-}" in
    install) cmd_install ;;
    bin-dir) cmd_bin_dir ;;
    -h | --help | help) usage ;;
    *)
        usage
        exit 2
        ;;
esac
