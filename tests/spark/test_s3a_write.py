"""Spark writes Parquet straight to S3 (s3a, issue 21 item 2) on the SeaweedFS server.

The shared session (tests/conftest.py) carries hadoop-aws and the AWS SDK bundle on its class
path; :mod:`airflow_eod.spark.object_store_conf` turns the server's delta-rs storage options
into per-bucket S3A settings. The rows are read back by Spark, and by pyarrow from bytes the
storage seam's ``S3Storage`` (obstore) fetched, and compared row by row. The write's S3
requests are S3A's own counters (IOStatistics), printed with ``-s``.
"""

from __future__ import annotations

import io
import os
import time
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from airflow_eod.spark.object_store_conf import apply_to_session, hadoop_store_conf
from tests.support.spark_conf import S3A_JARS_ENV, find_s3a_jars

pytestmark = [pytest.mark.objectstore, pytest.mark.spark]

obstore = pytest.importorskip("obstore")
object_store = pytest.importorskip("airflow_eod.core.storage.object_store")
pq = pytest.importorskip("pyarrow.parquet")

ROWS = [
    (i, f"name-{i}", Decimal(f"{i}.{i % 100:02d}"), datetime(2024, 1, 1 + i % 28, i % 24, tzinfo=UTC))
    for i in range(1, 301)
]


@pytest.fixture
def s3a(spark: Any) -> Any:
    """The shared session, if it can write s3a://; a skip (a failure under CI) says why not."""
    reason = find_s3a_jars()
    if reason is None and not _has_class(spark, "org.apache.hadoop.fs.s3a.S3AFileSystem"):
        reason = f"the shared SparkSession started without the s3a jars ({S3A_JARS_ENV}) on its class path"
    if reason is not None:
        if os.environ.get("EOD_REQUIRE_OBJECTSTORE"):
            pytest.fail(reason)
        pytest.skip(reason)
    return spark


def _has_class(spark: Any, name: str) -> bool:
    try:
        spark.sparkContext._jvm.java.lang.Class.forName(name)
    except Exception:
        return False
    return True


def _counters(spark: Any, uri: str) -> dict[str, int]:
    """S3A's request counters for ``uri``'s file system (cumulative for the bucket)."""
    jvm = spark.sparkContext._jvm
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(
        jvm.java.net.URI(uri), spark.sparkContext._jsc.hadoopConfiguration()
    )
    counters = fs.getIOStatistics().counters()
    return {str(k): int(counters.get(k)) for k in counters.keySet()}


def _utc(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """``row`` with its timestamp as an aware UTC datetime: Spark's collect() gives a naive
    one in this process's local time, pyarrow an aware UTC one."""
    *rest, ts = row
    return (*rest, ts.astimezone(UTC))


def _all_keys(storage: Any) -> list[str]:
    """Every object below the storage's root, recursively (``S3Storage.list`` is one level)."""
    return sorted(str(o["path"]) for batch in obstore.list(storage._store) for o in batch)


def test_spark_writes_parquet_to_s3a_and_both_readers_get_the_rows_back(s3a: Any, s3_server: Any) -> None:
    prefix = f"spark-s3a/{uuid.uuid4().hex}"
    conf = hadoop_store_conf(f"s3://{s3_server.bucket}/{prefix}", s3_server.options())
    assert conf.uri == f"s3a://{s3_server.bucket}/{prefix}"
    assert s3_server.secret_key not in repr(conf)
    apply_to_session(s3a, conf)

    df = s3a.createDataFrame(ROWS, "id long, name string, amount decimal(10,2), ts timestamp").repartition(3)
    before = _counters(s3a, conf.uri)
    started = time.monotonic()
    df.write.mode("errorifexists").parquet(conf.uri)
    seconds = time.monotonic() - started
    after = _counters(s3a, conf.uri)
    spent = {k: after[k] - before.get(k, 0) for k in sorted(after) if after[k] - before.get(k, 0)}
    print(f"\ns3a write of 3 files: {seconds:.2f} s; S3A counters: {spent}")

    storage = object_store.S3Storage.from_url(f"s3://{s3_server.bucket}/{prefix}", s3_server.options())
    keys = _all_keys(storage)
    print(f"objects after the write: {keys}")
    # FileOutputCommitter's job commit removes its _temporary tree; REQUIRED_CONF turns the
    # _SUCCESS marker off. What stays is the 3 data files and nothing else.
    assert [k for k in keys if "_temporary" in k] == []
    assert "_SUCCESS" not in keys
    parts = [k for k in keys if k.endswith(".parquet")]
    assert len(parts) == 3 and parts == keys, keys
    # The seam's one-level listing sees the same files. SeaweedFS's filer keeps the folders
    # the committer emptied and lists them as common prefixes (no object is below it, as
    # the recursive listing shows); S3 itself has no folders and would list none.
    assert set(storage.list("")) - set(parts) <= {"_temporary"}
    assert set(parts) <= set(storage.list(""))

    expected = sorted(ROWS)
    from_spark = sorted(_utc(tuple(r)) for r in s3a.read.parquet(conf.uri).collect())
    assert from_spark == expected
    from_obstore = sorted(
        _utc(tuple(row.values()))
        for key in parts
        for row in pq.read_table(io.BytesIO(storage.get(key))).to_pylist()
    )
    assert from_obstore == expected
