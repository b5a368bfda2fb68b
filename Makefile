# Set-up and the two commands the README names: `make demo` and `make test`.
# Both create (or reuse) a project-local .venv; prerequisites are Python 3.11+ and Java 17+.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: demo test test-airflow-lowest lint typecheck check-java clean bench dist dist-check jars test-spark-versions

check-java:
	@command -v java >/dev/null 2>&1 || { echo "Java 17 or newer is required (Spark runs on the JVM): install a JDK, e.g. 'apt-get install openjdk-17-jdk-headless'"; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	 if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then echo "Java 17 or newer is required, found: $$(java -version 2>&1 | head -1)"; exit 1; fi
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || { echo "Python 3.11 or newer is required"; exit 1; }

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: check-java $(STAMP)
	$(BIN)/python -m airflow_eod.examples.demo

# The Delta Spark jars (not on PyPI) for the `delta_spark` tier, fetched once with Maven into
# ~/.cache/airflow-eod/jars (airflow_eod/spark/jars.py); a second run fetches nothing. Without
# Maven the tier skips and says why (CI fails instead). `make demo` needs none of this.
jars: $(STAMP)
	@$(BIN)/python -m airflow_eod.spark.jars >/dev/null || echo "the delta_spark tier will be skipped (see above)"

test: check-java $(STAMP) jars
	$(BIN)/ruff check airflow_eod dags tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The `airflow` tier again on the lowest Airflow release pyproject.toml admits (CI runs it
# after `make test`; the highest is the one `make test` installs).
AIRFLOW_LOWEST ?= 3.1.8
LOWEST_VENV := .venv-airflow-$(AIRFLOW_LOWEST)
LOWEST_STAMP := $(LOWEST_VENV)/.installed

$(LOWEST_STAMP): pyproject.toml
	$(PYTHON) -m venv $(LOWEST_VENV)
	$(LOWEST_VENV)/bin/pip install --quiet --upgrade pip
	$(LOWEST_VENV)/bin/pip install --quiet -e '.[dev]' 'apache-airflow[postgres]==$(AIRFLOW_LOWEST)'
	touch $(LOWEST_STAMP)

test-airflow-lowest: check-java $(LOWEST_STAMP)
	$(LOWEST_VENV)/bin/python -c 'import airflow; assert airflow.__version__ == "$(AIRFLOW_LOWEST)", airflow.__version__'
	$(LOWEST_VENV)/bin/python -m pytest -m "airflow and not scheduler and not cluster" $(PYTEST_ARGS)

# The spark, delta_spark and cluster tiers on the lowest Spark pyproject.toml admits and on
# Spark 3.5 with Delta 3.3 (a cluster's release), each in its own venv (tests/spark_versions.sh).
# By script, not in CI: each release takes 25 to 40 minutes here.
SPARK_VERSIONS ?= 4.0.1 3.5.8
test-spark-versions: check-java
	PYTHON=$(PYTHON) tests/spark_versions.sh $(SPARK_VERSIONS)

lint: $(STAMP)
	$(BIN)/ruff check airflow_eod dags tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

# Benchmarks (benchmarks/README.md): `make bench` runs the full set, `make bench QUICK=1` a
# reduced one in minutes; RESUME=1 continues histories an interrupted run left behind.
QUICK ?=
RESUME ?=
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): pyproject.toml | $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

bench: check-java $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.run $(if $(filter-out 0,$(QUICK)),--quick) $(if $(filter-out 0,$(RESUME)),--resume)

# A wheel and an sdist in dist/ (README "Use it in a DAG"). `build` lives in a venv of its own,
# never in .venv; it builds the sdist, then the wheel from the sdist.
BUILD_VENV := .venv-build
DIST := dist

$(BUILD_VENV)/.installed:
	$(PYTHON) -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/pip install --quiet --upgrade pip build
	touch $(BUILD_VENV)/.installed

dist: $(BUILD_VENV)/.installed
	rm -rf $(DIST)
	$(BUILD_VENV)/bin/python -m build --outdir $(DIST) .

# The built wheel installed into a fresh venv, and both files checked (tests/tooling/test_dist.py says
# how, and why the fresh venv borrows .venv's dependencies instead of downloading them).
dist-check: dist $(STAMP)
	EOD_DIST_DIR=$(DIST) $(BIN)/python -m pytest -m dist tests/tooling/test_dist.py $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(BUILD_VENV) $(DIST) .demo .pytest_cache .mypy_cache .ruff_cache
