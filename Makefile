# Two commands for a newcomer: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test lint unit dev bench fuzz clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

PROVIDER ?= openai-chat

demo: $(VENV)/.installed
	$(PY) -m agentloop.cli.demo --provider $(PROVIDER)

dev: $(VENV)/.installed
	$(VENV)/bin/agentloop dev

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check agentloop tests bench worker.py examples
	$(VENV)/bin/mypy

test: lint
	$(VENV)/bin/pytest

bench: $(VENV)/.installed-dev
	$(PY) -m bench.run

fuzz: $(VENV)/.installed-dev
	AGENTLOOP_FUZZ=long $(VENV)/bin/pytest -m fuzz

unit: $(VENV)/.installed-dev
	$(VENV)/bin/pytest -m "not integration"

clean:
	rm -rf $(VENV) .agentloop .pytest_cache .mypy_cache .ruff_cache
