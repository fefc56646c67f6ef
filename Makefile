# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install system-deps demo docs test test-fast lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,probe,service,fleet,lightning,hf,docs]'
	touch $(STAMP)

install: $(STAMP)

# Debian packages the service tests use: chromium (the dashboard in a real browser),
# postgresql (initdb/pg_ctl for the PostgreSQL store tests), prometheus-alertmanager (alerts
# through a real Alertmanager) and prometheus (the Grafana dashboard's queries run against a
# real scrape). Installed when missing and running as root (CI); otherwise those tests skip
# with the reason (they fail under CI=true).
SYSTEM_PACKAGES := chromium postgresql prometheus-alertmanager prometheus
system-deps:
	@if command -v chromium >/dev/null 2>&1 && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
			&& command -v prometheus-alertmanager >/dev/null 2>&1 \
			&& command -v prometheus >/dev/null 2>&1; then \
		true; \
	elif [ "$$(id -u)" = 0 ]; then \
		echo "installing $(SYSTEM_PACKAGES) (apt-get)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null; \
	else \
		echo "note: $(SYSTEM_PACKAGES) missing and not root: their tests will be skipped"; \
	fi

demo: $(STAMP)
	$(VENV)/bin/stragglers demo --out demo-out

# The documentation site (MkDocs + Material): warnings are errors (--strict: broken links and
# anchors included, see mkdocs.yml `validation`; not --quiet, which hides the warnings strict
# mode counts); built into site/ (git-ignored). The CLI
# reference page is generated from the argument parser at build time (tools/docs_cli.py).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# --dist loadscope: each test module runs on one worker, so a module-scoped run (a training
# job, a server, a Dask cluster) is built once; files with slow tests are collected first
# (tests/conftest.py), so the long modules start early and short ones fill both workers.
test: $(STAMP) system-deps docs
	$(VENV)/bin/ruff check src tests bench tools
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -n 2 --dist loadscope --durations=40

# The quick tier: lint, types and the tests not marked slow (no real processes, servers or
# browsers; under 3 minutes on 2 cores). `make test` runs everything.
test-fast: $(STAMP)
	$(VENV)/bin/ruff check src tests bench tools
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -m "not slow"

bench: $(STAMP)
	$(PY) bench/bench_whatif.py

clean:
	rm -rf $(VENV) demo-out site build *.egg-info src/*.egg-info
