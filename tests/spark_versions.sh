#!/usr/bin/env bash
# The spark, delta_spark and cluster tiers on other Spark releases than the one `make test`
# installs (`make test-spark-versions`; by script, not in CI: one release takes 25 to 40
# minutes on a 2-core machine). Each release gets a venv of its own, .venv-spark-<version>,
# and the Delta Spark jars built for it (airflow_eod/spark/jars.py).
#
# Spark 4.x is a release the Airflow worker itself may run (pyproject.toml's pyspark range).
# Spark 3.5 is one a cluster may run: the Apache Spark provider needs pyspark-client >= 4 on
# the worker, so a 3.5 venv holds the provider without its dependencies, as the Python that
# a 3.5 cluster's driver uses would (docs/deployment.md, "Spark 3.5 clusters"); pandas too,
# which pyspark 3.5's mapInArrow (a test's transform) needs and 4.x does not.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

for version in "$@"; do
  venv=".venv-spark-$version"
  if [ ! -f "$venv/.installed" ]; then
    "$PYTHON" -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip
    case "$version" in
      3.*)
        "$venv/bin/pip" install --quiet "pyspark==$version" 'deltalake>=1.6,<1.7' 'pyarrow>=15' \
          'pendulum>=3,<4' 'apache-airflow[postgres]>=3.1,<3.4' 'apache-airflow-providers-openlineage>=2.0' \
          'apache-airflow-providers-common-compat>=1.23.0' 'grpcio-status>=1.67.0' pytest hypothesis \
          psycopg2-binary jsonschema psutil pandas
        "$venv/bin/pip" install --quiet --no-deps 'apache-airflow-providers-apache-spark>=6.3,<6.4' -e .
        ;;
      *)
        # pyspark-client ships the same `pyspark` package: both must be the same release.
        "$venv/bin/pip" install --quiet -e '.[dev]' "pyspark==$version" "pyspark-client==$version"
        ;;
    esac
    touch "$venv/.installed"
  fi
  case "$version" in
    # On 3.5 what runs is what a cluster's driver runs: no Airflow worker, no spark-submit.
    3.*) markers="(spark or delta_spark) and not airflow and not cluster and not scheduler and not chaos and not bench" ;;
    *) markers="(spark or delta_spark or cluster) and not chaos and not bench" ;;
  esac
  jars=$("$venv/bin/python" -m airflow_eod.spark.jars)
  echo "== Spark $version with $jars"
  EOD_DELTA_SPARK_JARS="$jars" EOD_REQUIRE_DELTA_SPARK=1 EOD_REQUIRE_POSTGRES=1 \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider -m "${MARKERS:-$markers}" ${PYTEST_ARGS:-}
done
