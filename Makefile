# Set-up and the two commands the README names: `make demo` and `make test`; `make help` lists
# every target. All create (or reuse) a project-local .venv; prerequisites are Python 3.11+ and
# Java 17+ (`make test-unit` needs no Java). The test tiers are described in CONTRIBUTING.md.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: help demo test test-extended test-unit test-spark test-airflow test-airflow-lowest test-objectstore-race test-gcs-race azurite gcs-emulator lint typecheck check-python check-java clean bench dist dist-check jars jars-s3 jars-azure jars-kafka jars-cloud test-spark-versions
.DEFAULT_GOAL := help

help: ## list the targets and what each does
	@awk 'BEGIN {FS = ":[^#]*## "} /^[a-zA-Z_-]+:[^#]*## / {printf "  %-22s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

check-python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || { echo "Python 3.11 or newer is required"; exit 1; }

check-java: check-python
	@command -v java >/dev/null 2>&1 || { echo "Java 17 or newer is required (Spark runs on the JVM): install a JDK, e.g. 'apt-get install openjdk-17-jdk-headless'"; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	 if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then echo "Java 17 or newer is required, found: $$(java -version 2>&1 | head -1)"; exit 1; fi

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: check-java $(STAMP) ## load the example pipeline locally and show the table (README)
	$(BIN)/python -m airflow_eod.examples.demo

# The Delta Spark jars (not on PyPI) for the `delta_spark` tier, fetched once with Maven into
# ~/.cache/airflow-eod/jars (airflow_eod/spark/jars.py); a second run fetches nothing. Without
# Maven the tier skips and says why (CI fails instead). `make demo` needs none of this.
jars: $(STAMP) ## fetch the Delta Spark jars for the delta_spark tier (Maven, once)
	@$(BIN)/python -m airflow_eod.spark.jars >/dev/null || echo "the delta_spark tier will be skipped (see above)"

# Hadoop's S3 connector for Spark's s3a:// writes (tests/spark/test_s3a_write.py): hadoop-aws and
# the AWS SDK bundle of the Hadoop release pyspark ships (airflow_eod/spark/cloud_jars.py), into
# the same cache, once. The bundle is about 690 MB (Hadoop 3.5.0: SDK 2.35.4).
jars-s3: $(STAMP) ## fetch the s3a connector (hadoop-aws, AWS SDK bundle) for pyspark's Hadoop (Maven, once)
	@$(BIN)/python -m airflow_eod.spark.cloud_jars s3 >/dev/null || echo "the Spark s3a tests will be skipped (see above)"

# Hadoop's ABFS connector for Spark's abfs:// writes to Azurite (tests/spark/test_azure_spark_loads.py):
# hadoop-azure, WildFly OpenSSL and HdrHistogram, about 1.4 MB (Hadoop 3.5.0), into the same cache, once.
jars-azure: $(STAMP) ## fetch the abfs connector (hadoop-azure) for pyspark's Hadoop (Maven, once)
	@$(BIN)/python -m airflow_eod.spark.cloud_jars azure >/dev/null || echo "the Spark abfs tests will be skipped (see above)"

# Spark's Kafka connector (spark-sql-kafka-0-10, kafka-clients, about 12 MB) for the `kafka` tier
# and KafkaToDeltaOperator (airflow_eod/spark/kafka_jars.py); the tests' broker fetches its own.
jars-kafka: $(STAMP) ## fetch Spark's Kafka connector for the installed Spark (Maven, once)
	@$(BIN)/python -m airflow_eod.spark.kafka_jars >/dev/null || echo "the kafka tests will be skipped (see above)"

# The ABFS and GCS connectors (hadoop-gcp on Hadoop 3.5, about 35 MB), by hand (Spark's gs:// writes
# are not offered: hadoop-gcp takes no other endpoint, so no emulator serves it): print their paths.
jars-cloud: $(STAMP) ## fetch the abfss:// and gs:// connectors for pyspark's Hadoop and print their paths
	@$(BIN)/python -m airflow_eod.spark.cloud_jars azure gcs

# The tiers (CONTRIBUTING.md): a test with none of the "needs" markers of pyproject.toml is a
# `unit` test (tests/support/tiers.py marks it). test-unit points JAVA_HOME nowhere, so that a
# test that starts Spark without saying so fails there instead of passing slowly.
NO_JVM := JAVA_HOME=/no-jvm-in-the-unit-tier
SPARK_TIER := (spark or jdbc or delta_spark) and not airflow and not cluster and not yarn and not scheduler and not bench and not dist
AIRFLOW_TIER := airflow and not cluster and not yarn and not scheduler

test-unit: check-python $(STAMP) ## the unit tier: the tests that need no JVM and no server (no Java needed)
	$(NO_JVM) $(BIN)/python -m pytest -m unit $(PYTEST_ARGS)

test-spark: check-java $(STAMP) jars jars-s3 jars-azure jars-kafka ## the local Spark tier: loads, faults, JDBC and Delta Spark, without Airflow
	$(BIN)/python -m pytest -m "$(SPARK_TIER)" $(PYTEST_ARGS)

test-airflow: check-java $(STAMP) ## the Airflow tier: operators, sensor and DAGs under dag.test()
	$(BIN)/python -m pytest -m "$(AIRFLOW_TIER)" $(PYTEST_ARGS)

# What CI runs (.ci/run): the lint, then every test, all tiers, in one session (one
# SparkSession), as before the tiers had targets, but for the `extended` ones (pyproject.toml:
# another engine, deploy mode or fault point of a path a test kept here proves; CI time).
# PYTEST_ARGS narrows it, e.g. "-m chaos" (a -m of your own replaces "not extended"). The
# 40 slowest tests are listed at the end: where CI's time goes as tiers grow.
test: check-java $(STAMP) jars jars-s3 jars-azure jars-kafka ## the lint and every test (all tiers) but the `extended` ones, as CI runs them
	$(BIN)/ruff check airflow_eod dags tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -m "not extended" --durations=40 $(PYTEST_ARGS)

# The tests `make test` leaves out, by hand: every tier's `extended` tests in one session.
test-extended: check-java $(STAMP) jars jars-s3 jars-azure jars-kafka ## the `extended` tests make test (CI) leaves out (by hand)
	$(BIN)/python -m pytest -m extended --durations=20 $(PYTEST_ARGS)

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

# CI runs the tier without its `airflow_current_only` tests (pyproject.toml: loads through
# the same Airflow surface as the tests kept, with another engine, source or store; about
# 60% of the tier's time); LOWEST_ALL=1 runs every test of the tier.
LOWEST_ALL ?=
LOWEST_TIER := $(AIRFLOW_TIER)$(if $(filter-out 0,$(LOWEST_ALL)),, and not airflow_current_only and not extended)

test-airflow-lowest: check-java $(LOWEST_STAMP) ## the Airflow tier on the lowest Airflow release we admit (CI; LOWEST_ALL=1: all of it)
	$(LOWEST_VENV)/bin/python -c 'import airflow; assert airflow.__version__ == "$(AIRFLOW_LOWEST)", airflow.__version__'
	$(LOWEST_VENV)/bin/python -m pytest -m "$(LOWEST_TIER)" $(PYTEST_ARGS)

# The 16-racer conditional-put race on SeaweedFS S3 (tests/core/test_s3_storage.py) and on
# Azurite (tests/core/test_azure_storage.py) at their full 200 rounds, about 12 minutes on 2
# cores for S3 and about 15 s for Azurite; `make test` runs them at 20 rounds (S3 with 6
# racers). By hand, not in CI: the issue 21 note quotes their result.
S3_RACERS ?= 16
S3_RACE_ROUNDS ?= 200
AZURE_RACE_ROUNDS ?= 200
RACE := test_sixteen_racers_on_one_key_exactly_one_wins_every_round
test-objectstore-race: check-python $(STAMP) ## the put-if-absent race on S3 and Azure at 200 rounds (by hand, ~12 min)
	EOD_S3_RACERS=$(S3_RACERS) EOD_S3_RACE_ROUNDS=$(S3_RACE_ROUNDS) EOD_AZURE_RACE_ROUNDS=$(AZURE_RACE_ROUNDS) \
		EOD_REQUIRE_OBJECTSTORE=1 $(BIN)/python -m pytest -s -m objectstore \
		tests/core/test_s3_storage.py::test_racers_on_one_key_exactly_one_wins_every_round \
		tests/core/test_azure_storage.py::$(RACE) $(PYTEST_ARGS)

# Azurite (the Azure Blob emulator of the `objectstore` tests) installed once with npm into
# ~/.cache/airflow-eod/npm (tests/support/azurite_server.py); the tests do it too when it lacks.
azurite: check-python $(STAMP) ## install Azurite for the objectstore tests (npm, once)
	$(BIN)/python -m tests.support.azurite_server

# The GCS emulator of the objectstore tests (tests/support/gcs_server.py): fake-gcs-server built
# with `go install` into ~/.cache/airflow-eod/go (about 2 minutes once; a second run builds
# nothing). The gcs_server fixture builds it too when it is missing and Go is there.
gcs-emulator: check-python $(STAMP) ## build the GCS emulator for the objectstore tests (Go, once)
	$(BIN)/python -m tests.support.gcs_server

# The same 16-racer race on the GCS emulator (tests/core/test_gcs_storage.py) at 200 rounds.
GCS_RACE_ROUNDS ?= 200
test-gcs-race: check-python $(STAMP) ## the GCS put-if-absent race at 200 rounds (by hand, ~2 min)
	EOD_GCS_RACE_ROUNDS=$(GCS_RACE_ROUNDS) EOD_REQUIRE_OBJECTSTORE=1 $(BIN)/python -m pytest -s -m objectstore \
		tests/core/test_gcs_storage.py::test_sixteen_racers_on_one_key_exactly_one_wins_every_round $(PYTEST_ARGS)

# The spark, delta_spark and cluster tiers on the lowest Spark pyproject.toml admits and on
# Spark 3.5 with Delta 3.3 (a cluster's release), each in its own venv (tests/spark_versions.sh).
# By script, not in CI: each release takes 25 to 40 minutes here.
SPARK_VERSIONS ?= 4.0.1 3.5.8
test-spark-versions: check-java ## the Spark tiers on Spark 4.0.1 and 3.5 (by hand, 25-40 min each)
	PYTHON=$(PYTHON) tests/spark_versions.sh $(SPARK_VERSIONS)

lint: $(STAMP) ## ruff, mypy and the import contracts
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

bench: check-java $(BENCH_STAMP) jars jars-s3 jars-kafka ## the benchmarks (QUICK=1 for a reduced set; benchmarks/README.md)
	$(BIN)/python -m benchmarks.run $(if $(filter-out 0,$(QUICK)),--quick) $(if $(filter-out 0,$(RESUME)),--resume)

# A wheel and an sdist in dist/ (README "Use it in a DAG"). `build` lives in a venv of its own,
# never in .venv; it builds the sdist, then the wheel from the sdist.
BUILD_VENV := .venv-build
DIST := dist

$(BUILD_VENV)/.installed:
	$(PYTHON) -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/pip install --quiet --upgrade pip build
	touch $(BUILD_VENV)/.installed

dist: $(BUILD_VENV)/.installed ## build a wheel and an sdist into dist/
	rm -rf $(DIST)
	$(BUILD_VENV)/bin/python -m build --outdir $(DIST) .

# The built wheel installed into a fresh venv, and both files checked (tests/tooling/test_dist.py says
# how, and why the fresh venv borrows .venv's dependencies instead of downloading them).
dist-check: dist $(STAMP) ## install the built wheel in a fresh venv and check both files
	EOD_DIST_DIR=$(DIST) $(BIN)/python -m pytest -m dist tests/tooling/test_dist.py $(PYTEST_ARGS)

clean: ## remove the venvs, dist/ and caches
	rm -rf $(VENV) $(BUILD_VENV) $(DIST) .demo .pytest_cache .mypy_cache .ruff_cache
