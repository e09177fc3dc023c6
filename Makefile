# Sokovan development tasks. `make test` works on a fresh clone: it creates the venv, makes sure
# PostgreSQL/Redis/etcd answer (scripts/services.py) and that chromium and promtool are installed
# (scripts/test-tools.sh), then lints, type-checks and runs pytest.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Reinstalled whenever pyproject.toml changes (or the venv is missing).
VENV_STAMP := $(VENV)/.sokovan-installed
LINT_PATHS := src tests migrations
PYTEST_ARGS ?=
# pytest processes, each with its own database and Redis/etcd prefixes, a test file whole on one
# (`--dist loadfile`). Most of a test's time is spent waiting for daemons and timers, not on a core.
TEST_WORKERS ?= 2

export PIP_DISABLE_PIP_VERSION_CHECK := 1
export PIP_NO_INPUT := 1

.PHONY: help venv services services-down services-status test-tools lint typecheck test dev dev-reset bench clean distclean

help:
	@echo "make venv           create $(VENV) and install sokovan with the dev extras"
	@echo "make services       make sure PostgreSQL, Redis and etcd answer; write .env.services"
	@echo "make services-down  stop the throwaway servers 'make services' started"
	@echo "make test-tools     make sure chromium, chromedriver and promtool are installed (some tests drive them)"
	@echo "make lint           ruff check + ruff format --check"
	@echo "make typecheck      mypy (strict, package sokovan)"
	@echo "make test           venv + services + lint + typecheck + pytest (TEST_WORKERS=2, PYTEST_ARGS=...)"
	@echo "make dev            run 'sokovan dev' (manager + 2 agents on this machine)"
	@echo "make dev-reset      'make dev' from an empty state: new dev database, agents' work dirs removed"
	@echo "make bench          manager + hollow fleet: placement and start-up throughput, as JSON"
	@echo "make clean          stop throwaway servers, remove caches and build output"
	@echo "make distclean      clean + remove $(VENV)"

venv: $(VENV_STAMP)

$(VENV_STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "sokovan needs Python >= 3.11; set PYTHON=python3.11 or newer")'
	@if [ ! -x $(BIN)/python ] || ! $(BIN)/python -c 'import sys' >/dev/null 2>&1; then \
		echo "creating $(VENV) with $$($(PYTHON) --version)"; \
		rm -rf $(VENV); \
		$(PYTHON) -m venv $(VENV); \
	fi
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $@

services: venv
	$(BIN)/python scripts/services.py up

services-down:
	@if [ -x $(BIN)/python ]; then py=$(BIN)/python; else py=$(PYTHON); fi; \
	$$py scripts/services.py down

services-status:
	@if [ -x $(BIN)/python ]; then py=$(BIN)/python; else py=$(PYTHON); fi; \
	$$py scripts/services.py status

test-tools:
	scripts/test-tools.sh
	scripts/bai-client.sh

lint: venv
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)

typecheck: venv
	$(BIN)/mypy

test: venv services test-tools lint typecheck
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

dev: venv
	$(BIN)/sokovan dev

dev-reset: venv
	$(BIN)/sokovan dev --fresh

# A real manager against a hollow fleet (BENCH_AGENTS, BENCH_SESSIONS, ... : see scripts/bench).
bench: venv services
	$(BIN)/python -m scripts.bench

clean: services-down
	rm -rf .dev/services .env.services build dist .mypy_cache .ruff_cache .pytest_cache src/*.egg-info
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf $(VENV)
