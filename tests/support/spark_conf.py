"""The settings of the SparkSessions the tests, the chaos harness and the benchmarks start:
one place that says which jars go in and when Delta Spark's SQL extension comes with them."""

from __future__ import annotations

import os

from airflow_eod.spark.session import DELTA_SPARK_CONF

DELTA_SPARK_JARS_ENV = "EOD_DELTA_SPARK_JARS"
S3A_JARS_ENV = "EOD_S3A_JARS"
ABFS_JARS_ENV = "EOD_ABFS_JARS"
KAFKA_JARS_ENV = "EOD_KAFKA_JARS"
POSTGRES_JDBC_JAR = "/usr/share/java/postgresql.jar"


def delta_spark_conf() -> dict[str, str]:
    """The jars EOD_DELTA_SPARK_JARS names, with Delta's SQL extension and catalog; empty
    where the variable is unset (tests/conftest.py finds the cached jars and sets it)."""
    jars = os.environ.get(DELTA_SPARK_JARS_ENV, "")
    # Delta Spark rebuilds a table's snapshot in 50 tasks by default: on 2 cores and small
    # tables, each write to an existing table then spends 20 to 40 s in task overhead.
    # VACUUM lists the table's folders in spark.sql.sources.parallelPartitionDiscovery.parallelism
    # tasks (10000 by default): a VACUUM of a 12-partition table took 55 s here, 8-10 s with 2.
    # Only the number of listing tasks changes: VACUUM still lists and deletes every file.
    small = {
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
    }
    return {"spark.jars": jars, **DELTA_SPARK_CONF, **small} if jars else {}


def _find_store_jars(store: str, env: str, what: str) -> str | None:
    """Why Spark cannot reach ``store`` in the tests, or ``None`` when it can: ``env`` names the
    jars, else the ones ``make test`` fetched into the cache (airflow_eod/spark/cloud_jars.py)
    are taken and put in ``env``, so that every process the tests start sees the same ones."""
    if os.environ.get(env):
        return None
    from airflow_eod.spark.cloud_jars import object_store_jars
    from airflow_eod.spark.jars import DEFAULT_CACHE, JarFetchError, cached

    try:
        paths = cached(object_store_jars(store))
    except JarFetchError as exc:
        return str(exc)
    if paths is None:
        return (
            f"the {what} jars are not in {DEFAULT_CACHE} and {env} is unset: `make test` fetches "
            f"them with Maven (`python -m airflow_eod.spark.cloud_jars {store}`)"
        )
    os.environ[env] = ",".join(paths)
    return None


def find_s3a_jars() -> str | None:
    """Why Spark cannot write ``s3a://`` in the tests (EOD_S3A_JARS: hadoop-aws and the AWS
    SDK bundle), or ``None`` when it can."""
    return _find_store_jars("s3", S3A_JARS_ENV, "s3a")


def find_abfs_jars() -> str | None:
    """Why Spark cannot write ``abfs://`` in the tests (EOD_ABFS_JARS: hadoop-azure and what it
    loads), or ``None`` when it can."""
    return _find_store_jars("azure", ABFS_JARS_ENV, "abfs")


def find_kafka_jars() -> str | None:
    """Why Spark cannot read Kafka in the tests (EOD_KAFKA_JARS: Spark's Kafka connector),
    or ``None`` when it can; the cached jars are put in EOD_KAFKA_JARS."""
    if os.environ.get(KAFKA_JARS_ENV):
        return None
    from airflow_eod.spark.jars import DEFAULT_CACHE
    from airflow_eod.spark.kafka_jars import cached_kafka_jars

    jars = cached_kafka_jars()
    if jars is None:
        return (
            f"Spark's Kafka connector jars are not in {DEFAULT_CACHE} and {KAFKA_JARS_ENV} is unset: "
            "`make test` fetches them with Maven (`python -m airflow_eod.spark.kafka_jars`)"
        )
    os.environ[KAFKA_JARS_ENV] = jars
    return None


def session_conf(
    postgres_jar: str = POSTGRES_JDBC_JAR, *, s3a: bool = False, abfs: bool = False
) -> dict[str, str]:
    """A session's settings: the PostgreSQL JDBC driver where it is installed, and Delta
    Spark where its jars are named. Every jar goes in at start: a session takes no more.

    :param postgres_jar: the PostgreSQL JDBC driver.
    :param s3a: put the s3a jars EOD_S3A_JARS names (see :func:`find_s3a_jars`) on the
        driver's class path too. On the JVM's own class path, not ``spark.jars``: Spark copies
        each ``spark.jars`` file into the session's work folder, 690 MB for the AWS SDK
        bundle, and a local executor shares the driver's class path anyway.
    :param abfs: put the abfs jars EOD_ABFS_JARS names (see :func:`find_abfs_jars`) there too.
    """
    conf = delta_spark_conf()
    jars = [postgres_jar] if os.path.exists(postgres_jar) else []
    jars += [j for j in conf.pop("spark.jars", "").split(",") if j]
    find_kafka_jars()  # Spark's kafka source, where cached: small, and a session takes no more later
    jars += [j for j in os.environ.get(KAFKA_JARS_ENV, "").split(",") if j]
    if jars:
        conf["spark.jars"] = ",".join(jars)
    class_path = [os.environ.get(env, "") for env, on in ((S3A_JARS_ENV, s3a), (ABFS_JARS_ENV, abfs)) if on]
    jars_on_path = ",".join(j for j in class_path if j)
    if jars_on_path:
        conf["spark.driver.extraClassPath"] = jars_on_path.replace(",", os.pathsep)
    return conf
