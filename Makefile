# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,probe,service]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/stragglers demo --out demo-out

test: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) bench/bench_whatif.py

clean:
	rm -rf $(VENV) demo-out build *.egg-info src/*.egg-info
