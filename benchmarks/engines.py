"""The two engines of a load against a plain Spark Delta write of the same data, side by side.

For each size (1M and 10M rows; QUICK: 100k and 1M) of CSV landing files with a schema, three
contenders write into a Delta table of their own, in rotating order (each repetition starts
with the next one), after an untimed warm-up of each; the medians are compared with the
plain write's:

- plain: ``spark.read`` of the files (``mode=FAILFAST``) and
  ``df.write.format("delta").mode("append").save(...)``: Delta Spark's own write, no
  exactly-once;
- delta-spark: an airflow-eod load (``plan`` + ``run_load``, a new pipeline per repetition so
  every load is a first load) with ``engine="delta-spark"``: the same Delta Spark write, with
  the marker (``txnAppId``/``txnVersion``) and the manifest (``userMetadata``) in its commit;
- delta-rs: the same load with the default engine (staged Parquet, committed by airflow-eod).

Every load must commit all its rows, and at the end each table must hold every row it was
given (counted from the log's ``add`` statistics). Needs the Delta Spark jars
(EOD_DELTA_SPARK_JARS); without them the area prints one row that says so.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

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

CONTENDERS = ("plain", "delta-spark", "delta-rs")
LABELS = {
    "plain": 'plain Spark Delta write (df.write.format("delta").mode("append")), median',
    "delta-spark": "airflow-eod load, delta-spark engine, median",
    "delta-rs": "airflow-eod load, delta-rs engine, median",
}


def _files_for(rows: int) -> int:
    return max(2, min(40, rows // 250_000))


def plain_delta_write(spark: SparkSession, landing: str, table: str) -> float:
    t0 = time.perf_counter()
    df = spark.read.schema(DDL).option("header", "true").option("mode", "FAILFAST").csv(landing)
    df.write.format("delta").mode("append").save(table)
    return time.perf_counter() - t0


def eod_load(spark: SparkSession, landing: str, table: str, pipeline: str, engine: str, rows: int) -> float:
    """Seconds of one load (plan + run) of ``landing`` with ``engine``; it must commit ``rows``."""
    source = LandingFilesSource(path=landing, file_format="csv", schema=DDL)
    t0 = time.perf_counter()
    result = load_batch(
        LoadRequest(TableRef.parse(table), pipeline, f"{pipeline}-run"),
        source,
        ReadContext(spark_factory=lambda: spark),
        run=local_run(
            lambda: spark,
            TableRef.parse(table),
            source,
            settings=LoadSettings(run_id=pipeline, try_number=1, engine=engine),
        ),
    )
    seconds = time.perf_counter() - t0
    if result.outcome != "committed" or result.rows != rows:
        raise RuntimeError(f"{engine} load {pipeline}: {result.outcome}, {result.rows} rows, not {rows}")
    return seconds


def table_rows(table: str) -> int:
    """The rows a Delta table holds, from its live files' statistics (both engines write them)."""
    adds = pa.table(DeltaTable(table).get_add_actions(flatten=True))
    return int(pc.sum(adds["num_records"]).as_py() or 0)


def run(settings: Settings, spark: SparkSession, work: str) -> tuple[list[Row], dict[str, Any]]:
    if not os.environ.get(DELTA_SPARK_JARS_ENV):
        note = f"not measured: {DELTA_SPARK_JARS_ENV} does not name the Delta Spark jars"
        figure = "delta-spark engine against a plain Spark Delta write"
        return [Row("engines", figure, None, "s", note=note)], {}
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    out: list[Row] = []
    series: list[dict[str, Any]] = []
    warm = os.path.join(work, "in-warm")
    write_orders_csv(warm, 2_000, 2)
    for rows in settings.engine_rows:
        progress(f"engines: writing {fmt_int(rows)} rows of landing files")
        landing = os.path.join(work, f"in-{rows}")
        write_orders_csv(landing, rows, _files_for(rows))
        tables = {c: os.path.join(work, f"table-{c}-{rows}") for c in CONTENDERS}
        # Warm-up of each (JIT, class loading, file cache); it also creates each table.
        given = dict.fromkeys(CONTENDERS, 2_000)
        plain_delta_write(spark, warm, tables["plain"])
        for engine in ("delta-spark", "delta-rs"):
            eod_load(spark, warm, tables[engine], f"bench.engines.warm.{engine}", engine, 2_000)
        times: dict[str, list[float]] = {c: [] for c in CONTENDERS}
        for rep in range(settings.engine_reps):
            order = CONTENDERS[rep % 3 :] + CONTENDERS[: rep % 3]
            for c in order:
                if c == "plain":
                    times[c].append(plain_delta_write(spark, landing, tables[c]))
                else:
                    pipeline = f"bench.engines.{c}.{rows}.{rep}"
                    times[c].append(eod_load(spark, landing, tables[c], pipeline, c, rows))
                given[c] += rows
            progress(
                f"engines {fmt_int(rows)} rows, round {rep + 1}: "
                + ", ".join(f"{c} {times[c][-1]:.2f} s" for c in CONTENDERS)
            )
        for c in CONTENDERS:
            held = table_rows(tables[c])
            if held != given[c]:
                raise RuntimeError(f"the {c} table holds {held} rows, it was given {given[c]}")
        plain = statistics.median(times["plain"])
        note = f"{settings.engine_reps} rounds in rotating order; CSV with a schema, FAILFAST"
        out.append(row("engines", f"CSV, {fmt_int(rows)} rows: {LABELS['plain']}", plain, "s", note=note))
        for c in ("delta-spark", "delta-rs"):
            m = statistics.median(times[c])
            out.append(
                row(
                    "engines",
                    f"CSV, {fmt_int(rows)} rows: {LABELS[c]}",
                    m,
                    "s",
                    ratio=ratio_of(m, plain),
                    baseline="plain Delta write",
                    note="plan + run_load",
                )
            )
        series.append({"rows": rows, **times})
        for c in CONTENDERS:
            shutil.rmtree(tables[c], ignore_errors=True)
        shutil.rmtree(landing, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    return out, {"rounds": series}
