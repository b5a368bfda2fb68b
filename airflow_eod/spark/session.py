"""The SparkSession settings every load needs, for a local session or a submitted driver."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

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
LOCAL_DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.memory": "1g",
}


def get_session(
    master: str | None = None, conf: Mapping[str, str] | None = None, app_name: str = "airflow-eod"
) -> SparkSession:
    """Get (or create) the process's SparkSession with the settings loads need.

    :param master: the Spark master; ``local[*]`` when unset and no session exists.
    :param conf: extra Spark settings (cannot override :data:`REQUIRED_CONF`).
    :param app_name: the application name.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", "python3"))
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not SparkSession.getActiveSession():
        builder = builder.master("local[*]")
        for key, value in LOCAL_DEFAULTS.items():
            builder = builder.config(key, value)
    for key, value in {**(conf or {}), **REQUIRED_CONF}.items():
        builder = builder.config(key, value)
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
