#!/usr/bin/env bash
# The six images of docker/*.Dockerfile built without Docker and without a registry (`make images`): buildah
# (chroot isolation, a private storage under a temporary folder) builds each Dockerfile unchanged on a Debian
# bookworm + Python 3.11 base made here by mmdebstrap, and writes it as a docker-archive tarball that containerd
# imports (`ctr -n k8s.io images import`): dist/images/<image>.tar, named <IMAGE_PREFIX><image>:<version>.
#
#   bash scripts/images.sh build    # base, wheels, the six images (root; apt-get installs buildah and mmdebstrap)
#   bash scripts/images.sh dir      # print dist/images when it holds the current images; exit 1 (saying how to
#                                   # build them) when they are missing or older than their inputs
#   bash scripts/images.sh hash     # print the inputs hash
#
# Caches, all under ${LJRK_IMAGES_CACHE:-/var/cache/ljrk-images} and keyed by a hash of what made them:
#   base-<key>.tar     the base root filesystem (suite, packages and mmdebstrap options below);
#   wheels-<key>/      the wheels of requirements/runtime.lock and requirements/build.lock (key: the two locks'
#                      hash), fetched on this host by `pip download --require-hashes --only-binary=:all:` with
#                      $PYTHON (Python 3.11, as in the base): the builds install only from them (--no-index, hashes
#                      checked again), so they need no network and no CA bundle;
#   images-<hash>/     the six tarballs, their SBOMs (<image>.sbom.cdx.json: CycloneDX 1.6, the image's Python
#                      environment by cyclonedx-py in the build stage, its Debian packages, its base; see
#                      scripts/image_sbom.py) and images.tsv (image, name, bytes, build seconds), for the inputs
#                      hash: pyproject.toml, README.md, .dockerignore, docker/, src/ (no bytecode), the two locks,
#                      hack/base-images.txt, this script, scripts/lib/ and scripts/image_sbom.py, the version, the
#                      names, the base and wheel keys. dist/images/ holds hard links to the current set; only the
#                      two newest sets are kept.
# Storage driver: overlay with cached layers (`bud --layers`: the build stage, identical in the six Dockerfiles, is
# built once) when an overlay mount works here, else vfs without layer caching (vfs copies the whole tree per
# layer); LJRK_IMAGES_DRIVER=vfs|overlay forces one. Everything buildah mounts lives in a private mount namespace
# and goes with it. BASE_IMAGE=pinned uses hack/base-images.txt's python:3.11-slim@sha256:… from a reachable registry
# instead of the local base (BASE_IMAGE=REF@sha256:DIGEST another one; a reference without a digest is refused).
# The local base is labelled with what it was built on: org.opencontainers.image.base.name (its name here),
# org.opencontainers.image.base.digest (sha256 of the mmdebstrap tarball, its content) and
# io.lj-runtimekit.base.sources (the Debian sources mmdebstrap used); the images inherit them and their SBOMs
# repeat them.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"
LOG_TAG="images"
# shellcheck source=scripts/lib/common.sh
source "$HERE/lib/common.sh"  # log, die, apt_install, buildah_store

CACHE="${LJRK_IMAGES_CACHE:-/var/cache/ljrk-images}"
OUT="${LJRK_IMAGES_OUT:-$REPO/dist/images}"
IMAGES=(scheduler device-plugin exporter controller runtime job-agent)
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/pyproject.toml")"
IMAGE_PREFIX="${IMAGE_PREFIX:-lj-runtimekit/}"
BASE_IMAGE="${BASE_IMAGE:-}"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
SUITE="bookworm"
BASE_PACKAGES="python3,python3-venv,python3-pip,python-is-python3"
BASE_NAME="ljrk.local/python:3.11-bookworm"
MMDEBSTRAP_OPTS=(--variant=apt --include="$BASE_PACKAGES"
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright')
LOCKS=(requirements/runtime.lock requirements/build.lock)
INPUTS=(pyproject.toml README.md .dockerignore docker src "${LOCKS[@]}" hack/base-images.txt scripts/images.sh
    scripts/lib scripts/image_sbom.py)

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; }

short_hash() { sha256sum | cut -c1-16; }

base_key() { printf '%s\n' "$SUITE" "${MMDEBSTRAP_OPTS[@]}" | short_hash; }

wheels_key() { { cd "$REPO" && sha256sum "${LOCKS[@]}"; echo cp311; } | short_hash; }

# BASE_IMAGE as given, `pinned` → hack/base-images.txt's reference; dies on a reference without a digest.
resolve_base_image() {
    local ref="$BASE_IMAGE"
    if [[ "$ref" == pinned ]]; then
        ref="$(grep -v '^[[:space:]]*#' "$REPO/hack/base-images.txt" | grep -v '^[[:space:]]*$')" \
            || die "hack/base-images.txt holds no image reference"
    fi
    [[ "$ref" =~ ^[^@[:space:]]+@sha256:[0-9a-f]{64}$ ]] \
        || die "BASE_IMAGE=$ref is not pinned by digest (NAME:TAG@sha256:<64 hex>; BASE_IMAGE=pinned uses hack/base-images.txt)"
    BASE_IMAGE="$ref"
}

inputs_hash() {
    {
        printf '%s\n' "$VERSION" "$IMAGE_PREFIX" "${BASE_IMAGE:-base-$(base_key)}" "wheels-$(wheels_key)" "${IMAGES[*]}"
        cd "$REPO"
        find "${INPUTS[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*' -print0 \
            | LC_ALL=C sort -z | xargs -0 sha256sum
    } | short_hash
}

# A name as containerd and kubelet spell it: short names live on docker.io (so `lj-runtimekit/x:1` is found).
qualified() {
    local first="${1%%/*}"
    if [[ "$1" == */* && ( "$first" == *.* || "$first" == *:* || "$first" == localhost ) ]]; then
        printf '%s\n' "$1"
    else
        printf 'docker.io/%s\n' "$1"
    fi
}

ensure_base() {  # prints the base tarball
    local tar part
    tar="$CACHE/base-$(base_key).tar"
    if [[ ! -f "$tar" ]]; then
        part="${tar%.tar}.partial.tar"
        log "making the $SUITE + Python 3.11 base with mmdebstrap (about 45 s)"
        mmdebstrap --quiet --format=tar "${MMDEBSTRAP_OPTS[@]}" "$SUITE" "$part" >&2 || die "mmdebstrap failed"
        mv "$part" "$tar"
    fi
    printf '%s\n' "$tar"
}

ensure_wheels() {  # prints the wheelhouse
    local dir part
    dir="$CACHE/wheels-$(wheels_key)"
    if [[ ! -d "$dir" ]]; then
        [[ -x "$PYTHON" ]] || PYTHON=python3
        "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
            || die "$PYTHON is not Python 3.11 (the base's): set PYTHON=/path/to/python3.11"
        part="$dir.partial"
        rm -rf "$part"
        log "pip download: the wheels of ${LOCKS[*]} (hashes checked) into $dir"
        (cd "$REPO" && "$PYTHON" -m pip download --quiet --disable-pip-version-check --require-hashes \
            --only-binary=:all: --dest "$part" "${LOCKS[@]/#/--requirement=}") >&2 \
            || die "pip download failed (every locked package needs a wheel for Python 3.11 on Linux)"
        mv "$part" "$dir"
    fi
    printf '%s\n' "$dir"
}

storage_driver() {
    if [[ -n "${LJRK_IMAGES_DRIVER:-}" ]]; then
        printf '%s\n' "$LJRK_IMAGES_DRIVER"
        return 0
    fi
    local probe
    probe="$(mktemp -d "$1/overlay-probe.XXXXXX")"
    mkdir "$probe/lower" "$probe/upper" "$probe/work" "$probe/merged"
    if mount -t overlay overlay -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" \
        "$probe/merged" 2>/dev/null; then
        umount "$probe/merged"
        echo overlay
    else
        echo vfs
    fi
    rm -rf "$probe"
}

# The Debian sources mmdebstrap wrote into the base (one line: each source's URIs and suites, or the list lines).
base_sources() {
    tar -xOf "$1" --wildcards './etc/apt/sources.list' './etc/apt/sources.list.d/*' 2>/dev/null \
        | grep -E '^(deb |URIs:|Suites:)' | tr -s ' \n' ' ' | sed 's/ $//' || true
}

# _build OUT BASE_TAR WHEELS: runs in a private mount namespace (cmd_build); writes OUT/<image>.tar, OUT/images.tsv.
cmd_inner_build() {
    local out="$1" base_tar="$2" wheels="$3" store base_ref base_digest base_sources ctr mnt image name started
    local layers=()
    store="$(mktemp -d /var/tmp/ljrk-images-XXXXXX)"
    BUILDAH_DRIVER="$(storage_driver "$store")"
    buildah_store "$store"
    # shellcheck disable=SC2064  # expand $store now
    trap "awk -v s='$store' 'index(\$2, s) == 1 {print \$2}' /proc/self/mounts | sort -r | xargs -r umount -l
          rm -rf '$store'" EXIT
    [[ "$BUILDAH_DRIVER" != overlay ]] || layers=(--layers)
    log "buildah storage: $BUILDAH_DRIVER${layers[*]:+ (cached layers)}"
    if [[ -n "$BASE_IMAGE" ]]; then
        base_ref="$BASE_IMAGE"
        base_digest="${BASE_IMAGE##*@}"
        base_sources=""
    else
        base_digest="sha256:$(sha256sum "$base_tar" | cut -d' ' -f1)"
        base_sources="$(base_sources "$base_tar")"
        ctr="$("${BH[@]}" from scratch)"
        "${BH[@]}" add --quiet "$ctr" "$base_tar" / >/dev/null
        "${BH[@]}" config --os linux --arch amd64 --cmd '["python3"]' \
            --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            --label org.opencontainers.image.description="Debian $SUITE with Python 3.11 (mmdebstrap)" \
            --label org.opencontainers.image.base.name="$BASE_NAME" \
            --label org.opencontainers.image.base.digest="$base_digest" \
            --label io.lj-runtimekit.base.sources="$base_sources" "$ctr"
        "${BH[@]}" commit --quiet "$ctr" "$BASE_NAME" >/dev/null
        "${BH[@]}" rm "$ctr" >/dev/null
        base_ref="$BASE_NAME"
    fi
    for image in "${IMAGES[@]}"; do
        name="$(qualified "$IMAGE_PREFIX$image:$VERSION")"
        started=$SECONDS
        "${BH[@]}" bud --quiet --isolation chroot --pull=false "${layers[@]}" -f "$REPO/docker/$image.Dockerfile" \
            --build-arg PYTHON_IMAGE="$base_ref" --build-arg WHEELHOUSE=/wheelhouse \
            --volume "$wheels:/wheelhouse:ro" -t "$name" "$REPO" >/dev/null || die "buildah bud $image failed"
        "${BH[@]}" push --quiet "$name" "docker-archive:$out/$image.tar:$name" || die "buildah push $image failed"
        ctr="$("${BH[@]}" from --pull=false "$name")"
        mnt="$("${BH[@]}" mount "$ctr")"
        dpkg-query --admindir="$mnt/var/lib/dpkg" -W -f='${Package}\t${Version}\t${Architecture}\n' \
            >"$store/dpkg.tsv" || die "dpkg-query on $image failed"
        "$PYTHON" "$HERE/image_sbom.py" --python-sbom "$mnt/usr/share/lj-runtimekit/sbom/python.cdx.json" \
            --dpkg "$store/dpkg.tsv" --os-release "$mnt/etc/os-release" --base-name "$base_ref" \
            --base-digest "$base_digest" --base-sources "$base_sources" --output "$out/$image.sbom.cdx.json" \
            || die "the SBOM of $image failed"
        "${BH[@]}" umount "$ctr" >/dev/null
        "${BH[@]}" rm "$ctr" >/dev/null
        printf '%s\t%s\t%s\t%s\n' "$image" "$name" "$(stat -c %s "$out/$image.tar")" "$((SECONDS - started))" \
            >>"$out/images.tsv"
        log "$name: $(du -h "$out/$image.tar" | cut -f1) in $((SECONDS - started)) s"
    done
}

link_out() {  # link_out SET: dist/images/ = hard links to SET's files (copies across file systems)
    local set="$1" f
    mkdir -p "$OUT"
    rm -f "$OUT"/*.tar "$OUT"/*.sbom.cdx.json "$OUT/images.tsv" "$OUT/.complete"
    for f in "$set"/*.tar "$set"/*.sbom.cdx.json "$set/images.tsv"; do
        ln -f "$f" "$OUT/" 2>/dev/null || cp "$f" "$OUT/"
    done
    cp "$set/.complete" "$OUT/.complete"
}

cmd_build() {
    [[ "$(id -u)" == 0 ]] || die "build must run as root (apt-get, buildah, mmdebstrap, $CACHE)"
    local started=$SECONDS hash set base_tar="" wheels
    if [[ -n "$BASE_IMAGE" ]]; then apt_install buildah; else apt_install buildah mmdebstrap; fi
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.lock"
    flock 9 || die "cannot lock $CACHE/.lock"
    hash="$(inputs_hash)"
    set="$CACHE/images-$hash"
    if [[ -f "$set/.complete" ]]; then
        log "images for inputs $hash already built ($set)"
    else
        [[ -n "$BASE_IMAGE" ]] || base_tar="$(ensure_base)"
        wheels="$(ensure_wheels)"
        rm -rf "$set.partial"
        mkdir -p "$set.partial"
        unshare --mount --propagation private -- bash "$0" _build "$set.partial" "$base_tar" "$wheels"
        printf '%s\n' "$hash" >"$set.partial/.complete"
        mv "$set.partial" "$set"
        # keep the two newest sets
        find "$CACHE" -mindepth 1 -maxdepth 1 -type d -name 'images-*' ! -name '*.partial' -printf '%T@ %p\n' \
            | sort -rn | tail -n +3 | cut -d' ' -f2- | xargs -r rm -rf
        log "six images built in $((SECONDS - started)) s"
    fi
    link_out "$set"
    printf '%s\n' "$OUT"
}

cmd_dir() {
    local hash set
    hash="$(inputs_hash)"
    set="$CACHE/images-$hash"
    if [[ -f "$OUT/.complete" && "$(cat "$OUT/.complete")" == "$hash" ]]; then
        printf '%s\n' "$OUT"
    elif [[ -f "$set/.complete" ]]; then
        link_out "$set"
        printf '%s\n' "$OUT"
    else
        log "no images for the current inputs ($hash) in $OUT; build them with: make images (as root)"
        return 1
    fi
}

[[ -z "$BASE_IMAGE" ]] || resolve_base_image

case "${1:-}" in
    build) cmd_build ;;
    dir) cmd_dir ;;
    hash) inputs_hash ;;
    _build) shift; cmd_inner_build "$@" ;;
    -h | --help | help) usage ;;
    *)
        usage
        exit 2
        ;;
esac
