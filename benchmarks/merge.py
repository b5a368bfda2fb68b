"""A merge batch into a large table: airflow-eod's merge load against the same ``MERGE`` done
by Delta Spark without airflow-eod, side by side in one SparkSession (issue 22).

Once per run, Delta Spark writes a table of ``merge_rows`` rows (10M; QUICK 1M; ``--smoke``
20,000): ``id BIGINT`` (the key), a few payload columns and ``seq BIGINT`` (the ordering
column), one file per 250,000 ids in id order. For each case a change batch is written as
Parquet landing files: the changed keys (1%, 10% or 100% of them, spread over the table by a
hash of the key; and 1% of the newest keys, clustered in the table's last files) with a
greater ``seq``, among them a delete in a hundred (``op = 'D'``, kept as a tombstone, the
merge's default) and a stale update in a hundred (a smaller ``seq``: it must lose), plus new
keys for a hundredth of the changes. Keys are unique in a batch: Delta Spark's ``MERGE``
refuses a batch that matches one target row twice.

Each case copies the table twice (untimed) and merges the batch into one copy each, in
alternating order:

- airflow-eod: ``plan`` of a ``LandingFilesSource`` over the batch's Parquet files and
  :func:`airflow_eod.spark.load_job.run_load` with ``write_mode='merge'``, ``merge_keys=['id']``,
  ``order_by='seq'``, ``delete_when="op = 'D'"`` and the delta-rs engine, as a task runs it
  (the spec built as the tests build it, ``tests/support/helpers.py``);
- Delta Spark: ``DeltaTable.forPath(...).merge(batch, "t.id = s.id")`` with
  ``whenMatchedUpdateAll("s.seq > t.seq")`` and ``whenNotMatchedInsertAll()``: the same result,
  no marker, no exactly-once.

Measured: wall time, and from each merge's commit in the Delta log the files it removed
(rewritten), the files it added and the rows they hold (rows written). At the end of each case
both tables must hold the same rows as a reference computed with plain DataFrame operations
from the table and the batch (row count, distinct keys, and the sum of a 64-bit hash of every
row), or the area fails: a fast wrong merge is not a result. Needs the Delta Spark jars
(EOD_DELTA_SPARK_JARS); without them the area prints one row that says so.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark import merge_job
from airflow_eod.spark.load_job import run_load
from benchmarks.common import DELTA_SPARK_JARS_ENV, Row, Settings, fmt_int, progress, ratio_of, row
from tests.support.helpers import plan_for, spec_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DDL = "id BIGINT, name STRING, amount DECIMAL(12,2), status STRING, created DATE, seq BIGINT, op STRING"
COLUMNS = ["id", "name", "amount", "status", "created", "seq", "op"]
ROWS_PER_FILE = 250_000
WARM_ROWS = 20_000
MERGE_SETTINGS: dict[str, Any] = {
    "write_mode": "merge",
    "merge_keys": ["id"],
    "order_by": "seq",
    "delete_when": "op = 'D'",
    "engine": "delta-rs",
}
CONTENDERS = ("eod", "spark")
LABELS = {
    "eod": "airflow-eod merge load (delta-rs engine)",
    "spark": "Delta Spark MERGE (DeltaTable.forPath(...).merge)",
}


@dataclass(frozen=True)
class Case:
    """One change batch: ``fraction`` of the table's keys changed, spread over every file
    (a hash of the key picks them) or clustered in the newest keys (the table's last files).
    """

    name: str
    fraction: float
    clustered: bool = False

    @property
    def slug(self) -> str:
        return f"{self.fraction * 100:g}pct" + ("-clustered" if self.clustered else "")


CASES = (
    Case("1% of keys changed", 0.01),
    Case("10% of keys changed", 0.10),
    Case("100% of keys changed", 1.0),
    Case("1% of keys changed, clustered", 0.01, clustered=True),
)


def _files_for(rows: int) -> int:
    return max(1, rows // ROWS_PER_FILE)


def write_base(spark: SparkSession, path: str, rows: int) -> None:
    """The table both sides start from, written by Delta Spark: ids in order, one file per
    250,000 of them (a table appended in key order), every row at ``seq`` 1."""
    from pyspark.sql import functions as F

    ids = spark.range(0, rows, numPartitions=_files_for(rows))
    statuses = F.array(*[F.lit(s) for s in ("new", "paid", "shipped", "closed")])
    df = ids.select(
        F.col("id"),
        F.concat(F.lit("customer-"), (F.col("id") % 100_003).cast("string")).alias("name"),
        ((F.col("id") * 37 % 1_000_000) / 100).cast("decimal(12,2)").alias("amount"),
        F.element_at(statuses, (F.col("id") % 4 + 1).cast("int")).alias("status"),
        F.date_add(F.lit("2024-01-01").cast("date"), (F.col("id") % 700).cast("int")).alias("created"),
        F.lit(1).cast("bigint").alias("seq"),
        F.lit("I").alias("op"),
    )
    df.write.format("delta").save(path)


def change_batch(spark: SparkSession, rows: int, case: Case) -> DataFrame:
    """The batch of ``case`` against a base table of ``rows`` rows: one row per key."""
    from pyspark.sql import functions as F

    changed = int(rows * case.fraction)
    ids = spark.range(0, rows, numPartitions=_files_for(rows))
    if case.clustered:
        picked = ids.where(F.col("id") >= rows - changed)
    else:
        picked = ids.where(F.pmod(F.xxhash64("id", F.lit(7)), F.lit(10_000)) < round(case.fraction * 10_000))
    roll = F.pmod(F.xxhash64("id", F.lit(11)), F.lit(100))
    updates = picked.select(
        F.col("id"),
        F.concat(F.lit("customer-"), (F.col("id") % 100_003).cast("string"), F.lit("-v2")).alias("name"),
        ((F.col("id") * 41 % 1_000_000) / 100).cast("decimal(12,2)").alias("amount"),
        F.lit("updated").alias("status"),
        F.date_add(F.lit("2024-01-01").cast("date"), (F.col("id") % 700).cast("int")).alias("created"),
        # A stale update (smaller seq) in a hundred: both merges must keep the table's row.
        F.when(roll == 1, F.lit(0)).otherwise(F.lit(2)).cast("bigint").alias("seq"),
        F.when(roll == 0, F.lit("D")).otherwise(F.lit("U")).alias("op"),
    )
    fresh = spark.range(rows, rows + max(1, changed // 100), numPartitions=1).select(
        F.col("id"),
        F.concat(F.lit("customer-"), F.col("id").cast("string")).alias("name"),
        F.lit(1).cast("decimal(12,2)").alias("amount"),
        F.lit("new").alias("status"),
        F.lit("2025-01-01").cast("date").alias("created"),
        F.lit(2).cast("bigint").alias("seq"),
        F.lit("I").alias("op"),
    )
    return updates.unionByName(fresh)


def write_batch(spark: SparkSession, rows: int, case: Case, landing: str) -> None:
    """The batch of ``case`` as Parquet landing files (about 250,000 rows a file)."""
    batch = change_batch(spark, rows, case)
    batch.repartition(_files_for(int(rows * case.fraction * 1.01))).write.parquet(landing)


def reference(base: DataFrame, batch: DataFrame) -> DataFrame:
    """What the merged table must hold, computed with plain DataFrame operations: a batch row
    replaces its key's row when its ``seq`` is greater, or is new; tombstones stay rows."""
    from pyspark.sql import functions as F

    current = base.select("id", F.col("seq").alias("_table_seq"))
    winners = (
        batch.join(current, "id", "left")
        .where(F.col("_table_seq").isNull() | (F.col("seq") > F.col("_table_seq")))
        .drop("_table_seq")
    )
    return base.join(winners.select("id"), "id", "left_anti").unionByName(winners)


@dataclass(frozen=True)
class Checksum:
    rows: int
    keys: int
    hash_sum: int


def checksum(df: DataFrame) -> Checksum:
    """Row count, distinct keys and the sum of every row's xxhash64 (as a decimal: a long
    overflows), independent of row order and file layout."""
    from pyspark.sql import functions as F

    h = F.xxhash64(*[F.col(c) for c in COLUMNS]).cast("decimal(38,0)")
    got = df.agg(F.count(F.lit(1)), F.count_distinct("id"), F.sum(h)).first()
    assert got is not None
    return Checksum(int(got[0]), int(got[1]), int(got[2] or 0))


@dataclass(frozen=True)
class CommitStats:
    removed: int
    added: int
    rows_written: int
    bytes_written: int
    operation: str


def commit_stats(table: str, version: int) -> CommitStats:
    """What the commit ``version`` of ``table`` did, from its log entry: files removed
    (rewritten), files added, the rows and bytes they hold. Both writers put ``numRecords``
    in every ``add``'s statistics."""
    removed = added = rows = size = 0
    operation = ""
    with open(os.path.join(table, "_delta_log", f"{version:020d}.json")) as fh:
        for line in fh:
            action = json.loads(line)
            if "remove" in action:
                removed += 1
            elif "add" in action:
                added += 1
                size += int(action["add"]["size"])
                rows += int(json.loads(action["add"]["stats"])["numRecords"])
            elif "commitInfo" in action:
                operation = action["commitInfo"].get("operation", "")
    return CommitStats(removed, added, rows, size, operation)


def _newest_version(table: str) -> int:
    log = os.path.join(table, "_delta_log")
    return max(int(n.split(".")[0]) for n in os.listdir(log) if n.endswith(".json") and n[0].isdigit())


WHOLE = "merge_batch"
# The steps of the airflow-eod merge that are timed from outside (module, name, label), by the
# names ``merge_batch`` calls them with (``load_job._write`` imports ``merge_batch`` when it
# runs). A refactor that moves one fails the smoke run (tests/tooling/test_bench_smoke.py)
# instead of ``make bench``.
EOD_STEPS: tuple[tuple[Any, str, str], ...] = (
    (merge_job, "merge_batch", WHOLE),
    (merge_job, "check_batch", "check_batch: null keys counted (a Spark job)"),
    (merge_job, "_probe", "KeyProbe: the batch's keys collected to the driver and sorted"),
    (merge_job, "stage_dataframe", "read of the rewritten files + fold + staging write (a Spark job)"),
    (merge_job, "commit_batch", "commit (delta-rs: removes, adds, marker; commit record)"),
)


class _Clock:
    """Seconds per wrapped step, added up over the calls of one load."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - t0

        return wrapper


@contextmanager
def _instrumented() -> Iterator[_Clock]:
    clock = _Clock()
    saved = [(module, name, getattr(module, name)) for module, name, _label in EOD_STEPS]
    try:
        for module, name, label in EOD_STEPS:
            setattr(module, name, clock.wrap(getattr(module, name), label))
        yield clock
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)


def eod_merge(
    spark: SparkSession, landing: str, table: str, pipeline: str, rows: int
) -> tuple[float, _Clock]:
    """Seconds of one airflow-eod merge load (plan + ``run_load``); it must commit ``rows``
    batch rows."""
    source = LandingFilesSource(path=landing, file_format="parquet", schema=DDL)
    with _instrumented() as clock:
        t0 = time.perf_counter()
        plan = plan_for(source, table, f"{pipeline}-run", pipeline=pipeline)
        result = run_load(spark, spec_for(source, table, plan, run_id=pipeline, **MERGE_SETTINGS))
        seconds = time.perf_counter() - t0
    if result.outcome != "committed" or result.rows != rows:
        raise RuntimeError(f"merge load {pipeline}: {result.outcome}, {result.rows} rows, not {rows}")
    return seconds, clock


def spark_merge(spark: SparkSession, landing: str, table: str) -> float:
    """Seconds of Delta Spark's own MERGE of the batch's files into ``table``."""
    from delta.tables import DeltaTable as SparkDeltaTable

    t0 = time.perf_counter()
    batch = spark.read.parquet(landing)
    (
        SparkDeltaTable.forPath(spark, table)
        .alias("t")
        .merge(batch.alias("s"), "t.id = s.id")
        .whenMatchedUpdateAll(condition="s.seq > t.seq")
        .whenNotMatchedInsertAll()
        .execute()
    )
    return time.perf_counter() - t0


def _run_pair(
    spark: SparkSession, work: str, base: str, landing: str, tag: str, batch_rows: int, eod_first: bool
) -> tuple[dict[str, float], dict[str, str], _Clock]:
    """Both merges of one batch into fresh copies of ``base``; seconds and tables."""
    tables = {c: os.path.join(work, f"table-{c}-{tag}") for c in CONTENDERS}
    for c in CONTENDERS:
        shutil.rmtree(tables[c], ignore_errors=True)
        shutil.copytree(base, tables[c])
    seconds: dict[str, float] = {}
    clock = _Clock()
    for c in CONTENDERS if eod_first else CONTENDERS[::-1]:
        spark.catalog.clearCache()
        if c == "eod":
            seconds[c], clock = eod_merge(spark, landing, tables[c], f"bench.merge.{tag}", batch_rows)
        else:
            seconds[c] = spark_merge(spark, landing, tables[c])
    return seconds, tables, clock


def _check_equal(spark: SparkSession, tables: dict[str, str], want: Checksum, label: str) -> None:
    for c, path in tables.items():
        got = checksum(spark.read.format("delta").load(path))
        if got != want:
            raise RuntimeError(f"{label}: the {c} table holds {got}, the reference {want}")


def run(settings: Settings, spark: SparkSession, work: str) -> tuple[list[Row], dict[str, Any]]:
    if not os.environ.get(DELTA_SPARK_JARS_ENV):
        note = f"not measured: {DELTA_SPARK_JARS_ENV} does not name the Delta Spark jars"
        return [Row("merge", "merge load against a Delta Spark MERGE", None, "s", note=note)], {}
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    rows = settings.merge_rows
    size = f"{fmt_int(rows)}-row table"
    if rows > WARM_ROWS:
        # An untimed merge of each first (class loading, JIT, Delta's MERGE code paths).
        progress(f"merge: warm-up on {fmt_int(WARM_ROWS)} rows")
        warm_base, warm_landing = os.path.join(work, "base-warm"), os.path.join(work, "in-warm")
        write_base(spark, warm_base, WARM_ROWS)
        write_batch(spark, WARM_ROWS, Case("warm-up", 0.1), warm_landing)
        warm_rows = spark.read.parquet(warm_landing).count()
        _run_pair(spark, work, warm_base, warm_landing, "warm", warm_rows, eod_first=True)

    progress(f"merge: writing the {size} with Delta Spark")
    base = os.path.join(work, "base")
    t0 = time.perf_counter()
    write_base(spark, base, rows)
    build = time.perf_counter() - t0
    base_files = commit_stats(base, 0).added
    out: list[Row] = [
        Row("merge", f"{size}: written by Delta Spark", build, "s", note=f"{base_files} files, untimed below")
    ]
    series: list[dict[str, Any]] = []
    for i, case in enumerate(CASES):
        landing = os.path.join(work, f"in-{case.slug}")
        write_batch(spark, rows, case, landing)
        batch = spark.read.parquet(landing)
        batch_rows = batch.count()
        want = checksum(reference(spark.read.format("delta").load(base), batch))
        per: dict[str, list[float]] = {c: [] for c in CONTENDERS}
        stats: dict[str, CommitStats] = {}
        steps: list[dict[str, float]] = []
        for rep in range(settings.merge_reps):
            eod_first = (i + rep) % 2 == 0
            seconds, tables, clock = _run_pair(
                spark, work, base, landing, f"{case.slug}-{rep}", batch_rows, eod_first
            )
            for c in CONTENDERS:
                per[c].append(seconds[c])
                stats[c] = commit_stats(tables[c], _newest_version(tables[c]))
            steps.append(dict(clock.seconds))
            _check_equal(spark, tables, want, f"{case.name}, round {rep + 1}")
            progress(
                f"merge {case.name} ({fmt_int(batch_rows)} batch rows), round {rep + 1}: "
                + ", ".join(f"{c} {seconds[c]:.2f} s" for c in CONTENDERS)
                + f"; both tables hold {fmt_int(want.rows)} rows equal to the reference"
            )
            for path in tables.values():
                shutil.rmtree(path, ignore_errors=True)
        out += _case_rows(case, size, batch_rows, per, stats, steps, want, settings.merge_reps)
        series.append(
            {
                "case": case.name,
                "batch_rows": batch_rows,
                "seconds": per,
                "commits": {c: vars(s) for c, s in stats.items()},
                "eod_steps": steps,
            }
        )
        shutil.rmtree(landing, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    return out, {"table_rows": rows, "table_files": base_files, "cases": series}


def _case_rows(
    case: Case,
    size: str,
    batch_rows: int,
    per: dict[str, list[float]],
    stats: dict[str, CommitStats],
    steps: list[dict[str, float]],
    want: Checksum,
    reps: int,
) -> list[Row]:
    head = f"{size}, {case.name} ({fmt_int(batch_rows)} batch rows)"
    spark_s = statistics.median(per["spark"])
    eod_s = statistics.median(per["eod"])
    how = f"{reps} rounds, order alternating; median" if reps > 1 else "one round"
    out = [
        Row("merge", f"{head}: {LABELS['spark']}, wall", spark_s, "s", note=how),
        row(
            "merge",
            f"{head}: {LABELS['eod']}, wall",
            eod_s,
            "s",
            ratio=ratio_of(eod_s, spark_s),
            baseline="Delta Spark MERGE",
            note="plan + run_load",
        ),
    ]
    eod, spark = stats["eod"], stats["spark"]
    for figure, unit, a, b in (
        ("files rewritten (removed)", "files", eod.removed, spark.removed),
        ("files written", "files", eod.added, spark.added),
        ("rows written", "rows", eod.rows_written, spark.rows_written),
    ):
        written = figure == "files written"
        b_note = f"{spark.bytes_written / 2**20:,.1f} MiB" if written else ""
        a_note = f"{eod.bytes_written / 2**20:,.1f} MiB" if written else ""
        out.append(Row("merge", f"{head}: {figure}, Delta Spark MERGE", b, unit, note=b_note))
        out.append(
            row(
                "merge",
                f"{head}: {figure}, airflow-eod",
                a,
                unit,
                ratio=ratio_of(a, b),
                baseline="Delta Spark MERGE",
                note=a_note,
            )
        )
    out.append(
        Row(
            "merge",
            f"{head}: both tables equal the reference",
            want.rows,
            "rows",
            note=f"{fmt_int(want.keys)} distinct keys; row count, keys and a hash sum of every row agree",
        )
    )
    # Where the airflow-eod load's time went, in its last round.
    last = steps[-1]
    whole = last.get(WHOLE, 0.0)
    parts = {k: v for k, v in last.items() if k != WHOLE}
    for label, value in parts.items():
        out.append(Row("merge", f"{head}: airflow-eod step: {label}", value, "s", note="last round"))
    rest = whole - sum(parts.values())
    out.append(
        Row(
            "merge",
            f"{head}: airflow-eod step: newest_per_key (window; persisted and counted), snapshot",
            rest,
            "s",
            note="merge_batch less the steps above; last round",
        )
    )
    outside = per["eod"][-1] - whole
    note = "plan, ask, retention check, read setup, cleanup; last round"
    out.append(Row("merge", f"{head}: airflow-eod step: outside merge_batch", outside, "s", note=note))
    return out
