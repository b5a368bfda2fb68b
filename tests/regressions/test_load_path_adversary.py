"""Adversarial reproductions against the issue-7 changes (bounded Delta log reader with
cleanup-hole checks, the FAILFAST single-pass load, JDBC planning over a plain connection).

Each test states what it attacks. Those whose docstring says "found" failed on the first
cut of the change and pin its fix; the others were defended from the start.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any

import pytest

from airflow_eod.core.ask import ask
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import BatchError, MalformedInputError
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.sources import Credentials, JdbcIncrementalSource, ReadContext
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark.load_job import run_load
from airflow_eod.spark.load_spec import LoadSettings, LoadSpec
from tests.support.helpers import land_and_plan, plan_for, spec_for, stage_rows

# -- JDBC ------------------------------------------------------------------------------------


def _jctx(spark: Any, pg: Any) -> ReadContext:
    return ReadContext(spark_factory=lambda: spark, credentials=Credentials(pg.user, pg.password))


def _jplan(src: JdbcIncrementalSource, ctx: ReadContext, table: str, run: str) -> Plan | None:
    return src.plan(
        PlanLog(TableRef.parse(table), "tests.attack.jdbc"),
        ctx,
        run_token=run,
        is_committed=lambda k: ask(TableRef.parse(table), k).committed,
    )


def _jspec(src: JdbcIncrementalSource, table: str, plan: Plan) -> LoadSpec:
    return LoadSpec(
        table=TableRef.parse(table), plan=plan, source=src, settings=LoadSettings(run_id="r", try_number=1)
    )


@contextmanager
def _driver_jvm_zone(spark: Any, zone: str) -> Any:
    """The driver JVM's default time zone, as on an Airflow worker host that is not on UTC
    (the session sets spark.sql.session.timeZone=UTC, but not the JVM's own default, which
    is what the PostgreSQL JDBC driver sends as the session's TimeZone)."""
    tz = spark._jvm.java.util.TimeZone
    before = tz.getDefault()
    tz.setDefault(tz.getTimeZone(zone))
    try:
        yield
    finally:
        tz.setDefault(before)


@pytest.mark.jdbc
@pytest.mark.spark
def test_jdbc_timestamptz_key_on_a_non_utc_driver_host_loads_its_planned_batch(
    spark: Any, postgres: Any, table: str
) -> None:
    """Found (wedge / misreported error on the first cut). Planning now counts the rows up to the head with a
    native comparison (``k <= eod_head.hi``) and stores the head converted to a UTC string,
    but ``verify`` (and the read) compare against ``TIMESTAMP '<utc string>'``, which
    PostgreSQL casts to timestamptz in the *session* zone (the driver JVM's default zone,
    sent by pgjdbc). On a driver whose JVM zone is not UTC the planned count and the verify
    count disagree, so every batch fails with InputChangedError ("rows were updated, deleted
    or inserted") although nothing changed. (Before the change both counts used the literal:
    the batch committed, but with the 3 rows up to 03:00Z of a range that says 12:00Z; the
    root cause, a UTC string rendered as a zone-less literal, is older, the wedge is new.)
    """
    name = "attack_tstz_zone"
    postgres.execute(
        f"CREATE TABLE {name} (id bigint PRIMARY KEY, customer text, amount numeric(10,2), "
        "created_at timestamptz NOT NULL)"
    )
    postgres.execute(
        f"INSERT INTO {name} SELECT i, 'c', i, TIMESTAMPTZ '2026-11-01 00:00:00+00' + i * INTERVAL '1 hour' "
        "FROM generate_series(1, 30) i"
    )
    src = JdbcIncrementalSource(
        url=postgres.jdbc_url,
        table=name,
        key_column="created_at",
        key_type="timestamp",
        max_rows_per_batch=12,
    )
    ctx = _jctx(spark, postgres)
    with _driver_jvm_zone(spark, "Asia/Tokyo"):
        plan = _jplan(src, ctx, table, "r0")
        assert plan is not None
        assert plan.boundary["high"] == "2026-11-01 12:00:00.000000"  # the 12th row, in UTC
        result = run_load(spark, _jspec(src, table, plan), credentials=ctx.credentials)
    # The batch (None, 12:00Z] holds rows 1..12 and must load them.
    assert result.outcome == "committed" and result.rows == 12


# -- single pass (FAILFAST) --------------------------------------------------------------------


def _failing_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    """The staging write fails for a reason that has nothing to do with the records."""
    from airflow_eod.spark import staging

    def full_disk(df: Any, table_uri: str, batch: Any, generation: int, attempt: str, parts: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(staging, "stage_dataframe", full_disk)


@pytest.mark.spark
def test_a_parquet_batch_whose_write_fails_reports_the_writes_own_error(
    spark: Any, landing: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found (misreported error on the first cut). A Parquet batch (or CSV/JSON without a schema) also takes
    the single-pass path, but its PERMISSIVE re-read has no corrupt-record column:
    ``explain_failure`` guards only the re-read itself, not ``_counts_per_file``, whose
    filter on ``_eod_corrupt_record`` raises UNRESOLVED_COLUMN. That internal error replaces
    the write's own error in the BatchError the task reports."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": [1, 2], "name": ["a", "b"]}), os.path.join(landing, "a.parquet"))
    source = LandingFilesSource(path=landing, file_format="parquet", schema="id BIGINT, name STRING")
    plan = plan_for(source, table)
    _failing_stage(monkeypatch)
    with pytest.raises(BatchError) as err:
        run_load(spark, spec_for(source, table, plan))
    assert "No space left on device" in str(err.value), str(err.value)
    assert open_table(TableRef.parse(table)) is None


@pytest.mark.spark
def test_a_csv_batch_read_with_the_users_failfast_mode_reports_the_malformed_record(
    spark: Any, landing: str, table: str
) -> None:
    """Found (misreported error on the first cut). With the user's own ``mode=FAILFAST`` read option the
    re-read has no corrupt-record column either, so the malformed record that stopped the
    write is reported as "[UNRESOLVED_COLUMN] `_eod_corrupt_record` cannot be resolved"
    instead of Spark's malformed-record error naming the record (the pre-change message)."""
    with open(os.path.join(landing, "a.csv"), "w") as fh:
        fh.write("id,name\n1,a\nnot-a-number,b\n")
    source = LandingFilesSource(
        path=landing, file_format="csv", schema="id INT, name STRING", read_options={"mode": "FAILFAST"}
    )
    plan = plan_for(source, table)
    with pytest.raises(BatchError) as err:
        run_load(spark, spec_for(source, table, plan))
    text = str(err.value)
    assert "_eod_corrupt_record" not in text, text
    assert open_table(TableRef.parse(table)) is None


@pytest.mark.spark
def test_a_parquet_file_of_another_type_than_declared_reports_sparks_error(
    spark: Any, landing: str, table: str
) -> None:
    """Found (misreported error on the first cut). A Parquet file whose column type disagrees with
    the declared schema makes the single-pass write fail inside Spark's Parquet reader; the re-
    read meant to count malformed CSV/JSON records then fails on the missing corrupt-record
    column, and the task reports UNRESOLVED_COLUMN `_eod_corrupt_record` instead of the type
    conflict.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": ["x", "y"], "name": ["a", "b"]}), os.path.join(landing, "a.parquet"))
    source = LandingFilesSource(path=landing, file_format="parquet", schema="id INT, name STRING")
    plan = plan_for(source, table)
    with pytest.raises(BatchError) as err:
        run_load(spark, spec_for(source, table, plan))
    assert "_eod_corrupt_record" not in str(err.value), str(err.value)
    assert open_table(TableRef.parse(table)) is None


# -- the log reader: a commit in a cleanup hole -----------------------------------------------


@pytest.mark.parametrize("new_rows", [[], [100]], ids=["empty", "control_with_files"])
def test_a_restatement_that_lands_in_a_cleanup_hole_is_not_taken_for_visible(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, new_rows: list[int]
) -> None:
    """Found, [empty] (restatement lost, then wedged on CorruptRecordError, on the first cut).
    ``checkpoint_holds`` decided whether a commit that has no files (an empty generation: Spark
    stages no file for an empty partitioned batch) is part of the newest checkpoint by looking
    for the batch's *appId* among the checkpoint's markers, at any version. A restatement to
    generation 1 shares the appId of generation 0, which the checkpoint holds: a generation-1
    commit written into a hole left by another writer's checkpoint + log cleanup is taken as
    visible. Its record says g1 while the table (the checkpoint) still holds g0's marker and
    rows, so the ask raises CorruptRecordError: the restatement's removes never happened, and
    every later ask of the batch fails until someone moves the record aside by hand.
    """
    from deltalake import DeltaTable

    from airflow_eod.core import load_commit as commit_mod
    from airflow_eod.core.delta import log as delta_log
    from airflow_eod.core.load_commit import commit_batch

    cfg = {"delta.checkpointInterval": "1", "delta.logRetentionDuration": "interval 0 seconds"}
    table = str(tmp_path / "table")
    a_land, b_land = str(tmp_path / "land-a"), str(tmp_path / "land-b")
    plan = land_and_plan(table, a_land, "tests.attack.a", 0)
    commit_batch(
        TableRef.parse(table), plan.key, 0, *stage_rows(table, plan, 0, "a", [0]), table_configuration=cfg
    )
    b0 = land_and_plan(table, b_land, "tests.attack.b", 0)
    commit_batch(
        TableRef.parse(table), b0.key, 0, *stage_rows(table, b0, 0, "b", [0]), table_configuration=cfg
    )
    assert ask(TableRef.parse(table), plan.key).committed_generation == 0

    real = commit_mod.write_commit
    fired: list[int] = []

    def overtaken(table_log: Any, *args: Any, **kw: Any) -> Any:
        if not fired:
            fired.append(table_log.version())
            # Pipeline B commits twice meanwhile; each commit checkpoints and cleans up, so
            # the version our reading will write (v+1) is removed again: a hole.
            for n in (1, 2):
                p = land_and_plan(table, b_land, "tests.attack.b", n)
                commit_batch(
                    TableRef.parse(table),
                    p.key,
                    0,
                    *stage_rows(table, p, 0, "b", [n]),
                    table_configuration=cfg,
                )
        return real(table_log, *args, **kw)

    monkeypatch.setattr(commit_mod, "write_commit", overtaken)
    delta_log.clear_cache()
    g1 = stage_rows(table, plan, 1, "a", new_rows)  # [empty]: the corrected input is empty
    outcome: Any
    try:
        outcome = commit_batch(
            TableRef.parse(table), plan.key, 1, *g1, table_configuration=cfg, replace_previous=True
        )
    except Exception as exc:
        outcome = exc
    monkeypatch.setattr(commit_mod, "write_commit", real)
    assert fired, "the injection did not run"
    delta_log.clear_cache()
    # However the attempt ended, a retry must be able to finish the restatement, and the
    # table must then hold no row of the batch.
    try:
        status = ask(TableRef.parse(table), plan.key, 1)
    except Exception as exc:
        pytest.fail(f"the batch is wedged after the restatement attempt ({outcome!r}): {exc}")
    if not status.committed:
        commit_batch(
            TableRef.parse(table),
            plan.key,
            1,
            *stage_rows(table, plan, 1, "a", new_rows),
            table_configuration=cfg,
            replace_previous=True,
        )
        status = ask(TableRef.parse(table), plan.key, 1)
    assert status.committed_generation == 1
    rows = DeltaTable(table).to_pyarrow_table()
    tagged = sorted(zip(rows.column("src").to_pylist(), rows.column("seq").to_pylist(), strict=True))
    assert [t for t in tagged if t[0] == "a"] == [("a", n) for n in new_rows], (
        f"restated to {new_rows}, yet the table holds {tagged} (outcome {outcome!r})"
    )


def test_a_missing_record_is_repaired_after_an_optimize_and_a_checkpoint(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found (the record that the log can still prove is never repaired on the first cut). Batch K commits at
    version 1 and its attempt dies before writing its commit record. Another writer's
    OPTIMIZE compacts K's file into a shared one, and a later checkpoint drops the expired
    tombstone (delta.deletedFileRetentionDuration, 1 week by default; 0 seconds here to
    compress time). The next ask finds K's marker without a record and goes to repair it:
    ``find_commit`` now accepts a commit at or below the checkpoint only if
    ``checkpoint_holds`` finds its first file among the checkpoint's adds or removes, so the
    real commit 1 (still in the log, which keeps commits 30 days) is rejected as a "hole"
    commit and no record is written. K can then never be restated ("its commit record and
    the commit itself are gone"), and once its marker expires nothing remembers that it
    landed. Before the change the record was rebuilt from commit 1."""
    from deltalake import DeltaTable

    from airflow_eod.core import load_commit as commit_mod
    from airflow_eod.core.delta import log as delta_log
    from airflow_eod.core.load_commit import commit_batch

    cfg = {"delta.checkpointInterval": "1", "delta.deletedFileRetentionDuration": "interval 0 seconds"}
    table = str(tmp_path / "table")
    a_land, b_land = str(tmp_path / "land-a"), str(tmp_path / "land-b")
    b0 = land_and_plan(table, b_land, "tests.attack.b", 0)
    commit_batch(
        TableRef.parse(table), b0.key, 0, *stage_rows(table, b0, 0, "b", [0]), table_configuration=cfg
    )
    k = land_and_plan(table, a_land, "tests.attack.a", 0)

    real_record = commit_mod._record_commit

    def died(*args: Any, **kw: Any) -> None:
        raise RuntimeError("the attempt was killed between its commit and its record")

    monkeypatch.setattr(commit_mod, "_record_commit", died)
    with pytest.raises(RuntimeError):
        commit_batch(
            TableRef.parse(table), k.key, 0, *stage_rows(table, k, 0, "a", [0]), table_configuration=cfg
        )
    monkeypatch.setattr(commit_mod, "_record_commit", real_record)
    assert DeltaTable(table).version() == 1

    DeltaTable(table).optimize.compact()  # another writer's OPTIMIZE: K's file is rewritten
    b1 = land_and_plan(table, b_land, "tests.attack.b", 1)
    commit_batch(
        TableRef.parse(table), b1.key, 0, *stage_rows(table, b1, 0, "b", [1]), table_configuration=cfg
    )
    assert os.path.exists(os.path.join(table, "_delta_log", f"{1:020d}.json")), "commit 1 is still in the log"

    delta_log.clear_cache()
    status = ask(TableRef.parse(table), k.key)
    assert status.committed_generation == 0
    assert status.record is not None and status.table_version == 1, (
        f"commit 1 carries K's marker and is still in the log, yet no record was repaired: {status}"
    )


# Defended: FAILFAST flags what PERMISSIVE flags. The scratch harness /tmp/atk/harness.py ran
# 41 such cases (CSV short/long rows, decimal/int/tinyint overflow, NaN decimal, bad dates and
# timestamps, booleans, unterminated quotes, embedded newlines with and without multiLine,
# header groups, empty and header-only files, add_columns, partition columns; JSON type
# mismatches, scalars, null and array lines, nested/array/map element types, multiLine, NaN)
# through both paths: every outcome agreed. A few of them, kept:
_PARITY = {
    "csv_short_row": (
        "csv",
        "id INT, name STRING, amount DECIMAL(5,2)",
        {"a.csv": "id,name,amount\n1,a,1.5\n2,b\n"},
        {},
    ),
    "csv_decimal_overflow": (
        "csv",
        "id INT, name STRING, amount DECIMAL(5,2)",
        {"a.csv": "id,name,amount\n2,b,12345.6\n"},
        {},
    ),
    "csv_header_groups": (
        "csv",
        "id INT, name STRING, amount DECIMAL(5,2)",
        {"a.csv": "id,name,amount\n1,a,1.5\n", "b.csv": "amount,id,name\nx,2,b\n"},
        {},
    ),
    "csv_add_columns_short_row": (
        "csv",
        "id INT, name STRING",
        {"a.csv": "id,name,extra\n1,a,z\n2,b\n"},
        {"schema_drift": "add_columns"},
    ),
    "csv_partition_column": ("csv", "id INT, p INT", {"a.csv": "id,p\n1,1\n2,x\n"}, {"partition_by": ["p"]}),
    "json_nested_type": ("json", "id INT, s STRUCT<a: INT>", {"a.json": '{"id": 1, "s": {"a": "x"}}\n'}, {}),
    "json_null_line": ("json", "id INT, name STRING", {"a.json": '{"id": 1, "name": "a"}\nnull\n'}, {}),
}


@pytest.mark.spark
@pytest.mark.parametrize("case", sorted(_PARITY))
def test_failfast_single_pass_flags_what_permissive_flags(spark: Any, tmp_path: Any, case: str) -> None:
    """PASSES (defended): the single-pass FAILFAST write fails on the record and the re-read
    names it, like the PERMISSIVE path; nothing is committed."""
    fmt, schema, files, kw = _PARITY[case]
    landing = str(tmp_path / "landing")
    os.makedirs(landing)
    for name, body in files.items():
        with open(os.path.join(landing, name), "w") as fh:
            fh.write(body)
    source = LandingFilesSource(path=landing, file_format=fmt, schema=schema)
    table = str(tmp_path / "table")
    plan = plan_for(source, table)
    with pytest.raises(MalformedInputError):
        run_load(spark, spec_for(source, table, plan, **kw))
    assert open_table(TableRef.parse(table)) is None
