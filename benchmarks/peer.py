"""Against the peer: the same increments of a landing directory ingested by airflow-eod and by
Spark Structured Streaming with ``Trigger.AvailableNow``, in the same SparkSession.

Two cases, each its own pair of tables:

- *one file*: each increment is one new CSV file of orders in the landing directory, the
  tables unpartitioned;
- *partitioned*: each increment is a new sub-directory of CSV files whose rows span about
  20 order dates, both tables partitioned by ``order_date`` (every increment writes into
  about 20 partitions).

After an increment lands, both ingest it (the order alternates): airflow-eod as a task
would, one ``LandingFilesSource`` offsets load (plan + ``run_load``); Structured Streaming as
a scheduled job would, one ``trigger(availableNow=True)`` query over the directory with a
checkpoint and a Parquet file sink, started and awaited. Both refuse malformed records (eod:
its malformed-record check; streaming: ``mode=FAILFAST``). One untimed warm-up increment of
each runs first on their own directories.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deltalake import DeltaTable

from airflow_eod.core.load_flow import LoadRequest, load_batch
from airflow_eod.core.source import ReadContext
from airflow_eod.core.table_ref import TableRef
from airflow_eod.runners.local import local_run
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark.load_spec import LoadSettings
from benchmarks.common import Row, Settings, fmt_int, ms, progress, ratio_of, row
from benchmarks.data import DDL, write_orders_csv

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PEER_RATIO = 0.8


@dataclass(frozen=True)
class Case:
    """How the increments look: files per increment, in a sub-directory each or not, and
    the tables' partition columns."""

    name: str
    files: int
    subdirectories: bool
    partition_by: tuple[str, ...]

    def land(self, landing: str, rows: int, first_id: int, tag: str) -> None:
        where = os.path.join(landing, tag) if self.subdirectories else landing
        write_orders_csv(where, rows, self.files, first_id=first_id, prefix=tag)


CASES = (
    Case("one file", files=1, subdirectories=False, partition_by=()),
    Case("partitioned", files=4, subdirectories=True, partition_by=("order_date",)),
)


def eod_increment(spark: SparkSession, case: Case, landing: str, table: str, token: str) -> float:
    source = LandingFilesSource(path=landing, file_format="csv", schema=DDL)
    t0 = time.perf_counter()
    # The one load flow the operators run: plan, ask, then load.
    result = load_batch(
        LoadRequest(TableRef.parse(table), "bench.peer", token),
        source,
        ReadContext(spark_factory=lambda: spark),
        run=local_run(
            lambda: spark,
            TableRef.parse(table),
            source,
            settings=LoadSettings(try_number=1, partition_by=list(case.partition_by)),
        ),
    )
    elapsed = time.perf_counter() - t0
    if result.outcome != "committed":
        raise RuntimeError(f"increment {token} ended {result.outcome}")
    return elapsed


def stream_increment(spark: SparkSession, case: Case, landing: str, out: str, checkpoint: str) -> float:
    t0 = time.perf_counter()
    reader = spark.readStream.schema(DDL).option("header", "true").option("mode", "FAILFAST")
    if case.subdirectories:
        reader = reader.option("recursiveFileLookup", "true")
    writer = (
        reader.csv(landing)
        .writeStream.format("parquet")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
    )
    if case.partition_by:
        writer = writer.partitionBy(*case.partition_by)
    query = writer.start(out)
    query.awaitTermination()
    elapsed = time.perf_counter() - t0
    if query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")
    return elapsed


def run_case(
    settings: Settings, spark: SparkSession, work: str, case: Case
) -> tuple[list[Row], dict[str, list[float]]]:
    rows_each = settings.increment_rows

    def paths(tag: str) -> tuple[str, str, str, str]:
        base = os.path.join(work, tag)
        return (f"{base}/landing", f"{base}/table", f"{base}/stream-out", f"{base}/stream-checkpoint")

    warm = paths("warm")
    case.land(warm[0], rows_each, 1, "warm")
    eod_increment(spark, case, warm[0], warm[1], "warm")
    stream_increment(spark, case, warm[0], warm[2], warm[3])

    landing, table, out, checkpoint = paths("run")
    eod: list[float] = []
    stream: list[float] = []
    for i in range(settings.increments):
        case.land(landing, rows_each, 1 + i * rows_each, f"increment-{i:04d}")
        for which in ("eod", "stream") if i % 2 == 0 else ("stream", "eod"):
            if which == "eod":
                eod.append(eod_increment(spark, case, landing, table, f"increment-{i}"))
            else:
                stream.append(stream_increment(spark, case, landing, out, checkpoint))
        progress(
            f"peer {case.name} increment {i + 1}/{settings.increments}: "
            f"eod {eod[-1]:.2f} s, streaming {stream[-1]:.2f} s"
        )
    expected = settings.increments * rows_each
    eod_rows = DeltaTable(table).to_pyarrow_table(columns=["order_id"]).num_rows
    stream_rows = spark.read.parquet(out).count()
    if eod_rows != expected or stream_rows != expected:
        raise RuntimeError(f"{case.name}: rows: eod {eod_rows}, streaming {stream_rows}, expected {expected}")
    if case.partition_by and DeltaTable(table).metadata().partition_columns != list(case.partition_by):
        raise RuntimeError(f"{case.name}: the eod table is not partitioned by {case.partition_by}")
    total_e, total_s = sum(eod), sum(stream)
    files = "one CSV file" if case.files == 1 else f"a sub-directory of {case.files} CSV files"
    what = f"{case.name}: {settings.increments} increments of {fmt_int(rows_each)} rows ({files})"
    if case.partition_by:
        what += f", partitioned by {', '.join(case.partition_by)}"
    out_rows = [
        row("peer", f"{what}: Structured Streaming availableNow, total", total_s, "s"),
        row(
            "peer",
            f"{what}: airflow-eod, total",
            total_e,
            "s",
            ratio=ratio_of(total_e, total_s),
            ratio_limit=PEER_RATIO,
            baseline="streaming",
            note=f"both hold {fmt_int(expected)} rows",
        ),
        row(
            "peer", f"{case.name}: per increment: Structured Streaming availableNow, p50", ms(stream)[0], "ms"
        ),
        row(
            "peer",
            f"{case.name}: per increment: airflow-eod, p50",
            ms(eod)[0],
            "ms",
            ratio=ratio_of(ms(eod)[0], ms(stream)[0]),
            baseline="streaming",
        ),
    ]
    return out_rows, {"eod": eod, "stream": stream}


def run(settings: Settings, spark: SparkSession, work: str) -> tuple[list[Row], dict[str, Any]]:
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    out_rows: list[Row] = []
    series: dict[str, Any] = {}
    for case in CASES:
        where = os.path.join(work, case.name.replace(" ", "-"))
        case_rows, series[case.name] = run_case(settings, spark, where, case)
        out_rows += case_rows
    shutil.rmtree(work, ignore_errors=True)
    return out_rows, series
