# The two commands from the README: `make run` and `make test`. CI runs `make test` verbatim.
VENV   ?= .venv
PYTHON ?= python3
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed-stamp
CONFIG ?= porteiro.example.toml

.PHONY: install run test unit lint format services bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: install
	@echo "Porteiro on http://127.0.0.1:8000 (SQLite store ./porteiro.db, config $(CONFIG))."
	@echo "In another terminal, send signed test webhooks with:"
	@echo "  $(BIN)/porteiro --config $(CONFIG) simulate --url http://127.0.0.1:8000 --source standard --count 20 --duplicates 0.3 --shuffle"
	@echo "then look at them:  $(BIN)/porteiro --config $(CONFIG) events list"
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

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP) services
	@bench/ensure-tools.sh
	$(BIN)/python bench/run.py

unit: install
	$(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal tests/unit

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
