# shellcheck shell=bash
# Helpers shared by scripts/real-kubelet.sh, scripts/images.sh and scripts/prometheus.sh (sourced, never run).
# The caller sets LOG_TAG.
#   log MESSAGE / die MESSAGE      one line on stderr tagged [LOG_TAG]; die exits 1
#   apt_install PACKAGE...         apt-get installs the missing ones (root), no recommends, and no service starts
#                                  while they install (a temporary policy-rc.d denies it; e.g. containerd's)
#   buildah_store DIR              sets the array BH: buildah with its whole storage (root, runroot) under DIR,
#                                  storage driver $BUILDAH_DRIVER (default vfs), so nothing touches the host's store

log() { printf '[%s] %s\n' "${LOG_TAG:-ljrk}" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "${LOG_TAG:-ljrk}" "$*" >&2; exit 1; }

apt_install() {
    local missing=() p policy="/usr/sbin/policy-rc.d"
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if ((${#missing[@]} == 0)); then
        log "Debian packages already installed: $*"
        return 0
    fi
    local own_policy=0
    if [[ ! -e "$policy" ]]; then
        printf '#!/bin/sh\n# scripts/lib/common.sh: no service starts while packages install\nexit 101\n' >"$policy"
        chmod 0755 "$policy"
        own_policy=1
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    log "apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    if [[ "$own_policy" == 1 ]]; then
        rm -f "$policy"
        trap - EXIT
    fi
}

buildah_store() {
    mkdir -p "$1"
    # shellcheck disable=SC2034  # BH is the caller's
    BH=(buildah --root "$1/root" --runroot "$1/run" --storage-driver "${BUILDAH_DRIVER:-vfs}")
}
