# LJ RuntimeKit developer entry points. Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)

.PHONY: run test test-k8s deps-check lock lock-check lint typecheck imports docs unit proto proto-check bench build docker images deploy render delete clean

# The venv holds exactly requirements/dev.lock (hashes checked; it includes the build backend), then the project
# itself, editable, with no dependency and no build isolation: nothing unlocked is installed. `make lock` remakes the
# locks after a change to pyproject.toml's requirements; `make lock-check` (in `make test`) says when they disagree.
LOCK := requirements/dev.lock
$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

## run: the whole stack on this machine (ljrk up: simulated nodes, scheduler, controller, a short workload, report)
run: $(STAMP)
	$(BIN)/ljrk up

## test: every quality gate, then the test suite (what CI runs)
test: lint typecheck imports proto-check deps-check lock-check docs unit

## deps-check: the Kubernetes version selection agrees (hack/download-deps.sh --verify: pyproject.toml, the installed
##             client, deploy/scheduler and hack/kubernetes-version, the live tests' version)
deps-check: $(STAMP)
	$(BIN)/python scripts/download_deps.py --verify

## lock: regenerate requirements/{dev,runtime,build}.lock from pyproject.toml with uv, hashes included (needs the
##       package index; LOCK_ARGS=--upgrade takes the newest allowed versions instead of keeping the locked ones)
## lock-check: the locks agree with pyproject.toml for every supported Python, and docker/*.Dockerfile's base is
##             hack/base-images.txt's digest pin (scripts/supply_chain.py check; no network)
LOCK_ARGS ?=
lock: $(STAMP)
	$(BIN)/python scripts/supply_chain.py lock $(LOCK_ARGS)

lock-check: $(STAMP)
	$(BIN)/python scripts/supply_chain.py check

lint: $(STAMP)
	$(BIN)/ruff check src tests bench scripts deploy

typecheck: $(STAMP)
	$(BIN)/mypy

imports: $(STAMP)
	$(BIN)/lint-imports

## docs: the documentation site (mkdocs.yml: docs/, its home page README.md) into build/site; --strict fails on a
##       broken link or anchor, a missing snippet, or a page of docs/ the nav leaves out
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

unit: $(STAMP)
	$(BIN)/pytest -q --durations=20

## test-k8s: the whole live suite (tests marked k8s, kubelet or images) on one Kubernetes version built from Go
##           modules, its counts recorded in docs/compatibility.md (root; K8S_VERSION=1.35.4, or all; default: the
##           selected version, hack/kubernetes-version). scripts/test_k8s.py says what it does.
K8S_VERSION ?=
test-k8s: $(STAMP) images
	$(BIN)/python scripts/test_k8s.py $(K8S_VERSION)

## proto: regenerate src/adapters/grpc/_pb from proto/ (commit the result)
proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

## proto-check: generated code matches proto/ (drift) and our protos only add to the baseline (compat)
proto-check: $(STAMP)
	$(BIN)/python scripts/gen_proto.py --check
	$(BIN)/python scripts/check_proto_compat.py

## bench: trace-replay fidelity and speed on the Alibaba trace (minutes; not part of `test`)
bench: $(STAMP)
	$(BIN)/python bench/trace_replay.py --jobs 2

## build: verify the Kubernetes version selection (hack/download-deps.sh), then the wheel, into dist/ (built
##        with the locked setuptools of .venv, no build isolation: nothing unlocked is fetched)
build: $(STAMP)
	$(BIN)/python scripts/download_deps.py --verify
	$(BIN)/python -m pip wheel --no-deps --no-build-isolation --wheel-dir dist .

## docker: one image per entrypoint, lj-runtimekit/<image>:$(VERSION) (REGISTRY=host/path prefixes the names)
## images: the same six images without Docker or a registry (root): buildah on a local mmdebstrap base, written
##         as dist/images/<image>.tar (docker-archive; scripts/images.sh, cached by a hash of the inputs), each
##         with its CycloneDX SBOM, dist/images/<image>.sbom.cdx.json (docs/security.md#supply-chain).
##         `make docker BUILDER=buildah` does the same.
IMAGES        := scheduler device-plugin exporter controller runtime job-agent
DOCKER        ?= docker
BUILDER       ?= docker
REGISTRY      ?=
IMAGE_PREFIX  := $(if $(REGISTRY),$(REGISTRY)/,)lj-runtimekit/
DOCKER_IMAGES := $(addprefix docker-,$(IMAGES))
.PHONY: $(DOCKER_IMAGES)

ifeq ($(BUILDER),buildah)
docker: images
else
docker: $(DOCKER_IMAGES)
endif

images: $(STAMP)
	PYTHON=$(BIN)/python IMAGE_PREFIX=$(IMAGE_PREFIX) bash scripts/images.sh build

$(DOCKER_IMAGES): docker-%:
	$(DOCKER) build -f docker/$*.Dockerfile -t $(IMAGE_PREFIX)$*:$(VERSION) .

## deploy: apply deploy/ to kubectl's current cluster (DEPLOY_ARGS, e.g. --scheduler-mode=standalone --dry-run;
##         COMPONENT=a,b for some components only)
## render: print the manifests deploy would apply;  delete: delete them
## deploy-<component>, render-<component>, delete-<component>: one component of deploy/ (DEPLOY_COMPONENTS)
KUBECTL     ?= $(BIN)/kubectl
DEPLOY_ARGS ?=
COMPONENT   ?=
DEPLOY_COMPONENTS := runtime deviceplugin exporter scheduler controller admission monitoring dra
DEPLOY_ONLY = $(if $(COMPONENT),--components=$(COMPONENT))
.PHONY: $(addprefix deploy-,$(DEPLOY_COMPONENTS)) $(addprefix render-,$(DEPLOY_COMPONENTS)) $(addprefix delete-,$(DEPLOY_COMPONENTS))

deploy: $(STAMP)
	KUBECTL=$(KUBECTL) bash deploy/deploy-all.sh deploy $(DEPLOY_ONLY) $(DEPLOY_ARGS)

render: $(STAMP)
	@KUBECTL=$(KUBECTL) bash deploy/deploy-all.sh render $(DEPLOY_ONLY) $(DEPLOY_ARGS)

delete: $(STAMP)
	KUBECTL=$(KUBECTL) bash deploy/deploy-all.sh delete $(DEPLOY_ONLY) $(DEPLOY_ARGS)

$(addprefix deploy-,$(DEPLOY_COMPONENTS)): deploy-%: $(STAMP)
	KUBECTL=$(KUBECTL) bash deploy/deploy-all.sh deploy --components=$* $(DEPLOY_ARGS)

$(addprefix render-,$(DEPLOY_COMPONENTS)): render-%: $(STAMP)
	@KUBECTL=$(KUBECTL) bash deploy/deploy-all.sh render --components=$* $(DEPLOY_ARGS)

$(addprefix delete-,$(DEPLOY_COMPONENTS)): delete-%: $(STAMP)
	KUBECTL=$(KUBECTL) bash deploy/deploy-all.sh delete --components=$* $(DEPLOY_ARGS)

clean:
	rm -rf $(VENV) dist build out .mypy_cache .ruff_cache .pytest_cache .hypothesis
