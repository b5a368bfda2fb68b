"""The settings of the SparkSessions the tests, the chaos harness and the benchmarks start:
one place that says which jars go in and when Delta Spark's SQL extension comes with them."""

from __future__ import annotations

import os

from airflow_eod.spark.session import DELTA_SPARK_CONF

DELTA_SPARK_JARS_ENV = "EOD_DELTA_SPARK_JARS"
POSTGRES_JDBC_JAR = "/usr/share/java/postgresql.jar"


def delta_spark_conf() -> dict[str, str]:
    """The jars EOD_DELTA_SPARK_JARS names, with Delta's SQL extension and catalog; empty
    where the variable is unset (tests/conftest.py finds the cached jars and sets it)."""
    jars = os.environ.get(DELTA_SPARK_JARS_ENV, "")
    # Delta Spark rebuilds a table's snapshot in 50 tasks by default: on 2 cores and small
    # tables, each write to an existing table then spends 20 to 40 s in task overhead.
    small = {"spark.databricks.delta.snapshotPartitions": "2"}
    return {"spark.jars": jars, **DELTA_SPARK_CONF, **small} if jars else {}


def session_conf(postgres_jar: str = POSTGRES_JDBC_JAR) -> dict[str, str]:
    """A session's settings: the PostgreSQL JDBC driver where it is installed, and Delta
    Spark where its jars are named. Every jar goes in at start: a session takes no more."""
    conf = delta_spark_conf()
    jars = [postgres_jar] if os.path.exists(postgres_jar) else []
    jars += [j for j in conf.pop("spark.jars", "").split(",") if j]
    if jars:
        conf["spark.jars"] = ",".join(jars)
    return conf
