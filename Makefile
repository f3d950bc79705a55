# The two commands from the README: `make run` and `make test`. CI runs `make test` verbatim.
VENV   ?= .venv
PYTHON ?= python3
BIN     = $(VENV)/bin
CONFIG ?= porteiro.example.toml

# One virtual environment, created once (its python is the mark), and two installs in it:
# `make run` needs only the runtime dependencies (.), everything else the test and lint
# toolchain too (.[dev]). A stamp per install, newer than pyproject.toml once done; .[dev]
# includes ., so installing it stamps both and `make run` after `make test` installs
# nothing more.
RUN_STAMP = $(VENV)/.installed-run-stamp
DEV_STAMP = $(VENV)/.installed-dev-stamp

.PHONY: install run test unit lint format services bench clean screenshots

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $(RUN_STAMP)

$(DEV_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(DEV_STAMP) $(RUN_STAMP)

install: $(DEV_STAMP)

run: $(RUN_STAMP)
	@echo "Porteiro on http://127.0.0.1:8000 (SQLite store ./porteiro.db, config $(CONFIG))."
	@echo "In another terminal, send signed test webhooks with:"
	@echo "  $(BIN)/porteiro --config $(CONFIG) simulate --url http://127.0.0.1:8000 --source standard --count 20 --duplicates 0.3 --shuffle"
	@echo "then look at them:  $(BIN)/porteiro --config $(CONFIG) events list"
	@echo "or in the console:  http://127.0.0.1:8000/ui (log in with the config's admin token)"
	$(BIN)/porteiro --config $(CONFIG) serve

services:
	@scripts/ensure-services.sh

lint: install
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/mypy

format: install
	$(BIN)/ruff check --fix src tests bench examples
	$(BIN)/ruff format src tests bench examples

# Two test workers (pytest-xdist): the suite mostly waits on servers and processes, so a
# second one halves its time on 2 cores. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2

test: install services lint
	$(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal

# The side-by-side benchmark (docs/performance.md): <= 10 minutes on 2 cores; BENCH_QUICK=1
# for a 1-2 minute smoke run, BENCH_SCALE=1000000 to skip the 5 M stored-events step.
BENCH_STAMP = $(VENV)/.bench-installed-stamp

$(BENCH_STAMP): $(DEV_STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP) services
	@bench/ensure-tools.sh
	$(BIN)/python bench/run.py

# The console's pictures in docs/ui/ (docs/ui.md shows them), taken by its browser test.
screenshots: install services
	PORTEIRO_TEST_SCREENSHOTS=docs/ui $(BIN)/pytest -q tests/e2e/test_ui_browser.py

unit: install
	$(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal tests/unit

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
