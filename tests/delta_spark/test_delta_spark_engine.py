"""The Delta Spark engine (``engine="delta-spark"``): Spark's Delta writer commits the batch
with the writer options ``txnAppId``/``txnVersion``/``userMetadata``, end to end.

Both sources (landing files, JDBC) at interval and offset boundaries, partitioned tables,
schema drift, the refusals of what the engine cannot do (restatement, quarantine), a crash
at every fault point the engine passes, racing attempts, another Delta Spark writer
appending during the load, and the Airflow operator under ``dag.test()``. Every load ends
with the row-by-row checker and ``verify`` (the audit).

It needs the Delta Spark jars on the Spark classpath: `make test` fetches them
(airflow_eod/spark/jars.py), and tests/conftest.py skips the tier, saying why, where they
are missing (CI fails instead).
"""

from __future__ import annotations

import glob
import json
import os
import signal
import textwrap
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.audit.verify import audit_table
from airflow_eod.core.errors import ConfigurationError, SchemaMismatchError
from airflow_eod.core.faults import InjectedFault
from airflow_eod.core.load_flow import LoadRequest, load_batch
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.runners.local import local_run
from airflow_eod.sources import Credentials, JdbcIncrementalSource, ReadContext
from airflow_eod.spark.load_job import run_load
from airflow_eod.spark.load_spec import LoadSettings, LoadSpec
from tests.conftest import DELTA_SPARK_JARS_ENV, POSTGRES_JDBC_JAR
from tests.support.helpers import (
    ORDERS_DDL,
    check,
    interval_plan,
    load_dag_file,
    orders_source,
    plan_for,
    run_child,
    spec_for,
    task_tries,
    xcom_value,
)
from tests.support.jdbc_helpers import check_against_postgres, create_orders, insert_orders

pytestmark = [
    pytest.mark.spark,
    pytest.mark.delta_spark,
]

ENGINE = "delta-spark"
DAY = datetime(2026, 11, 18, tzinfo=UTC)


# -- shared checks -------------------------------------------------------------------------
def verified(table: str, batches: int, foreign_files: int = 0) -> None:
    """``verify`` (the audit) finds nothing wrong but ``foreign_files`` files of another
    writer (a warning), and counts ``batches`` committed batches whose live rows are the
    rows their manifests recorded."""
    report = audit_table(table)
    assert report.ok, [f.message for f in report.findings]
    kinds = sorted(f.kind for f in report.findings)
    assert kinds == ["foreign_file"] * foreign_files, [f.message for f in report.findings]
    assert len(report.batches) == batches, report.batches
    for b in report.batches:
        assert b.live_rows == b.recorded_rows and b.live_files > 0, b


def assert_loaded(table: str, landing: str, *, rows: int, batches: int) -> None:
    """The table holds the landing files' ``rows`` row by row, once, and ``verify`` agrees."""
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == rows, cmp.describe()
    verified(table, batches)


def commits(table: str) -> list[dict[str, Any]]:
    """The table's commits, oldest first, each as its actions by kind."""
    out = []
    for path in sorted(glob.glob(os.path.join(table, "_delta_log", "*.json"))):
        actions: dict[str, Any] = {"txn": [], "add": [], "commitInfo": None}
        with open(path) as fh:
            for line in fh:
                action = json.loads(line)
                for kind, body in action.items():
                    if kind in ("txn", "add"):
                        actions[kind].append(body)
                    elif kind == "commitInfo":
                        actions[kind] = body
        out.append(actions)
    return out


def ds_spec(source: Any, table: str, plan: Plan, try_number: int = 1, **kw: Any) -> LoadSpec:
    return spec_for(source, table, plan, try_number, engine=ENGINE, **kw)


# -- landing files ---------------------------------------------------------------------------
def test_delta_spark_engine_commits_once_and_reports_a_skip(spark: Any, landing: str, table: str) -> None:
    write_order_files(landing, 2, 30)
    source = orders_source(landing)
    plan = plan_for(source, table)
    first = run_load(spark, ds_spec(source, table, plan))
    assert first.outcome == "committed" and first.rows == 60
    again = run_load(spark, ds_spec(source, table, plan, try_number=2))
    assert again.outcome == "already_committed"
    assert DeltaTable(table).version() == first.table_version
    assert DeltaTable(table).transaction_version(plan.key.app_id) == 0
    cmp = check(table, landing)
    assert cmp.exact, cmp.describe()
    verified(table, 1)


def test_landing_offset_batches_follow_the_frontier(spark: Any, landing: str, table: str) -> None:
    source = orders_source(landing, max_files_per_batch=2)
    write_order_files(landing, 3, 20)
    results = []
    for run in ("r0", "r1"):
        plan = plan_for(source, table, run=run)
        results.append(run_load(spark, ds_spec(source, table, plan)))
    write_order_files(landing, 1, 20, first_id=5000)  # arrives after two batches
    plan = plan_for(source, table, run="r2")
    results.append(run_load(spark, ds_spec(source, table, plan)))
    assert [(r.outcome, r.rows, r.table_version) for r in results] == [
        ("committed", 40, 0),
        ("committed", 20, 1),
        ("committed", 20, 2),
    ]
    nothing = source.plan(
        PlanLog(TableRef.parse(table), "tests.orders"),
        run_token="r3",
        is_committed=lambda k: ask(TableRef.parse(table), k).committed,
    )
    assert nothing is None, "every file is loaded: nothing to plan"
    # The table's retention for markers is set by the write that created it.
    assert DeltaTable(table).metadata().configuration.get("delta.setTransactionRetentionDuration")
    assert_loaded(table, landing, rows=80, batches=3)


def test_landing_intervals_loaded_out_of_order_then_again(spark: Any, tmp_path: Any, table: str) -> None:
    dirs = []
    for i in range(3):
        d = str(tmp_path / f"landing/{i}")
        write_order_files(d, 1, 25, first_id=1 + 100 * i)
        dirs.append(d)
    outcomes = []
    for i in (2, 0, 1, 2, 0):  # backwards, then a re-run of two intervals
        source = orders_source(dirs[i], boundary="interval")
        start = DAY + timedelta(days=i)
        plan = interval_plan(source, table, start, start + timedelta(days=1))
        outcomes.append(run_load(spark, ds_spec(source, table, plan)).outcome)
    assert outcomes == ["committed"] * 3 + ["already_committed"] * 2
    assert len(DeltaTable(table).history()) == 3
    cmp = check(table, str(tmp_path / "landing"))
    assert cmp.exact and cmp.table_rows == 75, cmp.describe()
    verified(table, 3)


def test_a_partitioned_table(spark: Any, landing: str, table: str) -> None:
    write_order_files(landing, 2, 40)
    source = orders_source(landing)
    plan = plan_for(source, table, run="r0")
    first = run_load(spark, ds_spec(source, table, plan, partition_by=["order_date"]))
    write_order_files(landing, 1, 40, first_id=9000)
    # The second load names no partitioning: it appends with the table's.
    second = run_load(spark, ds_spec(source, table, plan_for(source, table, run="r1")))
    assert (first.outcome, second.outcome) == ("committed", "committed")
    assert DeltaTable(table).metadata().partition_columns == ["order_date"]
    adds = [a for c in commits(table) for a in c["add"]]
    assert adds
    assert all(a["path"].startswith("order_date=") and a["partitionValues"]["order_date"] for a in adds)
    # Spark reads the partition column back (not null), for every row.
    assert spark.read.format("delta").load(table).where("order_date IS NULL").count() == 0
    assert_loaded(table, landing, rows=120, batches=2)


def _with_extra(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.withColumn("extra", F.lit("x"))


def _amount_as_double(df: Any) -> Any:
    return df.withColumn("amount", df["amount"].cast("double"))


def test_schema_drift_fails_names_the_way_out_then_add_columns_adds_them(
    spark: Any, landing: str, table: str
) -> None:
    write_order_files(landing, 1, 30)
    source = orders_source(landing)
    run_load(spark, ds_spec(source, table, plan_for(source, table, run="r0")))
    write_order_files(landing, 1, 30, first_id=700)
    plan = plan_for(source, table, run="r1")
    with pytest.raises(SchemaMismatchError, match="schema_drift='add_columns'") as err:
        run_load(spark, ds_spec(source, table, plan), transform=_with_extra)
    assert plan.key.label in str(err.value) and "new column extra" in str(err.value)
    assert not err.value.retryable and DeltaTable(table).version() == 0
    # A type change fails under add_columns too: Delta Spark's mergeSchema would widen it.
    with pytest.raises(SchemaMismatchError, match="column amount"):
        run_load(spark, ds_spec(source, table, plan, schema_drift="add_columns"), transform=_amount_as_double)
    assert DeltaTable(table).version() == 0
    result = run_load(spark, ds_spec(source, table, plan, schema_drift="add_columns"), transform=_with_extra)
    assert result.outcome == "committed" and result.table_version == 1
    fields = {f.name: f for f in DeltaTable(table).schema().fields}
    assert "extra" in fields and fields["extra"].nullable
    extra = DeltaTable(table).to_pyarrow_table(columns=["extra"])["extra"].to_pylist()
    assert sorted(extra, key=str) == [None] * 30 + ["x"] * 30
    assert_loaded(table, landing, rows=60, batches=2)


# -- JDBC --------------------------------------------------------------------------------------
def _jdbc_ctx(spark: Any, pg: Any) -> ReadContext:
    return ReadContext(spark_factory=lambda: spark, credentials=Credentials(pg.user, pg.password))


def test_jdbc_offset_batches_follow_the_key_frontier(spark: Any, postgres: Any, table: str) -> None:
    create_orders(postgres, "ds_inc")
    insert_orders(postgres, "ds_inc", range(1, 101))
    src = JdbcIncrementalSource(url=postgres.jdbc_url, table="ds_inc", key_column="id", max_rows_per_batch=40)
    ctx = _jdbc_ctx(spark, postgres)

    def plan(run: str) -> Plan | None:
        log = PlanLog(TableRef.parse(table), "tests.ds_jdbc")
        return src.plan(
            log, ctx, run_token=run, is_committed=lambda k: ask(TableRef.parse(table), k).committed
        )

    ranges = []
    for run in ("r0", "r1", "r2"):
        p = plan(run)
        assert p is not None
        ranges.append((p.boundary["low"], p.boundary["high"]))
        spec = LoadSpec(table=TableRef.parse(table), plan=p, source=src, settings=LoadSettings(engine=ENGINE))
        assert run_load(spark, spec, credentials=ctx.credentials).outcome == "committed"
        # A retry of the batch writes nothing.
        again = LoadSpec(
            table=TableRef.parse(table),
            plan=p,
            source=src,
            settings=LoadSettings(engine=ENGINE, try_number=2),
        )
        assert run_load(spark, again, credentials=ctx.credentials).outcome == "already_committed"
    assert ranges == [(None, 40), (40, 80), (80, 100)]
    assert plan("r3") is None
    cmp = check_against_postgres(postgres, "ds_inc", table)
    assert cmp.exact and cmp.table_rows == 100, cmp.describe()
    verified(table, 3)


def test_jdbc_timestamp_intervals_backfilled_backwards(spark: Any, postgres: Any, table: str) -> None:
    create_orders(postgres, "ds_days")
    insert_orders(postgres, "ds_days", range(1, 72))  # one row an hour over three days
    src = JdbcIncrementalSource(
        url=postgres.jdbc_url,
        table="ds_days",
        key_column="created_at",
        key_type="timestamp",
        boundary="interval",
    )
    ctx = _jdbc_ctx(spark, postgres)
    base = datetime(2026, 11, 1, tzinfo=UTC)
    rows = []
    for day in (2, 0, 1):
        start = base + timedelta(days=day)
        p = src.plan(
            PlanLog(TableRef.parse(table), "tests.ds_days"),
            ctx,
            run_token=f"d{day}",
            is_committed=lambda k: False,
            interval=(start, start + timedelta(days=1)),
        )
        assert p is not None
        spec = LoadSpec(table=TableRef.parse(table), plan=p, source=src, settings=LoadSettings(engine=ENGINE))
        result = run_load(spark, spec, credentials=ctx.credentials)
        rows.append(result.rows)
    # created_at = base + id hours (+ id µs): day 0 holds ids 1..23, days 1-2 24 ids each.
    assert rows == [24, 23, 24]
    cmp = check_against_postgres(postgres, "ds_days", table)
    assert cmp.exact and cmp.table_rows == 71, cmp.describe()
    verified(table, 3)


# -- what the engine refuses -----------------------------------------------------------------
@pytest.mark.parametrize(
    "option",
    [
        {"quarantine_table_uri": "/tmp/eod-quarantine"},
        {"restate": True},
        {"restate": "{{ params.restate }}"},
        {"restate_batch_key": "{{ params.restate_batch_key }}"},
    ],
)
def test_restatement_and_quarantine_are_refused_when_the_dag_is_parsed(option: dict[str, Any]) -> None:
    from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

    name = next(iter(option))
    with pytest.raises(ConfigurationError, match=rf"engine='delta-spark' does not support {name}") as err:
        LandingFilesToDeltaOperator(
            task_id="load", landing_path="/tmp/in", table_uri="/tmp/t", engine=ENGINE, **option
        )
    assert "engine='delta-rs'" in str(err.value) and not err.value.retryable
    # The same options with the default engine are accepted.
    LandingFilesToDeltaOperator(task_id="load", landing_path="/tmp/in", table_uri="/tmp/t", **option)


# -- crashes at each boundary ------------------------------------------------------------------
# The fault points the delta-spark path passes: after_plan (freeze), before_write,
# before_commit (just before Delta Spark's save), before_record (its commit is done, the ask
# after it and the durable record are not), after_commit. It stages nothing (no after_stage)
# and leaves no attempt directory for the cleanup (no in_cleanup).
@pytest.mark.faults
@pytest.mark.parametrize("point", ["before_write", "before_commit", "before_record", "after_commit"])
def test_a_crash_at_each_boundary_then_a_retry_lands_the_batch_once(
    spark: Any, landing: str, table: str, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_order_files(landing, 2, 40)
    source = orders_source(landing)
    plan = plan_for(source, table)
    monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
    with pytest.raises(InjectedFault, match=point):
        run_load(spark, ds_spec(source, table, plan))
    committed = point in ("before_record", "after_commit")
    assert ask(TableRef.parse(table), plan.key).committed == committed
    result = run_load(spark, ds_spec(source, table, plan_for(source, table), try_number=2))
    assert result.outcome == ("already_committed" if committed else "committed")
    assert len(DeltaTable(table).history()) == 1
    assert_loaded(table, landing, rows=80, batches=1)


@pytest.mark.faults
def test_a_crash_after_the_plan_is_frozen_then_a_retry_loads_the_same_batch(
    spark: Any, landing: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_order_files(landing, 2, 30)
    source = orders_source(landing)
    ctx = ReadContext(spark_factory=lambda: spark)
    run = local_run(
        lambda: spark,
        TableRef.parse(table),
        source,
        settings=LoadSettings(engine=ENGINE, run_id="run-1", try_number=1),
    )
    monkeypatch.setenv("EOD_FAULTPOINTS", "after_plan=raise@1")
    with pytest.raises(InjectedFault):
        load_batch(
            LoadRequest(TableRef.parse(table), "tests.ds_flow", "run-1", try_number=1), source, ctx, run=run
        )
    assert not os.path.exists(os.path.join(table, "_delta_log"))
    write_order_files(landing, 1, 30, first_id=800)  # arrives before the retry: not in the batch
    retry = local_run(
        lambda: spark,
        TableRef.parse(table),
        source,
        settings=LoadSettings(engine=ENGINE, run_id="run-1", try_number=2),
    )
    result = load_batch(
        LoadRequest(TableRef.parse(table), "tests.ds_flow", "run-1", try_number=2), source, ctx, run=retry
    )
    assert (result.outcome, result.rows) == ("committed", 60)
    nxt = local_run(
        lambda: spark,
        TableRef.parse(table),
        source,
        settings=LoadSettings(engine=ENGINE, run_id="run-2", try_number=1),
    )
    assert (
        load_batch(LoadRequest(TableRef.parse(table), "tests.ds_flow", "run-2"), source, ctx, run=nxt).rows
        == 30
    )
    assert_loaded(table, landing, rows=90, batches=2)


def _child_env() -> dict[str, str]:
    """A child driver with the Delta Spark jars (and the JDBC driver) on its classpath."""
    jars = [*os.environ[DELTA_SPARK_JARS_ENV].split(","), POSTGRES_JDBC_JAR]
    return {"PYSPARK_SUBMIT_ARGS": f"--jars {','.join(j for j in jars if os.path.exists(j))} pyspark-shell"}


@pytest.mark.faults
def test_sigkill_after_delta_spark_committed_but_before_the_ask_after(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    """The process dies the moment Delta Spark's save returns: the batch is in the table,
    but the attempt never asked and no durable record was written. The retry's ask must see
    the commit (from its marker and manifest) and write nothing."""
    write_order_files(landing, 3, 30)
    source = orders_source(landing)
    plan = plan_for(source, table)
    child = run_child(ds_spec(source, table, plan), str(tmp_path), "before_record=kill@1", env=_child_env())
    out = child.communicate(timeout=300)[0].decode()
    assert child.returncode == -signal.SIGKILL, out[-3000:]
    assert not os.path.exists(tmp_path / "child-result.json")
    version = DeltaTable(table).version()
    assert DeltaTable(table).transaction_version(plan.key.app_id) == 0
    result = run_load(spark, ds_spec(source, table, plan_for(source, table), try_number=2))
    assert result.outcome == "already_committed" and result.table_version == version
    assert DeltaTable(table).version() == version, "the retry wrote nothing"
    assert_loaded(table, landing, rows=90, batches=1)


# -- racing attempts ---------------------------------------------------------------------------
@pytest.mark.faults
def test_two_attempts_of_one_batch_racing_in_threads_commit_once(
    spark: Any, landing: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_order_files(landing, 3, 40)
    source = orders_source(landing)
    run_load(spark, ds_spec(source, table, plan_for(source, table, run="r0")))  # the table exists
    write_order_files(landing, 2, 40, first_id=3000)
    plan = plan_for(source, table, run="r1")
    # Both pause after their ask, before Delta Spark's write: both asked "no" before either
    # commits, so Delta Spark's own fencing of the appId must pick the winner.
    monkeypatch.setenv("EOD_FAULTPOINTS", "before_commit=sleep:2")
    results: list[Any] = [None, None]

    def attempt(i: int) -> None:
        try:
            results[i] = run_load(spark, ds_spec(source, table, plan, try_number=i + 1))
        except BaseException as exc:  # reported by the assertion below
            results[i] = exc

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert sorted(getattr(r, "outcome", repr(r)) for r in results) == ["already_committed", "committed"]
    assert len({r.table_version for r in results}) == 1
    # One commit holds the batch (the table version 0 is the first batch).
    assert [len(c["txn"]) for c in commits(table)] == [1, 1]
    assert_loaded(table, landing, rows=200, batches=2)


@pytest.mark.faults
# Two driver JVMs with Delta Spark (about 50 s): CI keeps the race in threads of one driver
# (test_two_attempts_of_one_batch_racing_in_threads_commit_once).
@pytest.mark.extended
def test_two_processes_loading_the_same_batch_commit_once(landing: str, table: str, tmp_path: Any) -> None:
    write_order_files(landing, 2, 50)
    source = orders_source(landing)
    plan = plan_for(source, table)
    # Both wait between their ask and their write until the other is there too.
    faults = f"before_commit=meet:{tmp_path}/meet:2"
    kids = [
        run_child(ds_spec(source, table, plan, try_number=n), str(tmp_path), faults, name, _child_env())
        for n, name in ((1, "a"), (2, "b"))
    ]
    outs = [k.communicate(timeout=400)[0].decode() for k in kids]
    assert [k.returncode for k in kids] == [0, 0], "\n".join(o[-2000:] for o in outs)
    results = [json.loads((tmp_path / f"{n}-result.json").read_text()) for n in "ab"]
    assert sorted(r["outcome"] for r in results) == ["already_committed", "committed"]
    assert len({r["table_version"] for r in results}) == 1
    assert len(DeltaTable(table).history()) == 1
    assert_loaded(table, landing, rows=100, batches=1)


# -- attacks -----------------------------------------------------------------------------------
def test_the_marker_and_the_manifest_are_in_the_same_commit(spark: Any, landing: str, table: str) -> None:
    source = orders_source(landing)
    plans = []
    for n in range(2):
        write_order_files(landing, 1, 20, first_id=1 + 1000 * n)
        plans.append(plan_for(source, table, run=f"r{n}"))
        run_load(spark, ds_spec(source, table, plans[-1]))
    log = commits(table)
    assert len(log) == 2
    for version, (entry, plan) in enumerate(zip(log, plans, strict=True)):
        # Exactly one marker per commit, this batch's, and the manifest of the same batch.
        assert [(t["appId"], t["version"]) for t in entry["txn"]] == [(plan.key.app_id, 0)]
        manifest = Manifest.from_user_metadata(entry["commitInfo"]["userMetadata"])
        assert manifest is not None
        assert (manifest.batch_key, manifest.generation, manifest.engine) == (plan.batch_key, 0, ENGINE)
        assert manifest.rows == sum(json.loads(a["stats"])["numRecords"] for a in entry["add"]) == 20
        assert ask(TableRef.parse(table), plan.key).table_version == version
    # Writer options, not session confs: a plain Spark write afterwards carries no marker.
    other = os.path.join(os.path.dirname(table), "other")
    spark.range(1).write.format("delta").mode("overwrite").save(other)
    assert commits(other)[0]["txn"] == [] and "userMetadata" not in commits(other)[0]["commitInfo"]
    assert_loaded(table, landing, rows=40, batches=2)


def _gated(passes: str) -> Any:
    """A transform whose second pass (the count before the write is the first, Delta
    Spark's write the second) waits until ``<passes>/open`` exists, so that the other
    writer's commit lands inside the batch's Delta transaction: after its snapshot is read,
    before its commit. Files, because Spark's Python workers are other processes; one
    partition, so that one task is held and the other writer has a free core."""

    def gate(batches: Iterator[Any]) -> Iterator[Any]:
        import uuid

        open(os.path.join(passes, f"pass-{uuid.uuid4().hex}"), "w").close()
        if sum(n.startswith("pass-") for n in os.listdir(passes)) >= 2:
            deadline = time.monotonic() + 120
            while not os.path.exists(os.path.join(passes, "open")) and time.monotonic() < deadline:
                time.sleep(0.1)
        yield from batches

    return lambda df: df.coalesce(1).mapInArrow(gate, df.schema)


def test_another_writer_appending_during_the_load_loses_and_duplicates_nothing(
    spark: Any, tmp_path: Any, table: str
) -> None:
    landing, foreign = str(tmp_path / "rows/landing"), str(tmp_path / "rows/foreign")
    write_order_files(landing, 1, 30)
    source = orders_source(landing)
    run_load(spark, ds_spec(source, table, plan_for(source, table, run="r0")))
    write_order_files(landing, 2, 30, first_id=500)
    plan = plan_for(source, table, run="r1")
    # The other writer's rows, kept as CSV too: the checker compares the table with both.
    write_order_files(foreign, 1, 15, first_id=90_000)
    foreign_df = spark.read.csv(foreign, header=True, schema=source.schema)
    passes = tmp_path / "passes"
    passes.mkdir()
    result: list[Any] = []
    slow = _gated(str(passes))
    loader = threading.Thread(
        target=lambda: result.append(run_load(spark, ds_spec(source, table, plan), transform=slow))
    )
    loader.start()
    deadline = time.monotonic() + 240
    while len(os.listdir(passes)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)  # until Delta Spark's write is under way, its snapshot read
    assert len(os.listdir(passes)) == 2, "the load's write never started"
    foreign_df.write.format("delta").mode("append").save(table)
    (passes / "open").touch()
    loader.join(timeout=300)
    assert result and result[0].outcome == "committed"
    log = commits(table)
    assert len(log) == 3
    ours = result[0].table_version
    assert ours == 2 and log[1]["txn"] == [] and log[2]["txn"][0]["appId"] == plan.key.app_id
    # The other writer's commit landed inside ours: we read version 0 and committed after it
    # (Delta Spark's conflict check let the two blind appends through).
    assert log[2]["commitInfo"]["readVersion"] == 0
    cmp = check(table, str(tmp_path / "rows"))
    assert cmp.exact and cmp.table_rows == 105, cmp.describe()
    again = run_load(spark, ds_spec(source, table, plan, try_number=2))
    assert again.outcome == "already_committed" and again.table_version == ours
    verified(table, 2, foreign_files=1)


# -- Airflow ------------------------------------------------------------------------------------
_DAG = """
    from __future__ import annotations

    import os
    from datetime import timedelta

    import pendulum
    from airflow.sdk import DAG

    from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

    with DAG(
        dag_id="eod_delta_spark_engine",
        schedule="@daily",
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        default_args={"retries": 2, "retry_delay": timedelta(seconds=1)},
    ) as dag:
        LandingFilesToDeltaOperator(
            task_id="load_orders",
            landing_path=os.environ.get("EOD_DS_LANDING", "/tmp/eod-ds/landing"),
            table_uri=os.environ.get("EOD_DS_TABLE", "/tmp/eod-ds/table"),
            schema=os.environ.get("EOD_DS_SCHEMA"),
            partition_by=["order_date"],
            engine="delta-spark",
            jars=os.environ.get("EOD_DELTA_SPARK_JARS"),
        )
"""


@pytest.fixture
def ds_dag(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str, str]]:
    """The DAG above, in the session's DAGs folder (``dag.test()`` runs only DAGs of a
    configured bundle), removed again afterwards."""
    landing, table = str(tmp_path / "landing"), str(tmp_path / "table")
    monkeypatch.setenv("EOD_DS_LANDING", landing)
    monkeypatch.setenv("EOD_DS_TABLE", table)
    monkeypatch.setenv("EOD_DS_SCHEMA", ORDERS_DDL)
    path = os.path.join(os.environ["AIRFLOW__CORE__DAGS_FOLDER"], "eod_delta_spark_engine_test.py")
    with open(path, "w") as fh:
        fh.write(textwrap.dedent(_DAG))
    try:
        yield load_dag_file(path), landing, table
    finally:
        os.unlink(path)


@pytest.mark.airflow
@pytest.mark.airflow_current_only
@pytest.mark.faults
def test_the_operator_under_dag_test_retries_a_commit_it_never_asked_about(
    airflow_db: str, spark: Any, ds_dag: tuple[Any, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    module, landing, table = ds_dag
    write_order_files(landing, 2, 50)
    monkeypatch.setenv("EOD_FAULTPOINTS", "before_record=raise@1")
    run = module.dag.test(logical_date=datetime(2026, 11, 20, tzinfo=UTC))
    monkeypatch.delenv("EOD_FAULTPOINTS")
    assert str(run.state) == "success"
    assert task_tries(run.run_id, "load_orders") == ["failed", "success"]
    result = xcom_value(run.run_id, "load_orders")
    assert (result["outcome"], result["rows"], result["table_version"]) == ("already_committed", 100, 0)
    write_order_files(landing, 1, 50, first_id=7000)
    run2 = module.dag.test(logical_date=datetime(2026, 11, 21, tzinfo=UTC))
    second = xcom_value(run2.run_id, "load_orders")
    assert (second["outcome"], second["rows"], second["table_version"]) == ("committed", 50, 1)
    assert Manifest.from_user_metadata(commits(table)[1]["commitInfo"]["userMetadata"]).engine == ENGINE
    assert_loaded(table, landing, rows=150, batches=2)


@pytest.mark.airflow
@pytest.mark.airflow_current_only
def test_a_restatement_asked_by_dag_run_conf_is_refused_at_once(
    airflow_db: str, spark: Any, ds_dag: tuple[Any, str, str]
) -> None:
    module, landing, table = ds_dag
    write_order_files(landing, 1, 40)
    first = module.dag.test(logical_date=datetime(2026, 11, 20, tzinfo=UTC))
    loaded = xcom_value(first.run_id, "load_orders")
    plans_before = sorted(os.listdir(os.path.join(table, "_eod")))
    run = module.dag.test(
        logical_date=datetime(2026, 11, 21, tzinfo=UTC),
        run_conf={
            "eod_pipeline": "eod_delta_spark_engine.load_orders",
            "eod_restate": True,
            "eod_restate_batch_key": loaded["batch_key"],
        },
    )
    assert str(run.state) == "failed"
    assert task_tries(run.run_id, "load_orders") == ["failed"], "no retry can fix it"
    assert sorted(os.listdir(os.path.join(table, "_eod"))) == plans_before
    assert DeltaTable(table).version() == 0
    assert_loaded(table, landing, rows=40, batches=1)


@pytest.mark.faults
def test_a_commit_whose_reply_is_lost_is_reported_as_this_attempts(
    spark: Any, landing: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Delta Spark commits the batch, then ``save()`` raises (a lost Py4J reply, a failed
    post-commit hook). The attempt that committed reports ``committed``, found by its attempt
    id in the manifest. It used to report ``already_committed``: the error path returned
    "not ours" without asking whose commit it was (found by the issue 19 adversary)."""
    from pyspark.sql import DataFrameWriter

    write_order_files(landing, 1, 10, first_id=2000)
    source = orders_source(landing)
    plan = plan_for(source, table)
    real = DataFrameWriter.save

    def save_then_fail(self: Any, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        raise RuntimeError("py4j: Answer from Java side is empty")

    monkeypatch.setattr(DataFrameWriter, "save", save_then_fail)
    got = run_load(spark, spec_for(source, table, plan, engine=ENGINE))
    monkeypatch.undo()
    assert got.outcome == "committed", got
    assert got.table_version == DeltaTable(table).version() == 0
    again = run_load(spark, spec_for(source, table, plan, try_number=2, engine=ENGINE))
    assert again.outcome == "already_committed"
    cmp = check(table, landing)
    assert cmp.exact, cmp.describe()
    verified(table, 1)
