# Naiad: `make serve` and `make test` are the two commands a fresh machine needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
REPO   ?= examples/model_repository

.PHONY: serve test models lint bench-http clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# One venv; a stamp per set of extras so `make serve` stays lean and `make test` adds the test tools.
$(VENV)/.serve: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[examples]'
	touch $@

$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@

models: $(VENV)/.serve
	$(BIN)/python scripts/build_examples.py

serve: $(VENV)/.serve
	$(BIN)/python scripts/build_examples.py
	$(BIN)/naiad serve --model-repository $(REPO)

lint: $(VENV)/.test
	$(BIN)/ruff check server operator tests scripts benchmarks e2e
	$(BIN)/lint-imports

test: $(VENV)/.test lint
	$(BIN)/python scripts/build_examples.py
	$(BIN)/python -m pytest

bench-http: $(VENV)/.test
	$(BIN)/python benchmarks/http_infer/run.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
