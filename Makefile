# The commands a newcomer types. Everything installs into .venv; the local
# Slurm cluster (scripts/local-slurm) installs its Debian packages itself.
VENV ?= .venv
PY := $(VENV)/bin/python
SYS_PYTHON ?= python3

.PHONY: setup cluster cluster-down demo test lint typecheck unit diagram docs bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(SYS_PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

cluster: setup            ## bring the local Slurm cluster up (installs Debian packages as root)
	$(PY) -m slurm_fsm.localcluster up

cluster-down:
	$(PY) -m slurm_fsm.localcluster down

demo: setup               ## the main job: an example job twice through one persistent allocation
	@eval "$$(scripts/local-slurm up)"; $(PY) -m slurm_fsm demo

lint: setup
	$(VENV)/bin/ruff check slurm_fsm tests scripts benchmarks

typecheck: setup
	$(VENV)/bin/mypy

unit: setup               ## fast tests only (no real cluster)
	$(VENV)/bin/pytest -m "not slurm" -q

test: lint typecheck      ## everything CI runs: lint, types, unit and real-cluster tests, docs
	$(VENV)/bin/pytest -q
	$(MAKE) --no-print-directory docs

diagram: setup            ## regenerate docs/states.md from the machine's edges
	$(PY) scripts/gen-docs.py

docs: setup              ## build the docs site; warnings are errors
	$(VENV)/bin/mkdocs build --strict --quiet --site-dir site

bench: setup              ## benchmarks on the local cluster (figures, not pass/fail)
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) site .mypy_cache .ruff_cache .pytest_cache
