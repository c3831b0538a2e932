# The README's two commands: `make demo` (main job on embedded data) and `make test`.
# Each creates .venv if missing and installs into it once; running again installs nothing
# unless pyproject.toml or constraints.txt changed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test bench docs

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# PyTorch first, at the build constraints.txt pins (the CPU build on this disk), then the
	# package under the same constraints so that nothing can pull another build.
	$(PY) -m pip install --quiet -c constraints.txt torch
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/mianalysis demo

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/bench_estimators.py
	$(PY) benchmarks/bench_sampler.py --paper-scale
	$(PY) benchmarks/bench_memory.py
	$(PY) benchmarks/bench_permutations.py

# The documentation site: mkdocs.yml and docs/, built into site/ with every warning an error.
# Its own venv (.venv-docs): mkdocstrings reads the package's source statically (griffe) and
# needs neither PyTorch nor the package installed.
DOCS_VENV := .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.installed

$(DOCS_STAMP): pyproject.toml constraints.txt
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/python -m pip install --quiet -c constraints.txt "mkdocs>=1.6" "mkdocs-material>=9.5" "mkdocstrings[python]>=0.26"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(DOCS_VENV)/bin/python docs/gen_cli_reference.py --check
	$(DOCS_VENV)/bin/mkdocs build --strict
