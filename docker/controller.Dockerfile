# lj-runtimekit/controller: ljrk controller: the node controller (deploy/controller).
# Build from the repository root (`make docker` builds every image):
#   docker build -f docker/controller.Dockerfile -t lj-runtimekit/controller:VERSION .
# (VERSION: pyproject.toml's version, the tag the manifests in deploy/ use.)
# Stage 1 builds the project's wheel and installs it with its dependencies into a virtual environment without pip;
# stage 2 copies only that environment onto the slim Python base (no wheel cache, no sources, no build tools).
ARG PYTHON_IMAGE=python:3.11-slim@sha256:3c1dfceb3f1267d4d378e7883cddf35c58757bab98d70bba30b6e02e808fa21d

FROM ${PYTHON_IMAGE} AS build
# WHEELHOUSE: a folder of wheels mounted into the build (scripts/images.sh); pip then installs offline from it.
ARG WHEELHOUSE=
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src/ src/
RUN python -m pip wheel ${WHEELHOUSE:+--no-index --find-links "$WHEELHOUSE"} --no-deps --wheel-dir /wheels . \
 && python -m venv --without-pip /opt/lj-runtimekit \
 && python -m pip --python /opt/lj-runtimekit/bin/python install \
    ${WHEELHOUSE:+--no-index --find-links "$WHEELHOUSE"} /wheels/*.whl \
 && /opt/lj-runtimekit/bin/ljrk --version

FROM ${PYTHON_IMAGE}
# First, ahead of any per-image line: the six images then share this one layer (same instruction, same parent).
COPY --from=build /opt/lj-runtimekit /opt/lj-runtimekit
LABEL org.opencontainers.image.title="lj-runtimekit/controller" \
      org.opencontainers.image.description="LJ RuntimeKit: ljrk controller" \
      org.opencontainers.image.licenses="Apache-2.0"
# Read-only root filesystem in the manifests: no bytecode writes at run time; logs unbuffered.
ENV PATH=/opt/lj-runtimekit/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Non-root: it only talks to the API server.
USER 65532:65532
ENTRYPOINT ["ljrk", "controller"]
