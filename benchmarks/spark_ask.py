"""The ask's contrast: the same question answered through a Spark session.

The Delta Spark jars are not installed here, so Spark cannot open the table as Delta. This
reads the Delta log the way a Delta reader would, with Spark's plain readers: the newest
checkpoint (``_last_checkpoint`` names it) with ``spark.read.parquet``, and the JSON commits
after it with ``spark.read.json``, keeping only the ``txn`` action of the batch's appId. It
answers only the marker part of the ask (no commit record, no manifest), so it is, if
anything, less work than the real ask.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TXN_SCHEMA = "txn STRUCT<appId: STRING, version: BIGINT, lastUpdated: BIGINT>"


def _checkpoint(log_dir: str) -> tuple[int, list[str]]:
    """The newest checkpoint's version and files (``-1, []`` when there is none)."""
    try:
        with open(os.path.join(log_dir, "_last_checkpoint")) as fh:
            hint = json.load(fh)
    except FileNotFoundError:
        return -1, []
    version, parts = int(hint["version"]), hint.get("parts")
    if not parts:
        return version, [os.path.join(log_dir, f"{version:020d}.checkpoint.parquet")]
    return version, [
        os.path.join(log_dir, f"{version:020d}.checkpoint.{i:010d}.{parts:010d}.parquet")
        for i in range(1, parts + 1)
    ]


def spark_marker(spark: SparkSession, table: str, app_id: str) -> int | None:
    """The ``txn`` version of ``app_id`` read through Spark, or ``None``."""
    from pyspark.sql import functions as F

    log_dir = os.path.join(table, "_delta_log")
    version, files = _checkpoint(log_dir)
    tail = []
    while os.path.exists(path := os.path.join(log_dir, f"{version + 1:020d}.json")):
        tail.append(path)
        version += 1
    found: list[int] = []
    if files:
        hits = (
            spark.read.parquet(*files)
            .where(F.col("txn.appId") == app_id)
            .select(F.col("txn.version").alias("v"))
            .collect()
        )
        found += [int(r["v"]) for r in hits]
    if tail:
        hits = (
            spark.read.schema(TXN_SCHEMA)
            .json(tail)
            .where(F.col("txn.appId") == app_id)
            .select(F.col("txn.version").alias("v"))
            .collect()
        )
        found += [int(r["v"]) for r in hits]
    return max(found) if found else None
