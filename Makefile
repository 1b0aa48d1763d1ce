# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed-dev
PYTEST_ARGS ?=

.PHONY: demo test lint check-java install clean

$(PY):
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is required, found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(INSTALLED): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(INSTALLED)

install: $(INSTALLED)

check-java:
	@command -v java >/dev/null 2>&1 || { echo "Java 17 is required by Spark and was not found on PATH. Install it (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) and run make again." >&2; exit 1; }
	@java -version 2>&1 | head -1

lint: install
	$(VENV)/bin/ruff check airflow_kerr dags tests benchmarks
	$(VENV)/bin/ruff format --check airflow_kerr dags tests benchmarks
	$(VENV)/bin/mypy

test: install check-java lint
	$(PY) -m pytest $(PYTEST_ARGS)

demo: install check-java
	$(PY) -m airflow_kerr.local.demo

clean:
	rm -rf $(VENV) .kerr build *.egg-info
