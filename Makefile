# Two commands for a newcomer: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-under-load lint unit dev bench fuzz soak docs screenshots constraints clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Installs take the versions CI tested (constraints.txt); pyproject.toml keeps ranges for users.
CONSTRAINTS := constraints.txt

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS) | $(PY)
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(CONSTRAINTS) | $(PY)
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) -e '.[dev]'
	touch $@ $(VENV)/.installed

PROVIDER ?= openai-chat

demo: $(VENV)/.installed
	$(PY) -m agentloop.cli.demo --provider $(PROVIDER)

dev: $(VENV)/.installed
	$(VENV)/bin/agentloop dev

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check agentloop tests bench worker.py examples scripts
	$(VENV)/bin/mypy

test: lint
	$(VENV)/bin/pytest

# The tests as `make test` runs them, beside BUSY (default 6) CPU-burning processes: a 2-core CI
# machine running other work. TESTS= narrows it (`make test-under-load TESTS=tests/crash`);
# AGENTLOOP_TEST_PATIENCE=2 doubles every test's ceiling on a slower machine still.
BUSY ?= 6
TESTS ?=
test-under-load: $(VENV)/.installed-dev
	$(PY) scripts/busy.py --burners $(BUSY) -- $(VENV)/bin/pytest $(TESTS)

bench: $(VENV)/.installed-dev
	$(PY) -m bench.run

fuzz: $(VENV)/.installed-dev
	AGENTLOOP_FUZZ=long $(VENV)/bin/pytest -m fuzz

# Runs decided by people while read, every history replayed (issue 42): over a thousand runs.
soak: $(VENV)/.installed-dev
	AGENTLOOP_FUZZ=long $(VENV)/bin/pytest -m soak

unit: $(VENV)/.installed-dev
	$(VENV)/bin/pytest -m "not integration"

# The documentation site from docs/ into site/ (`.venv/bin/mkdocs serve` to read it locally).
docs: $(VENV)/.installed-dev
	$(VENV)/bin/mkdocs build --strict

# docs/images/inbox.png and run.png, from scripted runs (Playwright, Chromium at /usr/bin/chromium).
screenshots: $(VENV)/.installed-dev
	$(PY) scripts/inbox_screenshots.py

# A fresh venv takes the newest versions pyproject.toml's ranges allow; its freeze is the new pin.
constraints:
	rm -rf .venv-constraints
	$(PYTHON) -m venv .venv-constraints
	.venv-constraints/bin/python -m pip install --quiet --upgrade pip
	.venv-constraints/bin/python -m pip install --quiet -e '.[dev]'
	{ sed -n '1,3p' $(CONSTRAINTS); .venv-constraints/bin/python -m pip freeze --exclude-editable; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)
	rm -rf .venv-constraints

clean:
	rm -rf $(VENV) .agentloop .pytest_cache .mypy_cache .ruff_cache
