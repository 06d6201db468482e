# Tessel: `make demo` sets everything up and runs the main job; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint docs fuzz fuzz-models venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing Tessel and its dependencies into $(VENV) (first time: several minutes)"
	$(PY) -m pip install --progress-bar on -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m tessel.demo

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadgroup tests

# the long fuzz run (docs/reliability.md): FUZZ_CASES per harness (.tsl reader + simulator,
# IR parser + verifier, asm parser); findings are saved under tests/fuzz/regressions/
FUZZ_CASES ?= 100000
fuzz: $(STAMP)
	$(PY) tests/fuzz/run_fuzz.py --cases $(FUZZ_CASES)

bench: $(STAMP)
	$(PY) -m benchmarks.run

# differential fuzzing: 2,000 random models, simulator vs golden (docs/benchmarks.md)
fuzz-models: $(STAMP)
	$(PY) tests/e2e/fuzz_models.py --seeds 2000

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir build/site

clean:
	rm -rf $(VENV) build *.egg-info
