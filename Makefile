# A fresh machine: `make install`, then `. .venv/bin/activate` puts `tosca` on the shell's PATH
# (README, "Set up"); `make test` and `make demo` use .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Real data for the demo: $TOSCA_DATA, else ../shared/data when it exists.
TOSCA_DATA ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data),)
export TOSCA_DATA

.PHONY: test test-heavy test-realdata demo lint install clean gpu-bundle gpu-check

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)
	@echo "tosca is installed in $(VENV)/bin: \`. $(VENV)/bin/activate\` puts it on this shell's PATH"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# `make test`: everything but the long tests (marker heavy: whole suites, Dask clusters, commands
# in subprocesses, the GPU check's rehearsal), which `make test-heavy` runs, and the checks on the
# real archives (marker realdata), which `make test-realdata` runs; CI (.ci/run) runs all three.
# The fast tests run in one worker process per core (pytest-xdist, at most 4), a test file's tests
# in one worker; the heavy ones run one at a time, as their time bounds are measured that way.
TEST_WORKERS ?= logical
test: lint
	HF_HUB_OFFLINE=1 $(BIN)/pytest -m "not realdata and not heavy" -n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile

test-heavy: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/pytest -m "heavy and not realdata"

test-realdata: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/pytest -m realdata

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/tosca demo

# A borrowed GPU machine (README, "On a GPU"): the bundle is made here, the check runs there with
# the image's own python3 and torch (no venv): `make gpu-check` needs nothing else.
gpu-bundle: $(STAMP)
	$(BIN)/python benchmarks/gpu_bundle.py --out gpu-bundle

gpu-check:
	$(PYTHON) benchmarks/gpu_check.py --bundle gpu-bundle

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache gpu-bundle
