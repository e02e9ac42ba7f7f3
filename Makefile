# Naiad: `make serve` and `make test` are the two commands a fresh machine needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
REPO   ?= examples/model_repository

.PHONY: serve test models lint fuzz conformance bench-http bench-density clean constraints manifests chart-lint images test-operator-chaos test-operator-listing

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# One venv; a stamp per set of extras so `make serve` stays lean and `make test` adds the test tools.
$(VENV)/.serve: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[examples]'
	touch $@

# --no-compile: pip would compile every module of every package (~1 CPU-min, torch's mostly); the
# tests compile and cache only what they import (see `test`).
$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --no-compile -e '.[test]'
	touch $@

models: $(VENV)/.serve
	$(BIN)/python scripts/build_examples.py

serve: $(VENV)/.serve
	$(BIN)/python scripts/build_examples.py
	$(BIN)/naiad serve --model-repository $(REPO)

lint: $(VENV)/.test
	$(BIN)/ruff check server operator tests scripts benchmarks e2e conformance
	$(BIN)/lint-imports
	$(BIN)/python -m mypy

# Most tests wait on servers they started, not on the CPU: three processes share two cores well.
# Bytecode is cached even where the environment asks Python not to (PYTHONDONTWRITEBYTECODE, set on
# CI machines and in our images): without it each of the suite's hundreds of servers compiles naiad's
# modules again (~0.2 CPU-s a start) and each pytest worker rewrites every test module's asserts
# (~10 CPU-s).  The caches are __pycache__ folders, ignored by git.
TEST_WORKERS ?= 3
lint test: export PYTHONDONTWRITEBYTECODE :=
test: $(VENV)/.test lint
	$(BIN)/python scripts/build_examples.py
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

# Generated malformed requests (tests/fuzz: HTTP and gRPC inference, repository and shared memory APIs) in
# the full profile, over 10,000 of them, bounded in time; the last line is `N requests, M 5xx, K crashes`.
# `make test` runs the same tests in a small profile.
fuzz: $(VENV)/.test
	$(BIN)/python -m tests.fuzz.run

# The operator under traffic and faults (issue 20), long profile: every scenario, every stage of the
# operator kills; `make test` runs the short one (scenario 1, and 5 at one stage). Prints requests
# sent, failed and the time to converge per scenario (benchmarks/operator_chaos/README.md).
CHAOS_REPORT := $(CURDIR)/.pytest_cache/chaos-report.txt
test-operator-chaos: $(VENV)/.test
	mkdir -p $(dir $(CHAOS_REPORT)) && rm -f $(CHAOS_REPORT)
	NAIAD_CHAOS_PROFILE=long NAIAD_CHAOS_REPORT=$(CHAOS_REPORT) $(BIN)/python -m pytest tests/operator/test_chaos.py -q
	cat $(CHAOS_REPORT)

# A repository of 5,000 models end to end on the simulated cluster (sync Job -> listing ConfigMap ->
# operator -> InferenceService status and the pods); `make test` runs the same test with 300.
test-operator-listing: $(VENV)/.test
	NAIAD_LISTING_MODELS=5000 $(BIN)/python -m pytest tests/operator/test_sync_jobs.py -q -k large_listing

# NVIDIA's own client examples, Python-backend examples and qa tests, run unchanged against naiad serve
# (not part of `make test`: it needs extracted checkouts of triton-inference-server/client, /python_backend
# and /server), e.g. make conformance CLIENT=/tmp/nv/client PYBACKEND=/tmp/nv/python_backend SERVER=/tmp/nv/server
# (FRONTEND_WORKERS=2 serves every suite with two frontend workers and the engine)
$(VENV)/.conformance: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,conformance]'
	touch $@

conformance: $(VENV)/.conformance
	$(BIN)/python conformance/run.py --client $(CLIENT) --python-backend $(PYBACKEND) --server $(SERVER) \
		$(if $(FRONTEND_WORKERS),--frontend-workers $(FRONTEND_WORKERS))

bench-http: $(VENV)/.test
	$(BIN)/python benchmarks/http_infer/run.py

# 200 models, 3x the memory budget of 3 pods on the simulated cluster, Zipf traffic (issue 25; about
# 5 minutes; figures in benchmarks/density/README.md).
bench-density: $(VENV)/.test
	$(BIN)/python benchmarks/density/run.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# ---- packaging (issue 9): images, chart, plain manifests ------------------------------------------------
PYTHON312 ?= python3.12
VERSION   ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)

# Exact versions the images install (constraints/images.txt), resolved from pyproject.toml on PyPI for the
# images' CPython 3.12; run after changing a dependency (tests/packaging fails until then).
constraints:
	$(PYTHON312) constraints/lock.py

# The chart's copy of crds/ (files/crds/, rendered by templates/crds.yaml) and deploy/naiad-operator.yaml (the chart rendered with its defaults, for
# kubectl apply without Helm); run after changing crds/ or the chart (tests/packaging fails until then).
manifests: $(VENV)/.test
	cp crds/*.yaml charts/naiad-operator/files/crds/
	$(BIN)/python -c 'from tests.packaging.chart import write_manifests; write_manifests()'

# The chart (helm lint, schema, kubernetes-validate, RBAC against the operator's recorded traffic), the
# Dockerfiles (hadolint, pins) and the example manifests; also part of `make test`.
chart-lint: $(VENV)/.test
	$(BIN)/python -m pytest tests/packaging -q

# Needs a Docker engine (none runs on this project's machines: the tests check the Dockerfiles instead).
images:
	docker build -f Dockerfile.server --target cpu -t naiad/server:$(VERSION)-cpu .
	docker build -f Dockerfile.server -t naiad/server:$(VERSION) .
	docker build -f Dockerfile.operator -t naiad/operator:$(VERSION) .
