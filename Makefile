# The README's two commands: `make demo` (main job on embedded data) and `make test`.
# Each creates .venv if missing and installs into it once; running again installs nothing
# unless pyproject.toml or constraints.txt changed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test bench

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
