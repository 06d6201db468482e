# Tessel: `make demo` sets everything up and runs the main job; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint docs venv clean

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

bench: $(STAMP)
	$(PY) -m benchmarks.run

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir build/site

clean:
	rm -rf $(VENV) build *.egg-info
