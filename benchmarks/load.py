"""What exactly-once costs per load: an airflow-eod load against a plain Spark Parquet write
of the same data, in the same SparkSession, side by side.

For each input format (CSV with a schema, where the provider checks for malformed records,
and Parquet) and size, pairs alternate (plain first, then eod first) and the medians are
compared:

- plain: ``spark.read`` of the landing files (CSV: ``mode=FAILFAST``, Spark's own way to
  refuse malformed records) and ``df.write.parquet``;
- eod: what a task does: ``source.plan(...)`` (offsets, a new pipeline per repetition so
  every load is a first load of those files) and ``run_load`` (ask, read FAILFAST, stage,
  footer stats, commit with marker and record, cleanup).

The fixed cost per batch is the eod time less the Spark jobs inside it, measured by
wrapping the Spark steps of ``run_load`` (the read, an up-front malformed-record count where
one runs, and the staging write; the footer statistics inside staging count as fixed cost).
The 1.05x target applies from :data:`TARGET_FROM_ROWS` rows on, the issue's sizes.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from airflow_eod.core.load_flow import LoadRequest, load_batch
from airflow_eod.core.source import ReadContext
from airflow_eod.core.table_ref import TableRef
from airflow_eod.runners.local import local_run
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark import load_job, staging
from airflow_eod.spark.load_spec import LoadSettings
from benchmarks.common import Row, Settings, fmt_int, progress, ratio_of, row
from benchmarks.data import DDL, write_orders_csv

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOAD_RATIO, FIXED_MS = 1.05, 150.0
TARGET_FROM_ROWS = 1_000_000
FORMATS = ("csv", "parquet")


class _SparkClock:
    """Seconds spent in the Spark steps of ``run_load`` (wrapped while a load runs)."""

    def __init__(self) -> None:
        self.spark = 0.0
        self.stats = 0.0

    def wrap(self, fn: Callable[..., Any], kind: str) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                setattr(self, kind, getattr(self, kind) + time.perf_counter() - t0)

        return wrapper


# What ``_instrumented`` wraps: (module, attribute, clock kind). ``run_load`` calls the reader
# and the malformed-record split by the names it imported into ``load_job``, and the staging
# write and footer statistics through ``staging``'s globals. A refactor that moves one of them
# fails the benchmark's smoke test (tests/tooling/test_bench_smoke.py) instead of crashing ``make bench``.
SPARK_STEPS: tuple[tuple[Any, str, str], ...] = (
    (load_job, "read_batch", "spark"),
    (load_job, "split_malformed", "spark"),
    (staging, "stage_dataframe", "spark"),
    (staging, "file_stats", "stats"),
)


@contextmanager
def _instrumented() -> Iterator[_SparkClock]:
    """Time the Spark steps of ``run_load`` from outside: the source's read (building the
    DataFrame), the malformed-record check and the staging write, less the footer
    statistics read inside staging (driver-side, part of the fixed cost)."""
    clock = _SparkClock()
    saved = [(module, name, getattr(module, name)) for module, name, _kind in SPARK_STEPS]
    try:
        for (module, name, fn), (_m, _n, kind) in zip(saved, SPARK_STEPS, strict=True):
            setattr(module, name, clock.wrap(fn, kind))
        yield clock
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)


def _files_for(rows: int) -> int:
    return max(2, min(40, rows // 250_000))


def prepare_inputs(spark: SparkSession, work: str, rows: int) -> dict[str, str]:
    """CSV files of ``rows`` orders, and the same rows as Parquet files (written by Spark)."""
    csv_dir = os.path.join(work, f"in-csv-{rows}")
    parquet_dir = os.path.join(work, f"in-parquet-{rows}")
    write_orders_csv(csv_dir, rows, _files_for(rows))
    spark.read.schema(DDL).option("header", "true").option("mode", "FAILFAST").csv(csv_dir).write.parquet(
        parquet_dir
    )
    return {"csv": csv_dir, "parquet": parquet_dir}


def plain_write(spark: SparkSession, fmt: str, landing: str, out: str) -> float:
    t0 = time.perf_counter()
    reader = spark.read.schema(DDL)
    if fmt == "csv":
        df = reader.option("header", "true").option("mode", "FAILFAST").csv(landing)
    else:
        df = reader.parquet(landing)
    df.write.parquet(out)
    return time.perf_counter() - t0


def eod_load(
    spark: SparkSession, fmt: str, landing: str, table: str, pipeline: str
) -> tuple[float, float, int]:
    """``(seconds, seconds outside the Spark jobs, rows committed)`` of one load."""
    source = LandingFilesSource(path=landing, file_format=fmt, schema=DDL)
    with _instrumented() as clock:
        t0 = time.perf_counter()
        result = load_batch(
            LoadRequest(TableRef.parse(table), pipeline, f"{pipeline}-run"),
            source,
            ReadContext(spark_factory=lambda: spark),
            run=local_run(
                lambda: spark,
                TableRef.parse(table),
                source,
                settings=LoadSettings(run_id=pipeline, try_number=1),
            ),
        )
        total = time.perf_counter() - t0
    if result.outcome != "committed":
        raise RuntimeError(f"load {pipeline} ended {result.outcome}")
    return total, total - (clock.spark - clock.stats), result.rows


def run(settings: Settings, spark: SparkSession, work: str) -> tuple[list[Row], dict[str, Any]]:
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    inputs = {}
    for rows in settings.load_rows:
        progress(f"load: writing {fmt_int(rows)} rows of landing files")
        inputs[rows] = prepare_inputs(spark, work, rows)
    out: list[Row] = []
    series: dict[str, list[dict[str, Any]]] = {fmt: [] for fmt in FORMATS}
    for fmt in FORMATS:
        table = os.path.join(work, f"table-{fmt}")
        # Warm-up on the smallest input: JIT, class loading, file cache; creates the table.
        first = inputs[settings.load_rows[0]][fmt]
        plain_write(spark, fmt, first, os.path.join(work, "warm-plain"))
        eod_load(spark, fmt, first, table, f"bench.warm.{fmt}")
        shutil.rmtree(os.path.join(work, "warm-plain"))
        for rows in settings.load_rows:
            plain: list[float] = []
            eod: list[float] = []
            fixed: list[float] = []
            inside: list[float] = []
            for rep in range(settings.load_pairs):
                target = os.path.join(work, f"plain-{fmt}-{rows}-{rep}")
                pipeline = f"bench.load.{fmt}.{rows}.{rep}"
                order = ("plain", "eod") if rep % 2 == 0 else ("eod", "plain")
                for which in order:
                    if which == "plain":
                        plain.append(plain_write(spark, fmt, inputs[rows][fmt], target))
                    else:
                        seconds, outside, committed = eod_load(spark, fmt, inputs[rows][fmt], table, pipeline)
                        if committed != rows:
                            raise RuntimeError(f"{pipeline} committed {committed} rows, expected {rows}")
                        eod.append(seconds)
                        fixed.append(outside)
                        inside.append(seconds - outside)
                shutil.rmtree(target, ignore_errors=True)
                progress(
                    f"load {fmt} {fmt_int(rows)} rows, pair {rep + 1}: "
                    f"plain {plain[-1]:.2f} s, eod {eod[-1]:.2f} s"
                )
            p, e, f = statistics.median(plain), statistics.median(eod), statistics.median(fixed)
            what = "CSV (schema, malformed check)" if fmt == "csv" else "Parquet"
            out.append(row("load", f"{what}, {fmt_int(rows)} rows: plain Spark write, median", p, "s"))
            out.append(
                row(
                    "load",
                    f"{what}, {fmt_int(rows)} rows: airflow-eod load, median",
                    e,
                    "s",
                    ratio=ratio_of(e, p),
                    ratio_limit=LOAD_RATIO if rows >= TARGET_FROM_ROWS else None,
                    baseline="plain",
                    note=f"{settings.load_pairs} alternating pairs; plan + run_load",
                )
            )
            s = statistics.median(inside)
            out.append(
                row(
                    "load",
                    f"{what}, {fmt_int(rows)} rows: the Spark jobs inside the eod load, median",
                    s,
                    "s",
                    ratio=ratio_of(s, p),
                    baseline="plain",
                    note="read + malformed-record check + staging write",
                )
            )
            out.append(
                row(
                    "load",
                    f"{what}, {fmt_int(rows)} rows: fixed cost beyond the Spark jobs, median",
                    f * 1000,
                    "ms",
                    limit=FIXED_MS,
                    note=f"eod - plain = {(e - p) * 1000:.0f} ms",
                )
            )
            series[fmt].append({"rows": rows, "plain": plain, "eod": eod, "fixed": fixed, "spark": inside})
    shutil.rmtree(work, ignore_errors=True)
    return out, series
