"""The SparkSession settings every load needs, for a local session or a submitted driver."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Settings the protocol depends on: timestamps as TIMESTAMP_MICROS (what Delta readers
# expect, not INT96), UTC session time, and no _SUCCESS marker files among data files.
# Local files go through Hadoop's RawLocalFileSystem: the default ChecksumFileSystem derives
# a ".<name>.crc" path that is an invalid URI for a landing file named like "a:b.csv", so
# such a planned file could not be read (and it writes .crc side files nobody needs).
REQUIRED_CONF: dict[str, str] = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.session.timeZone": "UTC",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.sql.sources.partitionOverwriteMode": "static",
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
}
# A task's local Spark opens driver and block manager ports: on loopback, not on the worker's
# public address (spark_conf can set spark.driver.bindAddress/host to open them on purpose).
LOOPBACK = "127.0.0.1"
LOCAL_DEFAULTS: dict[str, str] = {
    "spark.driver.bindAddress": LOOPBACK,
    "spark.driver.host": LOOPBACK,
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.memory": "1g",
}

# What Delta Spark 3.x/4.x needs of the session even for a path write (without them its
# save fails with DELTA_CONFIGURE_SPARK_SESSION_WITH_EXTENSION_AND_CATALOG). Static
# settings: they take effect only on a session created with them.
DELTA_SPARK_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def engine_conf(engine: str) -> dict[str, str]:
    """The session settings the commit ``engine`` needs (a user's own ``spark_conf`` wins)."""
    return dict(DELTA_SPARK_CONF) if engine == "delta-spark" else {}


# Spark's JDBC reader turns a `timestamp without time zone` into an instant through the
# JVM's default time zone, which spark.sql.session.timeZone does not set: a driver or an
# executor on a node in another zone would shift every such value. Appended, never
# replacing, to the user's own JVM options.
UTC_JVM_OPTION = "-Duser.timezone=UTC"
JVM_OPTION_KEYS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")


def with_utc_jvms(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` with the driver's and the executors' JVMs set to UTC."""
    merged = dict(conf)
    for key in JVM_OPTION_KEYS:
        options = merged.get(key, "")
        if UTC_JVM_OPTION not in options.split():
            merged[key] = f"{options} {UTC_JVM_OPTION}".strip()
    return merged


def get_session(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "airflow-eod",
    *,
    submitted: bool = False,
    jvm_log: logging.Logger | None = None,
) -> SparkSession:
    """Get (or create) the process's SparkSession with the settings loads need.

    :param master: the Spark master; ``local[*]`` on loopback when unset and no session exists.
    :param conf: extra Spark settings (cannot override :data:`REQUIRED_CONF`).
    :param app_name: the application name.
    :param submitted: this process is a driver that spark-submit launched: its master and
        settings are spark-submit's, and only :data:`REQUIRED_CONF` is added.
    :param jvm_log: when this call starts the JVM, its output goes to this logger at the
        levels log4j printed (:mod:`airflow_eod.spark.jvm_log`) instead of to stderr.
    """
    from pyspark.sql import SparkSession

    # Python workers run this interpreter unless told otherwise: a bare "python3" on PATH
    # may lack pyspark and pyarrow.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not submitted and not SparkSession.getActiveSession():
        builder = builder.master("local[*]")
        for key, value in LOCAL_DEFAULTS.items():
            builder = builder.config(key, value)
    settings = {**with_utc_jvms(conf or {}), **REQUIRED_CONF}
    for key, value in settings.items():
        builder = builder.config(key, value)
    if jvm_log is not None and not submitted:
        _launch_jvm_logged(builder, jvm_log)
    spark = builder.getOrCreate()
    for key, value in REQUIRED_CONF.items():
        if not key.startswith("spark.hadoop."):
            spark.conf.set(key, value)
    # A session that existed before this call did not take the builder's spark.hadoop.* keys.
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    for key, value in REQUIRED_CONF.items():
        if key.startswith("spark.hadoop."):
            hadoop_conf.set(key.removeprefix("spark.hadoop."), value)
    return spark


def _launch_jvm_logged(builder: Any, logger: logging.Logger) -> None:
    """Start the JVM the builder would start, with its output routed to ``logger``; nothing
    when this process has a JVM already."""
    from pyspark import SparkConf, SparkContext  # pyspark.core.context on Spark 4, pyspark.context on 3.5

    from airflow_eod.spark.jvm_log import launch_logged_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        # The builder's options, as getOrCreate would hand them to the JVM it launches.
        conf = SparkConf(loadDefaults=False).setAll(list(builder._options.items()))
        SparkContext._gateway = launch_logged_gateway(conf, logger)
        SparkContext._jvm = SparkContext._gateway.jvm
