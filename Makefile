# Two commands do everything on a fresh machine: `make test` and `make demo`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Real data for the demo: $TOSCA_DATA, else ../shared/data when it exists.
TOSCA_DATA ?= $(if $(wildcard ../shared/data),$(abspath ../shared/data),)
export TOSCA_DATA

.PHONY: test demo lint install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	HF_HUB_OFFLINE=1 $(BIN)/pytest

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/tosca demo

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
