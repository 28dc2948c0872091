# Every entry point of docpipe. `make run` and `make test` work on a fresh Debian machine:
# they install what is missing (system packages, the venv) before doing their job.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PACKAGES := libs/common services/api services/fake-llm
PYPROJECTS := $(addsuffix /pyproject.toml,$(PACKAGES))
PYTEST_ARGS ?=

.PHONY: run test lint fmt deps venv clean constraints

run: deps venv ## bring the local stack up, process the sample contracts, stop
	$(BIN)/docpipe demo

test: deps venv ## the whole suite: unit, integration (real PostgreSQL, Redis, workers), chaos
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: venv ## ruff and mypy (strict on libs/common)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy libs/common/src services/api/src services/fake-llm/src

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
	rm -rf $(VENV) .local .pytest_cache .mypy_cache .ruff_cache

constraints: venv ## re-pin every third-party version the venv holds
	{ echo "# Pinned versions of everything the venv installs; regenerate with 'make constraints'."; \
	  $(BIN)/python -m pip freeze --exclude-editable | grep -v '^docpipe'; } > constraints.txt
