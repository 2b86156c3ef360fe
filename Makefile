# Hermes developer entry points. Every target works on a fresh clone: the virtual
# environment is created and the package installed on first use (stamp file below).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test lint demo bench clean services

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,postgres]'
	touch $(STAMP)

# Real services the suite talks to: PostgreSQL binaries and the MCP reference servers.
services: $(STAMP)
	scripts/ensure-postgres.sh
	scripts/install-mcp-test-servers.sh

test: $(STAMP) services
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

demo: $(STAMP)
	$(BIN)/hermes demo

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache
