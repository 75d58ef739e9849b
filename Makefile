# Two commands a newcomer needs: `make demo` and `make test`. Everything else is set-up.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench help clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,demo]'
	touch $(STAMP)

demo: $(STAMP) ## run the local demo on the emulated GPU cluster
	$(BIN)/python -m emulator.demo

lint: $(STAMP) ## ruff lint and format check, shellcheck of the kind scripts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/shellcheck -x kind/*.sh

typecheck: $(STAMP) ## mypy --strict
	$(BIN)/mypy

unit: $(STAMP) ## the pytest suite only
	$(BIN)/pytest

test: lint typecheck unit ## lint, type checks and the whole test suite

bench: $(STAMP) ## run the benchmarks; each prints its numbers
	@for b in benchmarks/bench_*.py; do [ -e "$$b" ] || continue; echo "== $$b"; $(BIN)/python -m "benchmarks.$$(basename $$b .py)" || exit 1; done

clean: ## remove the virtualenv
	rm -rf $(VENV)
