"""Delta Spark and airflow-eod on the same tables (issue 19, item 3).

Real Delta Spark (the jars named by EOD_DELTA_SPARK_JARS, in the session's SparkSession):

1. tables written by airflow-eod's default engine (delta-rs commits) are read by Delta Spark
   (``spark.read.format("delta")``, ``DESCRIBE HISTORY``, time travel), with the rows
   deltalake reads;
2. Delta Spark as the other writer between airflow-eod's loads (appends, OPTIMIZE and
   Z-ORDER, VACUUM, DELETE/UPDATE/MERGE, classic and V2 checkpoints, log cleanup, ADD
   COLUMNS, property changes): every batch stays exactly once, and the ask and ``verify``
   stay right;
4. Delta Spark's own idempotent writes (``txnAppId``/``txnVersion``) beside airflow-eod's
   markers, and a pipeline switching engines between runs, both ways.

Each test ends with the row-by-row check against the landing files (plus the rows Delta
Spark wrote itself, where it wrote some) and with ``verify`` (the audit).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.audit.verify import AuditReport, audit_table
from airflow_eod.core.errors import SchemaMismatchError, UnsupportedTableError
from airflow_eod.core.planlog.store import Plan
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.compare import compare_rows, read_delta_rows, read_landing_rows
from airflow_eod.examples.sample_data import ORDERS_ARROW_SCHEMA, ORDERS_COLUMNS, write_order_files
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import ORDERS_DDL, check, commit_log, lost_races, orders_source, plan_for, spec_for

pytestmark = [
    pytest.mark.spark,
    pytest.mark.delta_spark,
]

ROWS = 10  # rows per landing file; batch n holds order ids n*1000 .. n*1000+ROWS-1


# -- airflow-eod's side: load, retry, check --------------------------------------------
def _land(landing: str, n: int, files: int = 1) -> None:
    write_order_files(landing, files, ROWS, first_id=n * 1000)


def _load(
    spark: Any, landing: str, table: str, n: int, *, engine: str = "delta-rs", files: int = 1, **kw: Any
) -> Plan:
    """Land batch ``n``'s files and load them as the pipeline's next batch (``engine``)."""
    _land(landing, n, files)
    source = orders_source(landing)
    plan = plan_for(source, table, run=f"run-{n}")
    got = run_load(spark, spec_for(source, table, plan, engine=engine, **kw))
    assert got.outcome == "committed", got
    assert got.rows == ROWS * files
    return plan


def _retry(spark: Any, landing: str, table: str, plan: Plan, *, engine: str = "delta-rs") -> None:
    """A re-run of an old batch (a new try): it must find the batch committed and write nothing."""
    before = DeltaTable(table).version()
    got = run_load(spark, spec_for(orders_source(landing), table, plan, try_number=2, engine=engine))
    assert got.outcome == "already_committed", got
    assert DeltaTable(table).version() == before


def _check(table: str, landing: str, theirs: str | None = None) -> None:
    """The row-by-row check: every landing row once, and (``theirs``) the rows Delta Spark
    appended on its own, once each, and nothing else."""
    if theirs is None:
        cmp = check(table, landing)
    else:
        want = read_landing_rows(landing, "csv", ORDERS_COLUMNS, ORDERS_ARROW_SCHEMA)
        want += read_landing_rows(theirs, "csv", ORDERS_COLUMNS, ORDERS_ARROW_SCHEMA)
        cmp = compare_rows(want, read_delta_rows(table, ORDERS_COLUMNS))
    assert cmp.exact, cmp.describe()


def _verify(table: str, *, warnings: frozenset[str] | set[str] = frozenset()) -> AuditReport:
    """``verify`` passes: no error; the warnings are of the kinds named, no others."""
    report = audit_table(table)
    assert report.ok, [f.message for f in report.errors]
    kinds = {f.kind for f in report.findings}
    assert kinds <= set(warnings), [f.message for f in report.findings]
    return report


# -- Delta Spark's side ----------------------------------------------------------------
def _sql(spark: Any, text: str, table: str) -> list[Any]:
    """Run Delta Spark SQL on the table (``{t}`` in ``text`` is the table)."""
    return list(spark.sql(text.format(t=f"delta.`{table}`")).collect())


def _spark_append(spark: Any, table: str, theirs: str, n: int) -> None:
    """Delta Spark appends rows of its own (written to ``theirs`` too, for the check)."""
    write_order_files(theirs, 1, 5, first_id=n, seed=99)
    df = spark.read.csv(theirs, header=True, schema=ORDERS_DDL)
    df = df.where(f"order_id >= {n} AND order_id < {n + 5}")
    df.write.format("delta").mode("append").save(table)


def _canon_spark(df: Any) -> list[tuple[Any, ...]]:
    """Spark's rows in a form both readers agree on (timestamps as UTC microseconds)."""
    out = df.selectExpr(
        "order_id",
        "customer",
        "CAST(amount AS STRING)",
        "CAST(order_date AS STRING)",
        "unix_micros(ordered_at)",
    ).collect()
    return sorted(tuple(r) for r in out)


def _canon_rs(table: str, version: int | None = None) -> list[tuple[Any, ...]]:
    """deltalake's rows, in the form of :func:`_canon_spark`."""
    dt = DeltaTable(table) if version is None else DeltaTable(table, version=version)
    rows = dt.to_pyarrow_table().select(ORDERS_COLUMNS).to_pylist()
    return sorted(
        (
            r["order_id"],
            r["customer"],
            str(r["amount"]),
            r["order_date"].isoformat(),
            (r["ordered_at"].timestamp() * 1_000_000).__round__(),
        )
        for r in rows
    )


@contextmanager
def _conf(spark: Any, **settings: str) -> Iterator[None]:
    """Session confs for one step (the session is shared by the whole test session)."""
    keys = {k.replace("__", "."): v for k, v in settings.items()}
    before = {k: spark.conf.get(k, None) for k in keys}
    for k, v in keys.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


# == 1. Delta Spark reads what airflow-eod wrote ========================================
def test_delta_spark_reads_history_and_time_travel_of_a_delta_rs_table(
    spark: Any, landing: str, table: str
) -> None:
    plans = [_load(spark, landing, table, n, files=n) for n in (1, 2, 3)]
    _retry(spark, landing, table, plans[1])
    versions: list[int] = []
    for plan in plans:
        landed = ask(TableRef.parse(table), plan.key).table_version
        assert landed is not None
        versions.append(landed)
    assert versions == [0, 1, 2], versions

    now = spark.read.format("delta").load(table)
    assert _canon_spark(now) == _canon_rs(table)
    assert now.count() == ROWS * 6

    history = {r["version"]: r for r in _sql(spark, "DESCRIBE HISTORY {t}", table)}
    assert sorted(history) == versions
    for plan, version in zip(plans, versions, strict=True):
        meta = history[version]["userMetadata"]
        assert meta and plan.batch_key in meta, meta
        # delta-rs names its first commit CREATE TABLE, the others WRITE.
        assert history[version]["operation"] == ("CREATE TABLE" if version == 0 else "WRITE")

    for version in versions:
        old = spark.read.format("delta").option("versionAsOf", version).load(table)
        assert _canon_spark(old) == _canon_rs(table, version)
        assert old.count() == ROWS * sum(range(1, version + 2))

    # Delta Spark sees airflow-eod's markers as its own txn state: a write that names a
    # batch's app id at its generation is skipped (Delta Spark's idempotent write).
    for plan in plans:
        spark.read.csv(landing, header=True, schema=ORDERS_DDL).limit(1).write.format("delta").mode(
            "append"
        ).option("txnAppId", plan.key.app_id).option("txnVersion", "0").save(table)
    assert DeltaTable(table).version() == versions[-1]
    _check(table, landing)
    _verify(table)


# == 2. Delta Spark as the other writer between airflow-eod's loads =====================
def _loads_go_on(spark: Any, landing: str, table: str, plans: list[Plan], n: int) -> None:
    """After the other writer: the next batch loads, and every earlier batch's re-run (a
    retry, a cleared task) finds it committed and writes nothing."""
    plans.append(_load(spark, landing, table, n))
    for plan in plans:
        _retry(spark, landing, table, plan)
        assert ask(TableRef.parse(table), plan.key).committed


def test_appends_optimize_zorder_and_vacuum_by_delta_spark_keep_every_batch_once(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    theirs = str(tmp_path / "theirs")
    plans = [_load(spark, landing, table, n) for n in (1, 2)]
    _spark_append(spark, table, theirs, 900_000)
    _loads_go_on(spark, landing, table, plans, 3)
    _sql(spark, "OPTIMIZE {t}", table)
    assert DeltaTable(table).history(1)[0]["operation"] == "OPTIMIZE"
    _loads_go_on(spark, landing, table, plans, 4)
    _spark_append(spark, table, theirs, 900_100)
    _sql(spark, "OPTIMIZE {t} ZORDER BY (order_id)", table)
    assert DeltaTable(table).history(1)[0]["operation"] == "OPTIMIZE"
    _loads_go_on(spark, landing, table, plans, 5)
    # Every batch's first files were rewritten by an OPTIMIZE; VACUUM really deletes them now.
    first = os.path.join(table, ask(TableRef.parse(table), plans[0].key).record.files[0])  # type: ignore[union-attr]
    assert os.path.exists(first)
    with _conf(spark, spark__databricks__delta__retentionDurationCheck__enabled="false"):
        _sql(spark, "VACUUM {t} RETAIN 0 HOURS", table)
    assert not os.path.exists(first), "the premise: VACUUM deleted the compacted batch files"
    _loads_go_on(spark, landing, table, plans, 6)
    _check(table, landing, theirs)
    # OPTIMIZE moved batch rows: warnings, never "missing" or "doubled".
    report = _verify(table, warnings={"compacted_file", "batch_file_compacted", "foreign_file"})
    assert {b.batch_key for b in report.batches} == {p.batch_key for p in plans}


def test_update_merge_and_delete_by_delta_spark_rewrite_batch_files(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    theirs = str(tmp_path / "theirs")
    plans = [_load(spark, landing, table, n) for n in (1, 2, 3)]
    # UPDATE that changes nothing but rewrites batch 1's file (dataChange=true).
    _sql(spark, "UPDATE {t} SET customer = customer WHERE order_id = 1000", table)
    assert DeltaTable(table).history(1)[0]["operation"] == "UPDATE"
    _loads_go_on(spark, landing, table, plans, 4)
    # MERGE: one of batch 2's rows matched (updated to itself), Delta Spark's own rows inserted.
    write_order_files(theirs, 1, 5, first_id=900_000, seed=99)
    mine = spark.read.csv(landing, header=True, schema=ORDERS_DDL).where("order_id = 2000")
    src = spark.read.csv(theirs, header=True, schema=ORDERS_DDL).unionByName(mine)
    src.createOrReplaceTempView("interop_merge_src")
    _sql(
        spark,
        "MERGE INTO {t} AS t USING interop_merge_src AS s ON t.order_id = s.order_id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *",
        table,
    )
    assert DeltaTable(table).history(1)[0]["operation"] == "MERGE"
    _loads_go_on(spark, landing, table, plans, 5)
    _check(table, landing, theirs)
    # No row lost, none doubled: the UPDATE and the MERGE moved batch 1's and batch 2's rows
    # into files of their own, and the rows the MERGE inserted count as Delta Spark's.
    report = _verify(table, warnings={"foreign_file", "batch_file_rewritten"})
    rewritten = {f.batch_key for f in report.findings if f.kind == "batch_file_rewritten"}
    assert rewritten == {plans[0].batch_key, plans[1].batch_key}
    # DELETE of one of batch 3's rows: the row is gone for real, and verify says so.
    _sql(spark, "DELETE FROM {t} WHERE order_id = 3000", table)
    _loads_go_on(spark, landing, table, plans, 6)
    want = [r for r in read_landing_rows(landing, "csv", ORDERS_COLUMNS, ORDERS_ARROW_SCHEMA) if r[0] != 3000]
    want += read_landing_rows(theirs, "csv", ORDERS_COLUMNS, ORDERS_ARROW_SCHEMA)
    cmp = compare_rows(want, read_delta_rows(table, ORDERS_COLUMNS))
    assert cmp.exact, cmp.describe()
    report = audit_table(table)
    errors = {(f.kind, f.batch_key) for f in report.errors}
    assert errors == {("batch_file_not_live", plans[2].batch_key), ("row_total_mismatch", None)}, errors
    assert "1 rows fewer" in next(f.message for f in report.errors if f.kind == "row_total_mismatch")


@pytest.mark.parametrize("deleted", ["their_row", "a_batch_row"])
def test_a_delete_in_files_optimize_mixed_is_a_warning_that_says_whose_rows_are_unknown(
    spark: Any, landing: str, table: str, tmp_path: Any, deleted: str
) -> None:
    """Delta Spark OPTIMIZE puts batch rows and its own rows in one file, then DELETEs one
    row of that file. Deleting one of its own rows lost nothing of airflow-eod's: verify
    must raise no error (it did: row_total_mismatch, a false alarm). Deleting a batch row
    looks the same in the log; verify reports the same warning, which says whose rows went
    cannot be told, and the row-by-row check with the source is what finds it."""
    theirs = str(tmp_path / "theirs")
    plans = [_load(spark, landing, table, 1)]
    _spark_append(spark, table, theirs, 900_000)
    plans.append(_load(spark, landing, table, 2))
    _sql(spark, "OPTIMIZE {t}", table)
    gone = 900_001 if deleted == "their_row" else 2003
    _sql(spark, f"DELETE FROM {{t}} WHERE order_id = {gone}", table)
    _loads_go_on(spark, landing, table, plans, 3)
    want = read_landing_rows(landing, "csv", ORDERS_COLUMNS, ORDERS_ARROW_SCHEMA)
    want += read_landing_rows(theirs, "csv", ORDERS_COLUMNS, ORDERS_ARROW_SCHEMA)
    cmp = compare_rows([r for r in want if r[0] != gone], read_delta_rows(table, ORDERS_COLUMNS))
    assert cmp.exact, cmp.describe()
    kinds = {"compacted_file", "batch_file_compacted", "foreign_file", "rows_deleted_unattributed"}
    report = _verify(table, warnings=kinds)
    (found,) = [f for f in report.findings if f.kind == "rows_deleted_unattributed"]
    assert "1 fewer" in found.message and "commit(s)" in found.message, found.message
    # A DELETE of a row in a file that holds only batch rows is still told apart: an error.
    _sql(spark, "DELETE FROM {t} WHERE order_id = 3001", table)  # a batch 3 row, in its own file
    assert {f.kind for f in audit_table(table).errors} >= {"batch_file_not_live"}


ODD_CUSTOMERS = ["日", "é", "ü ß", "a%b", "plain"]


def _land_odd(landing: str, n: int) -> None:
    """Batch ``n``'s landing file: one row per customer of :data:`ODD_CUSTOMERS`."""
    os.makedirs(landing, exist_ok=True)
    with open(os.path.join(landing, f"orders-odd-{n}.csv"), "w") as fh:
        fh.write("order_id,customer,amount,order_date,ordered_at\n")
        for i, who in enumerate(ODD_CUSTOMERS):
            fh.write(f"{n * 1000 + i},{who},{i + 1}.50,2026-11-0{i + 1},2026-11-0{i + 1}T10:00:00.000000Z\n")


def test_both_engines_maintain_files_under_non_ascii_partition_values(
    spark: Any, landing: str, table: str
) -> None:
    """Two batches loaded by the delta-rs engine into partitions whose values are not ASCII,
    then deltalake's OPTIMIZE and Delta Spark's VACUUM (RETAIN 0 HOURS).

    Was a defect twice over (found by the issue 19 chaos runs with Delta Spark): with
    ``customer=日/...`` on disk, an ``add`` that spelled it ``customer=%E6%97%A5/...`` made
    Delta Spark's VACUUM delete the live files (every reader lost the rows), and one that
    spelled it ``customer=日/...`` made deltalake's OPTIMIZE leave them live beside their
    rewrite (deltalake read every row twice): each writer matches paths by its own spelling.
    The partition folders are now plain ASCII on disk (``customer=%E6%97%A5``), which every
    writer spells alike."""
    plans = []
    for n in (1, 2):
        _land_odd(landing, n)
        source = orders_source(landing)
        plans.append(plan_for(source, table, run=f"run-{n}"))
        assert run_load(spark, spec_for(source, table, plans[-1], partition_by=["customer"])).rows == 5
    log_dir = os.path.join(table, "_delta_log")
    adds = [
        json.loads(line)["add"]["path"]
        for name in sorted(os.listdir(log_dir))
        if name.endswith(".json")
        for line in open(os.path.join(log_dir, name), encoding="utf-8")
        if '"add"' in line
    ]
    # Spark's escape of 'a%b' is 'a%25b' on disk; the other odd names are percent-encoded by
    # airflow-eod on disk; the log encodes each '%' once more.
    spelled = {part for p in adds for part in p.split("/") if part.startswith("customer=")}
    want = {"customer=%25E6%2597%25A5", "customer=%25C3%25A9", "customer=%25C3%25BC%2520%25C3%259F"}
    assert spelled == want | {"customer=a%2525b", "customer=plain"}, spelled
    assert all(re.fullmatch(r"[A-Za-z0-9._=%/-]+", p) for p in adds), adds
    DeltaTable(table).optimize.compact()
    assert sorted(_canon_rs(table)) == _canon_spark(spark.read.format("delta").load(table))
    with _conf(spark, spark__databricks__delta__retentionDurationCheck__enabled="false"):
        _sql(spark, "VACUUM {t} RETAIN 0 HOURS", table)
    # deltalake gives local files as plain paths, already decoded.
    missing = [p for p in DeltaTable(table).file_uris() if not os.path.exists(p)]
    assert not missing, missing
    for plan in plans:
        _retry(spark, landing, table, plan)
    _check(table, landing)
    spark.catalog.clearCache()
    assert len(spark.read.format("delta").load(table).collect()) == 10  # the rows read, not counted
    _verify(table, warnings={"batch_file_compacted", "compacted_file"})


def _log_files(table: str) -> list[str]:
    return sorted(os.listdir(os.path.join(table, "_delta_log")))


def test_delta_spark_multi_part_checkpoints_and_log_cleanup_between_loads(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    theirs = str(tmp_path / "theirs")
    plans = [_load(spark, landing, table, n) for n in (1, 2)]
    # A checkpoint in one part per action (multi-part), every second commit.
    with _conf(spark, spark__databricks__delta__checkpoint__partSize="1"):
        _sql(spark, "ALTER TABLE {t} SET TBLPROPERTIES ('delta.checkpointInterval' = '2')", table)
        version = DeltaTable(table).version()
        parts = [f for f in _log_files(table) if f.startswith(f"{version:020d}.checkpoint.")]
        assert len(parts) > 1, _log_files(table)
        _loads_go_on(spark, landing, table, plans, 3)
        _loads_go_on(spark, landing, table, plans, 4)
        # Log cleanup: the old commits are past a short retention (Delta's cut-off is a day
        # boundary, so they are made three days old), and Delta Spark's next checkpoint
        # deletes them.
        _sql(
            spark,
            "ALTER TABLE {t} SET TBLPROPERTIES ('delta.logRetentionDuration' = 'interval 1 hours', "
            "'delta.deletedFileRetentionDuration' = 'interval 1 hours')",
            table,
        )
        old = [f for f in _log_files(table) if f.endswith(".json")]
        for name in old:
            os.utime(os.path.join(table, "_delta_log", name), (1, 1))
        for n in range(3):
            _spark_append(spark, table, theirs, 900_000 + 100 * n)
        assert f"{0:020d}.json" not in _log_files(table), "the premise: Delta Spark cleaned up the log"
        _loads_go_on(spark, landing, table, plans, 5)
    _check(table, landing, theirs)
    _verify(table, warnings={"foreign_file"})


def _check_by_spark(spark: Any, table: str, landing: str) -> None:
    """The row-by-row check read by Delta Spark (deltalake cannot read every table)."""
    want = _canon_spark(spark.read.csv(landing, header=True, schema=ORDERS_DDL))
    cmp = compare_rows(want, _canon_spark(spark.read.format("delta").load(table)))
    assert cmp.exact, cmp.describe()


def test_v2_checkpoints_by_delta_spark(spark: Any, landing: str, table: str) -> None:
    """``delta.checkpointPolicy = v2`` turns on the table feature v2Checkpoint (reader and
    writer): Delta Spark's checkpoints are a top-level file and sidecars. The ask reads such
    a table; the delta-rs engine refuses to commit to it, naming the feature, and the
    pipeline goes on with engine='delta-spark'."""
    plans = [_load(spark, landing, table, n) for n in (1, 2)]
    _sql(
        spark,
        "ALTER TABLE {t} SET TBLPROPERTIES "
        "('delta.checkpointPolicy' = 'v2', 'delta.checkpointInterval' = '2')",
        table,
    )
    assert "v2Checkpoint" in (DeltaTable(table).protocol().reader_features or [])
    logs = _log_files(table)
    assert any(".checkpoint." in f and f.endswith(".json") for f in logs) and "_sidecars" in logs, logs
    sidecars = os.listdir(os.path.join(table, "_delta_log", "_sidecars"))
    assert sidecars, "the premise: a checkpoint with sidecars"
    for plan in plans:
        _retry(spark, landing, table, plan)
    _land(landing, 3)
    source = orders_source(landing)
    plan = plan_for(source, table, run="run-3")
    before = DeltaTable(table).version()
    with pytest.raises(UnsupportedTableError, match="v2Checkpoint") as err:
        run_load(spark, spec_for(source, table, plan))
    assert not err.value.retryable and DeltaTable(table).version() == before
    got = run_load(spark, spec_for(source, table, plan, try_number=2, engine="delta-spark"))
    assert got.outcome == "committed"
    plans.append(plan)
    plans.append(_load(spark, landing, table, 4, engine="delta-spark"))  # a v2 checkpoint at 4
    plans.append(_load(spark, landing, table, 5, engine="delta-spark"))
    for plan in plans:
        _retry(spark, landing, table, plan)
        _retry(spark, landing, table, plan, engine="delta-spark")
    _check_by_spark(spark, table, landing)
    _verify(table)


def test_add_columns_and_property_changes_by_delta_spark(spark: Any, landing: str, table: str) -> None:
    plans = [_load(spark, landing, table, n) for n in (1, 2)]
    _sql(spark, "ALTER TABLE {t} ADD COLUMNS (note STRING)", table)
    _land(landing, 3)
    source = orders_source(landing)
    plan = plan_for(source, table, run="run-3")
    with pytest.raises(SchemaMismatchError, match="schema_drift='add_columns'"):
        run_load(spark, spec_for(source, table, plan))
    got = run_load(spark, spec_for(source, table, plan, try_number=2, schema_drift="add_columns"))
    assert got.outcome == "committed"
    plans.append(plan)
    for p in plans:
        _retry(spark, landing, table, p)
    _sql(
        spark,
        "ALTER TABLE {t} SET TBLPROPERTIES ('team.owner' = 'finance', "
        "'delta.logRetentionDuration' = 'interval 60 days', 'delta.checkpointInterval' = '3')",
        table,
    )
    plans.append(_load(spark, landing, table, 4, schema_drift="add_columns"))
    plans.append(_load(spark, landing, table, 5, schema_drift="add_columns"))
    for p in plans:
        _retry(spark, landing, table, p)
    config = DeltaTable(table).metadata().configuration
    assert config["team.owner"] == "finance" and config["delta.checkpointInterval"] == "3"
    notes = spark.read.format("delta").load(table).where("note IS NOT NULL").count()
    assert notes == 0
    _check(table, landing)
    _verify(table)


def test_a_batch_appended_again_by_delta_spark_is_seen_by_verify_only_as_the_same_bytes(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    """Delta Spark appends batch 1's rows again, read from the same source file. airflow-eod's
    retry of batch 1 adds no further copy. ``verify`` counts rows and compares file bytes, it
    does not compare rows with the source: rows written again in a file of other bytes (here
    with one row of Delta Spark's own) are another writer's rows to it (``foreign_file``, a
    warning), and only the row-by-row check finds the copy; a file of the very same bytes
    (Spark writes the same rows the same way) is ``duplicate_file_content``, an error."""
    theirs = str(tmp_path / "theirs")
    plans = [_load(spark, landing, table, n) for n in (1, 2)]
    batch1 = spark.read.csv(os.path.join(landing, "orders-001000-0000.csv"), header=True, schema=ORDERS_DDL)
    write_order_files(theirs, 1, 1, first_id=900_000, seed=99)
    mixed = batch1.unionByName(spark.read.csv(theirs, header=True, schema=ORDERS_DDL)).coalesce(1)
    mixed.write.format("delta").mode("append").save(table)
    _loads_go_on(spark, landing, table, plans, 3)
    want = read_landing_rows(landing, "csv", ORDERS_COLUMNS, ORDERS_ARROW_SCHEMA)
    want += read_landing_rows(theirs, "csv", ORDERS_COLUMNS, ORDERS_ARROW_SCHEMA)
    cmp = compare_rows(want, read_delta_rows(table, ORDERS_COLUMNS))
    assert not cmp.missing and not cmp.unexpected
    assert sorted(r[0] for r in cmp.duplicates) == list(range(1000, 1000 + ROWS))
    report = _verify(table, warnings={"foreign_file"})
    assert [f.kind for f in report.findings] == ["foreign_file"]
    # The same rows again, alone: Spark writes the bytes of batch 1's own file.
    batch1.write.format("delta").mode("append").save(table)
    _retry(spark, landing, table, plans[0])
    report = audit_table(table)
    dup = [f for f in report.errors if f.kind == "duplicate_file_content"]
    assert [f.batch_key for f in dup] == [plans[0].batch_key], [f.message for f in report.findings]


# -- attacks: Delta Spark racing airflow-eod's commit, and VACUUM under an attempt --------
def test_delta_spark_optimize_taking_the_version_airflow_eod_commits_makes_it_ask_again(
    spark: Any, landing: str, table: str, monkeypatch: Any
) -> None:
    """Both commit the next version: Delta Spark's OPTIMIZE wins it (it runs between
    airflow-eod's reading of the table and its put-if-absent of the next commit), so
    airflow-eod's put fails, it asks again, and commits the batch at the version after."""
    from airflow_eod.core import load_commit as commit_mod

    plans = [_load(spark, landing, table, n) for n in (1, 2)]
    real = commit_mod.write_commit
    raced: list[int] = []

    def optimize_first(table_log: Any, *args: Any, **kw: Any) -> bool:
        if not raced:
            raced.append(table_log.version() + 1)
            _sql(spark, "OPTIMIZE {t}", table)
            assert DeltaTable(table).version() == raced[0], "the premise: OPTIMIZE took the version"
        return bool(real(table_log, *args, **kw))

    monkeypatch.setattr(commit_mod, "write_commit", optimize_first)
    with commit_log() as messages:
        plans.append(_load(spark, landing, table, 3))
    assert lost_races("\n".join(messages)) == 1, messages
    assert ask(TableRef.parse(table), plans[-1].key).table_version == raced[0] + 1
    monkeypatch.setattr(commit_mod, "write_commit", real)
    _loads_go_on(spark, landing, table, plans, 4)
    _check(table, landing)
    _verify(table, warnings={"compacted_file", "batch_file_compacted"})


def test_delta_spark_optimize_running_beside_airflow_eod_loads_loses_no_batch(
    spark: Any, landing: str, table: str
) -> None:
    """OPTIMIZE in a second thread (its own Spark jobs) while airflow-eod loads batch after
    batch: whichever commits first, the other retries; every batch once."""
    import threading

    plans = [_load(spark, landing, table, n) for n in (1, 2)]
    stop = threading.Event()
    done: list[int] = []
    failed: list[BaseException] = []

    def optimize_again() -> None:
        while not stop.is_set():
            try:
                _sql(spark, "OPTIMIZE {t}", table)
                done.append(1)
            except Exception as exc:  # a ConcurrentModificationException is Delta's "lost"
                if "Concurrent" not in str(exc):
                    failed.append(exc)
                    return

    worker = threading.Thread(target=optimize_again, daemon=True)
    worker.start()
    try:
        for n in (3, 4, 5, 6):
            plans.append(_load(spark, landing, table, n))
    finally:
        stop.set()
        worker.join(timeout=120)
    assert not failed, failed
    assert done, "the premise: OPTIMIZE ran beside the loads"
    for plan in plans:
        _retry(spark, landing, table, plan)
    _check(table, landing)
    _verify(table, warnings={"compacted_file", "batch_file_compacted"})


@pytest.mark.parametrize("retain", ["default", "0 hours"])
def test_vacuum_while_a_batch_waits_for_its_commit(
    spark: Any, landing: str, table: str, monkeypatch: Any, retain: str
) -> None:
    """A batch's staged files are no file of the table until its commit. VACUUM with its
    default retention (7 days) keeps them; VACUUM RETAIN 0 HOURS with the retention check
    disabled deletes them, and the commit must not reference them: the attempt fails
    retryably, nothing is committed, and the retry stages and commits the batch."""
    from airflow_eod.core.errors import BatchError
    from airflow_eod.spark import load_job

    plans = [_load(spark, landing, table, n) for n in (1, 2)]
    real = load_job.commit_batch
    staged_seen: list[str] = []

    def vacuum_first(table_uri: str, batch: Any, generation: int, staged: Any, *a: Any, **kw: Any) -> Any:
        staged_seen.extend(os.path.join(table, f.path) for f in staged.files)
        assert all(os.path.exists(f) for f in staged_seen)
        if retain == "default":
            _sql(spark, "VACUUM {t}", table)
        else:
            with _conf(spark, spark__databricks__delta__retentionDurationCheck__enabled="false"):
                _sql(spark, "VACUUM {t} RETAIN 0 HOURS", table)
        return real(table_uri, batch, generation, staged, *a, **kw)

    monkeypatch.setattr(load_job, "commit_batch", vacuum_first)
    _land(landing, 3)
    source = orders_source(landing)
    plan = plan_for(source, table, run="run-3")
    before = DeltaTable(table).version()
    if retain == "default":
        assert run_load(spark, spec_for(source, table, plan)).outcome == "committed"
        assert all(os.path.exists(f) for f in staged_seen)
    else:
        with pytest.raises(BatchError, match="gone before their commit") as err:
            run_load(spark, spec_for(source, table, plan))
        assert err.value.retryable
        assert not any(os.path.exists(f) for f in staged_seen), "the premise: VACUUM deleted them"
        # Nothing committed: the commits since are Delta Spark's VACUUM START and VACUUM END.
        since = [h["operation"] for h in DeltaTable(table).history() if h["version"] > before]
        assert since == ["VACUUM END", "VACUUM START"], since
        assert not ask(TableRef.parse(table), plan.key).committed
        monkeypatch.setattr(load_job, "commit_batch", real)
        assert run_load(spark, spec_for(source, table, plan, try_number=2)).outcome == "committed"
    plans.append(plan)
    monkeypatch.setattr(load_job, "commit_batch", real)
    _loads_go_on(spark, landing, table, plans, 4)
    _check(table, landing)
    _verify(table)


# == 4. Delta Spark's idempotent writes beside airflow-eod's markers; switching engines ==
def _skipped_by_delta_spark(spark: Any, landing: str, table: str, plan: Plan) -> None:
    """A plain Delta Spark write naming the batch's app id at its generation is skipped
    silently by Delta Spark: it reads airflow-eod's marker as its own idempotency state."""
    before = DeltaTable(table).version()
    rows = spark.read.csv(landing, header=True, schema=ORDERS_DDL).limit(3)
    (
        rows.write.format("delta")
        .mode("append")
        .option("txnAppId", plan.key.app_id)
        .option("txnVersion", "0")
        .save(table)
    )
    assert DeltaTable(table).version() == before


@pytest.mark.parametrize("first", ["delta-rs", "delta-spark"])
def test_a_pipeline_switches_engines_between_runs(spark: Any, landing: str, table: str, first: str) -> None:
    """Batches 1-2 by one engine; the retry of batch 2 and batch 3 by the other; then the
    retry of batch 3 and batch 4 by the first again. Each engine sees the other's commits as
    committed (the same app id, the same marker)."""
    other = "delta-spark" if first == "delta-rs" else "delta-rs"
    plans = [_load(spark, landing, table, n, engine=first) for n in (1, 2)]
    _retry(spark, landing, table, plans[1], engine=other)
    for plan in plans:
        _skipped_by_delta_spark(spark, landing, table, plan)
    plans.append(_load(spark, landing, table, 3, engine=other))
    status = ask(TableRef.parse(table), plans[-1].key)
    assert status.committed and status.manifest is not None and status.manifest.engine == other
    _retry(spark, landing, table, plans[-1], engine=first)
    _skipped_by_delta_spark(spark, landing, table, plans[-1])
    plans.append(_load(spark, landing, table, 4, engine=first))
    for plan in plans:
        _retry(spark, landing, table, plan, engine=first)
        _retry(spark, landing, table, plan, engine=other)
    engines = [ask(TableRef.parse(table), p.key).manifest.engine for p in plans]  # type: ignore[union-attr]
    assert engines == [first, first, other, first]
    _check(table, landing)
    _verify(table)
