# make run   : create .venv (torch CPU first), install agentcir, run the default recipe on the bundled demo
# make test  : install the dev extras and run the test suite
# make bench : run the pytest-benchmark suites (results saved as JSON under benchmarks/results/)
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
TORCH  ?= torch==2.13.0

.PHONY: run test bench venv clean

$(VENV)/.torch:
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH)
	touch $@

$(VENV)/.run-deps: setup.py $(VENV)/.torch
	$(PIP) install -q -e '.[catalog]'
	touch $@

$(VENV)/.dev-deps: setup.py $(VENV)/.torch
	$(PIP) install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.run-deps

run: $(VENV)/.run-deps
	$(VENV)/bin/agentcir run $(ARGS)

test: $(VENV)/.dev-deps
	$(PY) -m pytest -q $(PYTEST_ARGS)

bench: $(VENV)/.dev-deps
	mkdir -p benchmarks/results
	$(PY) -m pytest benchmarks -q --benchmark-only --benchmark-json=benchmarks/results/latest.json $(PYTEST_ARGS)
	$(PY) benchmarks/report.py benchmarks/results/latest.json

clean:
	rm -rf runs .pytest_cache build *.egg-info
