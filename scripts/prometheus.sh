#!/usr/bin/env bash
# A real Prometheus server and promtool for the exporter's integration test, from Debian's `prometheus` package.
#
#   bash scripts/prometheus.sh install   # apt-get install prometheus (only when prometheus/promtool are missing)
#   bash scripts/prometheus.sh bin-dir   # print the directory holding prometheus and promtool (exit 1 if absent)
#
# `install` (as root on Debian bookworm or a derivative) installs without recommends (no node exporter) and never
# starts the package's service: while it runs, a policy-rc.d that denies every start is put in place unless one
# already exists, so no Prometheus is left listening on :9090. The tests start their own server on 127.0.0.1.
set -euo pipefail

PACKAGE="prometheus"
BINARIES=(prometheus promtool)
LOG_TAG="prometheus"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/lib/common.sh
source "$HERE/lib/common.sh"  # log, die, apt_install

usage() {
    cat >&2 <<'EOF'
usage: prometheus.sh install | bin-dir
  install   apt-get install Debian's prometheus package (server + promtool) without starting its service
            (idempotent: does nothing when both binaries are already on PATH)
  bin-dir   print the directory holding prometheus and promtool; exit 1 when they are not installed
EOF
}

bin_dir() {
    # Prints the directory of `prometheus` when `promtool` sits beside it; fails otherwise.
    local server dir
    server="$(command -v prometheus 2>/dev/null)" || return 1
    dir="$(dirname "$(readlink -f "$server")")"
    [[ -x "$dir/promtool" ]] || return 1
    printf '%s\n' "$dir"
}

cmd_bin_dir() {
    bin_dir && return 0
    log "prometheus/promtool not found on PATH; run: bash scripts/prometheus.sh install"
    return 1
}

cmd_install() {
    if bin_dir >/dev/null; then
        log "already installed: $(bin_dir)"
        return 0
    fi
    [[ "$(id -u)" == 0 ]] || die "install needs root (apt-get)"
    apt_install "$PACKAGE"
    local b
    for b in "${BINARIES[@]}"; do
        command -v "$b" >/dev/null || die "$PACKAGE installed but '$b' is not on PATH"
    done
    log "installed: $(bin_dir) ($(prometheus --version 2>&1 | head -n 1))"
}

case "${1:-}" in
    install) cmd_install ;;
    bin-dir) cmd_bin_dir ;;
    *) usage; exit 2 ;;
esac
