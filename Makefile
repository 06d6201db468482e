# Tessel: `make demo` sets everything up and runs the main job; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: demo test bench lint docs fuzz fuzz-models fuzz-weights fuzz-users venv browser clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing Tessel and its dependencies into $(VENV) (first time: several minutes)"
	$(PY) -m pip install --progress-bar on -e '.[dev]'
	@# the TOSA tests' tools, without their pins (pyproject.toml, the tosa-tools extra)
	$(PY) -m pip install --progress-bar on --no-deps tosa-tools==2026.8.0 \
	  tosa-converter-for-tflite==2026.2.0
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m tessel.demo

test: $(STAMP) browser
	$(PY) -m pytest -q -n 2 --dist loadgroup --durations=25 tests

# headless Chromium and its WebDriver (Debian's packages), for the test that opens the HTML
# pages in a browser; installed with apt-get as root, else the test says how and is skipped
browser:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing Debian's chromium and chromium-driver (the browser test of the HTML pages)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    chromium chromium-driver >/dev/null; \
	else echo "no headless Chromium: as root, apt-get install chromium chromium-driver" \
	  "(the browser test of the HTML pages is skipped without it)"; fi

# the long fuzz run (docs/reliability.md): FUZZ_CASES per harness (.tsl reader + simulator,
# IR parser + verifier, asm parser, ONNX / TFLite / TOSA / .pt2 importers; findings are saved under
# tests/fuzz/regressions/), then FUZZ_CASES hostile binaries for the C runtime's loader under
# ASan + UBSan
FUZZ_CASES ?= 100000
fuzz: $(STAMP)
	$(PY) tests/fuzz/run_fuzz.py --cases $(FUZZ_CASES)
	$(PY) tests/fuzz/c_fuzz.py --cases $(FUZZ_CASES)

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --progress-bar off -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m benchmarks.run

# differential fuzzing: 2,000 random models, simulator vs golden (docs/benchmarks.md)
fuzz-models: $(STAMP)
	$(PY) tests/e2e/fuzz_models.py --seeds 2000

# the same with the weight features: 2:4, int4, int16, weight decoder (docs/reliability.md)
fuzz-weights: $(STAMP)
	$(PY) tests/e2e/fuzz_models.py --seeds 1000 --weights

# the models users build: HF transformers, recurrent layers, vision chains (docs/reliability.md)
fuzz-users: $(STAMP)
	$(PY) tests/e2e/fuzz_user_models.py --seeds 300

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir build/site

clean:
	rm -rf $(VENV) build *.egg-info
