# make run   : create .venv (torch CPU first), install agentcir, run the default recipe on the bundled demo
# make test  : install the dev extras and run the test suite on every core (then the open_clip tests in .venv-clip)
# make lint  : ruff check . and ruff format --check . (ruff.toml)
# make docs  : build the documentation site into site/ (mkdocs.yml, strict)
# make bench : run the pytest-benchmark suites (results saved as JSON under benchmarks/results/)
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
TORCH  ?= torch==2.13.0
# open_clip needs the torchvision built for $(TORCH); beside transformers it breaks `import transformers`,
# so the open_clip backend is tested in its own environment
TORCHVISION ?= torchvision==0.28.0
VENV_CLIP   ?= .venv-clip

.PHONY: run test test-clip bench venv clean lint docs

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

# the suite runs on every core (pytest-xdist, JOBS workers; `loadgroup`: the tests marked
# xdist_group("name") share one worker: the Ray tests, one local Ray at a time); the tests that
# need an idle machine (marker `serial`) run alone afterwards, collected from the files that carry
# the marker only
JOBS ?= auto
SERIAL_FILES = $(shell grep -rlE '@pytest\.mark\.serial|^pytestmark.*mark\.serial' tests --include='test_*.py')
test: $(VENV)/.dev-deps
	$(PY) -m pytest -q -n $(JOBS) --dist loadgroup -m "not serial" $(PYTEST_ARGS)
	$(if $(SERIAL_FILES),$(PY) -m pytest -q -m serial $(PYTEST_ARGS) $(SERIAL_FILES))
	$(MAKE) --no-print-directory test-clip

lint: $(VENV)/.dev-deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

docs: $(VENV)/.dev-deps
	$(VENV)/bin/mkdocs build --strict --site-dir site

$(VENV_CLIP)/.deps: setup.py
	python3 -m venv $(VENV_CLIP)
	$(VENV_CLIP)/bin/python -m pip install -q --disable-pip-version-check $(TORCH)
	$(VENV_CLIP)/bin/python -m pip install -q --disable-pip-version-check open_clip_torch $(TORCHVISION)
	$(VENV_CLIP)/bin/python -m pip install -q --disable-pip-version-check -e . pytest pytest-timeout
	touch $@

test-clip: $(VENV_CLIP)/.deps
	AGENTCIR_REQUIRE_OPEN_CLIP=1 $(VENV_CLIP)/bin/python -m pytest -q tests/components/encoders/test_open_clip.py

bench: $(VENV)/.dev-deps
	mkdir -p benchmarks/results
	$(PY) -m pytest benchmarks -q --benchmark-only --benchmark-json=benchmarks/results/latest.json $(PYTEST_ARGS)
	$(PY) benchmarks/report.py benchmarks/results/latest.json

clean:
	rm -rf runs site .pytest_cache build *.egg-info $(VENV_CLIP)
