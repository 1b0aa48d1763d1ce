# The two commands a newcomer needs: `make demo` and `make test` (`make unit` for the fast part).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed-dev
PYTEST_ARGS ?=
# The browser test drives Debian's chromium, never a browser Playwright downloads.
CHROMIUM ?= /usr/bin/chromium

.PHONY: demo test unit lint docs matrix check-java check-protoc check-chromium connect-runtime install clean ui

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

# Kafka Connect 4.3.0 (the default) and 3.9.0 (KERR_CONNECT_VERSION=3.9.0), each cached in its own folder
# under .kerr/connect-runtime/: 4.3's jars and Jetty 12 through pip, 3.9's through pip with Debian's Jetty 9
# (apt-get when root). Both, because make test runs tests/connect/ on each. 4.3's Protobuf converter plugin gets
# its com.google.type classes compiled from googleapis-common-protos' .proto files, with protoc and javac.
connect-runtime: install check-java check-protoc
	$(PY) -m airflow_kerr.local.connect_runtime all

# Debian's protobuf-compiler (protoc 3.21, whose Java code the plugin's protobuf-java 3.25 runs) and a JDK's javac.
PROTOC_PACKAGES = $(strip $(if $(shell command -v protoc),,protobuf-compiler) $(if $(shell command -v javac),,openjdk-17-jdk-headless))
check-protoc:
	@test -z "$(PROTOC_PACKAGES)" || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing what compiles the Protobuf converter's google.type classes: apt-get install $(PROTOC_PACKAGES)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(PROTOC_PACKAGES) >/dev/null; \
	  else \
	    echo "Kafka Connect 4.3's Protobuf converter needs classes compiled with protoc and javac, and $(PROTOC_PACKAGES) is missing. Install it (Debian/Ubuntu: sudo apt-get install $(PROTOC_PACKAGES)) and run make again." >&2; exit 1; \
	  fi; }
	@command -v protoc >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 || { echo "apt-get install $(PROTOC_PACKAGES) did not provide protoc and javac on PATH" >&2; exit 1; }

check-chromium:
	@test -x $(CHROMIUM) || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing Debian's chromium for the browser test: apt-get install chromium"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "The browser test needs chromium at $(CHROMIUM), which was not found. Install it (Debian/Ubuntu: sudo apt-get install chromium) or set CHROMIUM=/path/to/chromium, and run make again." >&2; exit 1; \
	  fi; }
	@test -x $(CHROMIUM) || { echo "apt-get install chromium did not provide $(CHROMIUM)" >&2; exit 1; }

lint: install
	$(VENV)/bin/ruff check airflow_kerr dags tests benchmarks docs
	$(VENV)/bin/ruff format --check airflow_kerr dags tests benchmarks docs
	$(VENV)/bin/mypy

# The documentation site (docs/, Sphinx + MyST, reference from the docstrings) into docs/_build/html;
# any warning fails the build. tests/unit/test_docs.py builds it the same way.
DOCS_ARGS ?=
docs: install
	$(VENV)/bin/sphinx-build -W --keep-going -q -b html $(DOCS_ARGS) docs docs/_build/html
	@echo "The site: docs/_build/html/index.html"

# The whole suite runs in two sessions at once: lint then tests/unit and tests/package (about 4
# minutes: the unit tests are CPU-bound, the wheel test mostly waits on pip installing Airflow from PyPI into
# a clean virtualenv; neither needs the services), then tests/unit and a DagBag of dags/ on one other minor
# line (MATRIX_CI, in its uv virtualenv cached under .kerr/matrix/; about 2.5 minutes), beside the rest
# (mostly waiting on a broker, Spark, Connect or Airflow, about 0.9 of the 2 cores on average, about 13
# minutes). The side session's log is printed at the end; either failing fails the run. With PYTEST_ARGS
# (a part of the suite, say) it is one session after lint, as you asked for.
# The side session then runs tests/connect/ and one guard cycle on Kafka Connect CONNECT_CI (3.9.0; the
# rest of the suite runs on the default, 4.3.0): about 6 more minutes on its own, mostly waiting on the worker.
SIDE_LOG := .kerr/lint-and-unit.log
CONNECT_CI ?= 3.9.0
CONNECT_CI_TESTS ?= tests/connect tests/integration/test_tolerance_guard.py::test_breach_pauses_alerts_and_recovery_resumes
test: install check-java connect-runtime check-chromium
ifeq ($(strip $(PYTEST_ARGS)),)
	@mkdir -p .kerr
	@( $(MAKE) --no-print-directory lint && $(PY) -m pytest tests/unit tests/package -q -p no:cacheprovider --basetemp=.kerr/pytest-unit \
	    && $(PY) tests/matrix/run.py --versions $(MATRIX_CI) --steps import,unit,dagbag \
	    && KERR_CONNECT_VERSION=$(CONNECT_CI) $(PY) -m pytest $(CONNECT_CI_TESTS) -q -p no:cacheprovider --basetemp=.kerr/pytest-connect-$(CONNECT_CI) ) \
	    > $(SIDE_LOG) 2>&1 & side=$$!; \
	echo "lint, tests/unit, tests/package, Airflow $(MATRIX_CI) and Connect $(CONNECT_CI) run beside the rest (pid $$side, log $(SIDE_LOG))"; \
	KERR_CHROMIUM=$(CHROMIUM) $(PY) -m pytest --ignore=tests/unit --ignore=tests/package; rest=$$?; \
	wait $$side; lint_unit=$$?; \
	echo "---------------- lint, tests/unit and tests/package ($(SIDE_LOG)) ----------------"; tail -n 60 $(SIDE_LOG); \
	echo "lint, tests/unit and tests/package: exit $$lint_unit; the rest of the suite: exit $$rest"; \
	test $$rest -eq 0 && test $$lint_unit -eq 0
else
	$(MAKE) --no-print-directory lint
	KERR_CHROMIUM=$(CHROMIUM) $(PY) -m pytest $(PYTEST_ARGS)
endif

# tests/unit without a broker, Spark, Kafka Connect or a browser. Two of its tests start a local Spark
# (marked spark) and one a Kafka Connect JVM that never answers: those are left to `make test`.
UNIT_ARGS ?= -m 'not spark and not connect'
unit: install
	$(PY) -m pytest tests/unit $(UNIT_ARGS) $(PYTEST_ARGS)

# Prove the floor: per Airflow version (the floor, newest 3.2, newest 3.3) its own uv virtualenv under
# .kerr/matrix/ (cached), every module imported, tests/unit, a DagBag of dags/ and one real scheduler +
# triggerer event-driven run; a per-version table at the end. MATRIX_ARGS="--versions 3.2.2 --steps unit".
# MATRIX_CI is make test's other line: the floor, 3.2.2 (pyproject.toml; docs/guides/upgrading.md).
MATRIX_CI ?= 3.2.2
MATRIX_ARGS ?=
matrix: install
	$(PY) tests/matrix/run.py $(MATRIX_ARGS)

demo: install check-java connect-runtime
	$(PY) -m airflow_kerr.local.demo

# A real Airflow (api-server, scheduler, triggerer, dag-processor) on the embedded stack; Ctrl-C stops it all.
ui: install check-java connect-runtime
	$(PY) -m airflow_kerr.local.ui

clean:
	rm -rf $(VENV) .kerr build *.egg-info
