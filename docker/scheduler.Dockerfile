# lj-runtimekit/scheduler: ljrk scheduler: the kube-scheduler extender (deploy/scheduler) or the standalone scheduler.
# Build from the repository root (`make docker` builds every image):
#   docker build -f docker/scheduler.Dockerfile -t lj-runtimekit/scheduler:VERSION .
# (VERSION: pyproject.toml's version, the tag the manifests in deploy/ use.)
# Stage 1 installs the locked runtime dependencies (requirements/runtime.lock, pip --require-hashes), then the
# project's wheel alone (--no-deps), into a virtual environment without pip, and writes that environment's
# CycloneDX SBOM (cyclonedx-py); the build backend and cyclonedx-py come from requirements/build.lock, hashes
# checked too. Stage 2 copies only the environment and the SBOM onto the slim Python base (no wheel cache, no
# sources, no build tools). PYTHON_IMAGE: the digest pin of hack/base-images.txt (`make lock-check` compares).
ARG PYTHON_IMAGE=python:3.11-slim@sha256:3c1dfceb3f1267d4d378e7883cddf35c58757bab98d70bba30b6e02e808fa21d

FROM ${PYTHON_IMAGE} AS build
# WHEELHOUSE: a folder of wheels mounted into the build (scripts/images.sh); pip then installs offline from it.
ARG WHEELHOUSE=
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements/runtime.lock requirements/build.lock requirements/
COPY pyproject.toml README.md ./
COPY src/ src/
RUN python -m venv /opt/build \
 && /opt/build/bin/python -m pip install ${WHEELHOUSE:+--no-index --find-links "$WHEELHOUSE"} \
    --require-hashes -r requirements/build.lock \
 && /opt/build/bin/python -m pip wheel --no-index --no-build-isolation --no-deps --wheel-dir /wheels . \
 && python -m venv --without-pip /opt/lj-runtimekit \
 && /opt/build/bin/python -m pip --python /opt/lj-runtimekit/bin/python install \
    ${WHEELHOUSE:+--no-index --find-links "$WHEELHOUSE"} --require-hashes -r requirements/runtime.lock \
 && /opt/build/bin/python -m pip --python /opt/lj-runtimekit/bin/python install --no-index --no-deps /wheels/*.whl \
 && /opt/build/bin/python -m pip --python /opt/lj-runtimekit/bin/python check \
 && /opt/lj-runtimekit/bin/ljrk --version \
 && mkdir /opt/sbom \
 && /opt/build/bin/cyclonedx-py environment --pyproject pyproject.toml --mc-type application \
    --output-reproducible --output-format JSON --output-file /opt/sbom/python.cdx.json /opt/lj-runtimekit/bin/python

FROM ${PYTHON_IMAGE}
# First, ahead of any per-image line: the six images then share these layers (same instruction, same parent).
COPY --from=build /opt/lj-runtimekit /opt/lj-runtimekit
COPY --from=build /opt/sbom /usr/share/lj-runtimekit/sbom
ARG PYTHON_IMAGE
LABEL org.opencontainers.image.title="lj-runtimekit/scheduler" \
      org.opencontainers.image.description="LJ RuntimeKit: ljrk scheduler" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"
# Read-only root filesystem in the manifests: no bytecode writes at run time; logs unbuffered.
ENV PATH=/opt/lj-runtimekit/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Non-root: it only talks to the API server and listens on a loopback port.
USER 65532:65532
ENTRYPOINT ["ljrk", "scheduler"]
