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
POLICY_RC="/usr/sbin/policy-rc.d"

log() { printf '[prometheus] %s\n' "$*" >&2; }
die() { printf '[prometheus] ERROR: %s\n' "$*" >&2; exit 1; }

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
    local own_policy=0
    if [[ ! -e "$POLICY_RC" ]]; then
        printf '#!/bin/sh\n# scripts/prometheus.sh: no service starts while packages install\nexit 101\n' >"$POLICY_RC"
        chmod 0755 "$POLICY_RC"
        own_policy=1
        trap 'rm -f "$POLICY_RC"' EXIT
    fi
    log "apt-get install $PACKAGE"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$PACKAGE" >/dev/null
    if [[ "$own_policy" == 1 ]]; then
        rm -f "$POLICY_RC"
        trap - EXIT
    fi
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
