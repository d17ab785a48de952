# LJ RuntimeKit developer entry points. Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck imports unit proto proto-check bench build clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## run: the main job on its embedded default (synthetic cluster, six published policies)
run: $(STAMP)
	$(BIN)/ljrk simulate

## test: every quality gate, then the test suite (what CI runs)
test: lint typecheck imports proto-check unit

lint: $(STAMP)
	$(BIN)/ruff check src tests bench scripts

typecheck: $(STAMP)
	$(BIN)/mypy

imports: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/pytest -q

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

## build: the wheel, into dist/
build: $(STAMP)
	$(BIN)/python -m pip wheel --no-deps --wheel-dir dist .

clean:
	rm -rf $(VENV) dist build out .mypy_cache .ruff_cache .pytest_cache .hypothesis
