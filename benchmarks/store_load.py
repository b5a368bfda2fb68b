"""A load to an object store against a plain Spark write to the same store, side by side.

The same CSV landing files (local, with the schema, ``mode=FAILFAST``) are written to the S3
server of :mod:`benchmarks.object_store` over ``s3a`` (``hadoop-aws`` and the AWS SDK bundle on
the driver's class path: ``tests/support/spark_conf.find_s3a_jars``), in rounds whose order
rotates, after an untimed warm-up of each contender on 2,000 rows:

- plain Parquet: ``spark.read`` of the files, then ``df.write.parquet("s3a://...")`` (no
  table, no exactly-once: the floor of what writing those rows to the store costs);
- plain Delta: ``df.write.format("delta").mode("append").save("s3a://...")`` (Delta Spark's
  own write; only where the Delta Spark jars are on the session, ``EOD_DELTA_SPARK_JARS``);
- airflow-eod: the operator's Spark path in local mode (``load_batch`` with ``local_run``: the
  plan log and the asks on the store, the read, the staging write over s3a, the footer
  statistics read from the store, the commit and its record, clean-up), a new pipeline per
  round into one table on the store.

Medians; the eod load is printed as ratios against each plain write of the same rounds, with
its requests to the store (the seam's count; Spark's own s3a requests are not in it). Every
eod load must commit all its rows. Ratios only, never a timed assertion.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
import uuid
from typing import TYPE_CHECKING, Any

from airflow_eod.core.load_flow import LoadRequest, load_batch
from airflow_eod.core.source import ReadContext
from airflow_eod.core.table_ref import TableRef
from airflow_eod.runners.local import local_run
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark.load_spec import LoadSettings
from benchmarks.common import DELTA_SPARK_JARS_ENV, Row, Settings, fmt_int, progress, ratio_of, row
from benchmarks.data import DDL, write_orders_csv

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

AREA = "objectstore"
WARM_ROWS = 2_000
LABELS = {
    "parquet": 'plain Spark Parquet write (df.write.parquet("s3a://..."))',
    "delta": 'plain Spark Delta write (df.write.format("delta").mode("append").save("s3a://..."))',
    "eod": "airflow-eod load (load_batch + local_run, delta-rs engine)",
}


def contenders(delta_jars: bool) -> list[str]:
    """Who writes: the plain Delta write only where Delta Spark is on the session."""
    return ["parquet", "delta", "eod"] if delta_jars else ["parquet", "eod"]


def rotation(names: list[str], rounds: int) -> list[list[str]]:
    """The order of each round: round ``i`` starts with contender ``i`` (mod their number), so
    none always runs first, after a cold cache, or last."""
    return [names[i % len(names) :] + names[: i % len(names)] for i in range(rounds)]


def _read(spark: SparkSession, landing: str) -> Any:
    return spark.read.schema(DDL).option("header", "true").option("mode", "FAILFAST").csv(landing)


class _Contest:
    def __init__(self, spark: SparkSession, server: Any, run_id: str) -> None:
        from airflow_eod.spark.object_store_conf import prepare_session

        self.spark = spark
        self.options = server.options()
        self.root = f"s3://{server.bucket}/bench-load/{run_id}"
        self.s3a = prepare_session(spark, self.root, self.options, "benchmark prefix")
        self.table = TableRef.parse(f"{self.root}/eod-table", self.options)
        self.requests: list[int] = []

    def write(self, who: str, landing: str, label: str, rows: int) -> float:
        t0 = time.perf_counter()
        if who == "parquet":
            _read(self.spark, landing).write.parquet(f"{self.s3a}/plain-parquet/{label}")
        elif who == "delta":
            _read(self.spark, landing).write.format("delta").mode("append").save(f"{self.s3a}/plain-delta")
        else:
            store = self.table.storage()
            before = sum(store.requests.values())  # type: ignore[attr-defined]
            source = LandingFilesSource(path=landing, file_format="csv", schema=DDL)
            pipeline = f"bench.store.load.{label}"
            result = load_batch(
                LoadRequest(self.table, pipeline, f"{pipeline}-run"),
                source,
                ReadContext(spark_factory=lambda: self.spark),
                run=local_run(
                    lambda: self.spark,
                    self.table,
                    source,
                    settings=LoadSettings(run_id=pipeline, try_number=1),
                ),
            )
            if result.outcome != "committed" or result.rows != rows:
                raise RuntimeError(f"{pipeline} ended {result.outcome}, {result.rows} rows; expected {rows}")
            self.requests.append(sum(store.requests.values()) - before)  # type: ignore[attr-defined]
        return time.perf_counter() - t0


def run(settings: Settings, spark: SparkSession, server: Any, work: str) -> tuple[list[Row], dict[str, Any]]:
    """Load each size every way; ``(rows, chart series)``."""
    from tests.support.spark_conf import find_s3a_jars

    why = find_s3a_jars()
    if why is not None:
        return [Row(AREA, "load to S3 against a plain Spark write: not measured", None, "", note=why)], {}
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    delta = bool(os.environ.get(DELTA_SPARK_JARS_ENV))
    names = contenders(delta)
    contest = _Contest(spark, server, uuid.uuid4().hex[:12])
    warm = os.path.join(work, "warm")
    write_orders_csv(warm, WARM_ROWS, 2)
    for who in names:
        contest.write(who, warm, "warm", WARM_ROWS)
    out: list[Row] = []
    series: dict[str, Any] = {}
    for rows in settings.store_rows:
        landing = os.path.join(work, f"in-{rows}")
        write_orders_csv(landing, rows, max(2, min(40, rows // 250_000)))
        seconds: dict[str, list[float]] = {who: [] for who in names}
        contest.requests = []
        for i, order in enumerate(rotation(names, settings.store_reps)):
            for who in order:
                seconds[who].append(contest.write(who, landing, f"r{rows}-{i}", rows))
            progress(
                f"objectstore load {fmt_int(rows)} rows, round {i + 1}: "
                + ", ".join(f"{who} {seconds[who][-1]:.2f} s" for who in names)
            )
        p50 = {who: statistics.median(s) for who, s in seconds.items()}
        at = f"load to S3, {fmt_int(rows)} CSV rows"
        for who in names:
            if who != "eod":
                out.append(row(AREA, f"{at}: {LABELS[who]}, median", p50[who], "s"))
        made = statistics.median(contest.requests)
        note = f"rounds: {settings.store_reps}, rotating; {made:.0f} requests to the store (median)"
        out.append(
            row(
                AREA,
                f"{at}: {LABELS['eod']}, median",
                p50["eod"],
                "s",
                ratio=ratio_of(p50["eod"], p50["parquet"]),
                baseline="plain Parquet write",
                note=note,
            )
        )
        if delta:
            out.append(
                row(
                    AREA,
                    f"{at}: airflow-eod load against the plain Delta write",
                    p50["eod"],
                    "s",
                    ratio=ratio_of(p50["eod"], p50["delta"]),
                    baseline="plain Delta write",
                )
            )
        else:
            out.append(
                Row(
                    AREA,
                    f"{at}: plain Spark Delta write: not measured",
                    None,
                    "",
                    note=f"{DELTA_SPARK_JARS_ENV} is unset: the session has no Delta Spark "
                    "(the ratio above is against a plain Parquet write)",
                )
            )
        series[str(rows)] = {**seconds, "eod_requests": list(contest.requests)}
    shutil.rmtree(work, ignore_errors=True)
    return out, series
