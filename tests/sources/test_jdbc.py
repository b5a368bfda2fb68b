"""JDBC incremental loads from a real PostgreSQL server, with the checker after each case."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.errors import InputChangedError
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.sources import Credentials, JdbcIncrementalSource, ReadContext
from airflow_eod.spark.driver import CREDENTIALS_PASSWORD_ENV, CREDENTIALS_USER_ENV
from airflow_eod.spark.load_job import run_load
from airflow_eod.spark.load_spec import LoadSettings, LoadSpec
from tests.support.helpers import run_child
from tests.support.jdbc_helpers import (
    airflow_connection,
    check_against_postgres,
    create_orders,
    insert_orders,
)

pytestmark = [pytest.mark.jdbc, pytest.mark.spark]


def _setup(pg: Any, name: str, n: int) -> None:
    create_orders(pg, name)
    insert_orders(pg, name, range(1, n + 1))


def _source(pg: Any, name: str, **kw: Any) -> JdbcIncrementalSource:
    return JdbcIncrementalSource(url=pg.jdbc_url, table=name, key_column="id", **kw)


def _ctx(spark: Any, pg: Any) -> ReadContext:
    return ReadContext(spark_factory=lambda: spark, credentials=Credentials(pg.user, pg.password))


def _plan(src: JdbcIncrementalSource, ctx: ReadContext, table: str, run: str) -> Plan | None:
    return src.plan(
        PlanLog(TableRef.parse(table), "tests.jdbc"),
        ctx,
        run_token=run,
        is_committed=lambda k: ask(TableRef.parse(table), k).committed,
    )


def _spec(src: JdbcIncrementalSource, table: str, plan: Plan, try_number: int = 1) -> LoadSpec:
    return LoadSpec(
        table=TableRef.parse(table),
        plan=plan,
        source=src,
        settings=LoadSettings(run_id="r", try_number=try_number),
    )


def test_incremental_batches_follow_the_key_frontier(spark: Any, postgres: Any, table: str) -> None:
    _setup(postgres, "orders_inc", 120)
    src = _source(postgres, "orders_inc", max_rows_per_batch=50, num_partitions=3)
    ctx = _ctx(spark, postgres)
    ranges = []
    for run in ("r0", "r1", "r2"):
        plan = _plan(src, ctx, table, run)
        assert plan is not None
        ranges.append((plan.boundary["low"], plan.boundary["high"], plan.inputs[0]["rows"]))
        assert run_load(spark, _spec(src, table, plan), credentials=ctx.credentials).outcome == "committed"
    assert ranges == [(None, 50, 50), (50, 100, 50), (100, 120, 20)]
    assert _plan(src, ctx, table, "r3") is None, "no rows above the frontier: nothing to plan"
    insert_orders(postgres, "orders_inc", range(121, 131))
    plan = _plan(src, ctx, table, "r4")
    assert plan is not None and (plan.boundary["low"], plan.boundary["high"]) == (120, 130)
    run_load(spark, _spec(src, table, plan), credentials=ctx.credentials)
    cmp = check_against_postgres(postgres, "orders_inc", table)
    assert cmp.exact and cmp.table_rows == 130, cmp.describe()


def test_rows_inserted_between_planning_and_reading_wait_for_the_next_batch(
    spark: Any, postgres: Any, table: str
) -> None:
    src, ctx, plan = _first_batch(spark, postgres, "orders_late", 40, table)
    assert plan.boundary["high"] == 40
    insert_orders(postgres, "orders_late", range(41, 61))  # arrive after planning
    result = run_load(spark, _spec(src, table, plan), credentials=ctx.credentials)
    assert result.rows == 40
    cmp = check_against_postgres(postgres, "orders_late", table, "id <= 40")
    assert cmp.exact, cmp.describe()
    nxt = _plan(src, ctx, table, "r1")
    assert nxt is not None and (nxt.boundary["low"], nxt.boundary["high"]) == (40, 60)
    run_load(spark, _spec(src, table, nxt), credentials=ctx.credentials)
    cmp = check_against_postgres(postgres, "orders_late", table)
    assert cmp.exact and cmp.table_rows == 60, cmp.describe()


def _first_batch(
    spark: Any, pg: Any, name: str, n: int, table: str, **kw: Any
) -> tuple[JdbcIncrementalSource, ReadContext, Plan]:
    """A fresh source table of ``n`` rows and the plan of its first batch."""
    _setup(pg, name, n)
    src = _source(pg, name, **kw)
    ctx = _ctx(spark, pg)
    plan = _plan(src, ctx, table, "r0")
    assert plan is not None
    return src, ctx, plan


def _child(spec: LoadSpec, pg: Any, tmp: Any, faults: str, name: str) -> subprocess.Popen[bytes]:
    """The spark-submit entrypoint in a child process, the credentials in its environment."""
    env = {
        "PYSPARK_SUBMIT_ARGS": "--jars /usr/share/java/postgresql.jar pyspark-shell",
        CREDENTIALS_USER_ENV: pg.user,
        CREDENTIALS_PASSWORD_ENV: pg.password,
    }
    return run_child(spec, str(tmp), faults, name, env)


@pytest.mark.faults
# CI kills after_stage in the landing-file tier (tests/spark/test_faults.py); here it is `extended`.
@pytest.mark.parametrize(
    "point",
    [
        "before_write",
        pytest.param("after_stage", marks=pytest.mark.extended),
        "before_commit",
        "after_commit",
    ],
)
def test_sigkill_at_a_boundary_then_a_retry_loads_every_row_once(
    spark: Any, postgres: Any, table: str, tmp_path: Any, point: str
) -> None:
    name = f"orders_kill_{point}"
    src, ctx, plan = _first_batch(spark, postgres, name, 30, table)
    child = _child(_spec(src, table, plan), postgres, tmp_path, f"{point}=kill", "child")
    out = child.communicate(timeout=300)[0].decode()
    assert child.returncode == -signal.SIGKILL, out[-2000:]
    committed = ask(TableRef.parse(table), plan.key).committed
    assert committed == (point == "after_commit")
    version = DeltaTable(table).version() if committed else None
    retry_plan = _plan(src, ctx, table, "r0")
    assert retry_plan == plan
    result = run_load(spark, _spec(src, table, retry_plan, try_number=2), credentials=ctx.credentials)
    assert result.outcome == ("already_committed" if committed else "committed")
    if committed:
        assert DeltaTable(table).version() == version, "the retry wrote nothing"
    cmp = check_against_postgres(postgres, name, table)
    assert cmp.exact and cmp.table_rows == 30, cmp.describe()


@pytest.mark.faults
def test_two_processes_loading_the_same_key_range_commit_once(
    spark: Any, postgres: Any, table: str, tmp_path: Any
) -> None:
    src, _, plan = _first_batch(spark, postgres, "orders_race", 40, table)
    # The first pauses between its ask and its commit: both have asked "no" before either commits.
    procs = [
        _child(_spec(src, table, plan), postgres, tmp_path, "before_commit=sleep:3", "a"),
        _child(_spec(src, table, plan, try_number=2), postgres, tmp_path, "", "b"),
    ]
    outs = [p.communicate(timeout=300)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-1500:] for o in outs)
    results = [json.loads((tmp_path / f"{n}-result.json").read_text()) for n in "ab"]
    assert sorted(r["outcome"] for r in results) == ["already_committed", "committed"]
    assert len(DeltaTable(table).history()) == 1
    cmp = check_against_postgres(postgres, "orders_race", table)
    assert cmp.exact and cmp.table_rows == 40, cmp.describe()


def test_a_row_changed_inside_the_planned_range_fails_the_batch(
    spark: Any, postgres: Any, table: str
) -> None:
    src, ctx, plan = _first_batch(spark, postgres, "orders_del", 20, table)
    postgres.execute("DELETE FROM orders_del WHERE id = 7")
    with pytest.raises(InputChangedError, match=r"held 20 rows when planned and holds 19 now") as err:
        run_load(spark, _spec(src, table, plan), credentials=ctx.credentials)
    assert plan.key.label in str(err.value)
    assert not os.path.exists(os.path.join(table, "_delta_log"))


@pytest.mark.airflow
def test_operator_keeps_credentials_out_of_logs_xcom_plans_and_commits(
    spark: Any, postgres: Any, airflow_db: str, tmp_path: Any, capfd: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.conftest import REPO
    from tests.support.helpers import load_dag_file, xcom_value

    _setup(postgres, "orders_dag", 25)
    table = str(tmp_path / "jdbc_table")
    monkeypatch.setenv("EOD_TEST_JDBC_TABLE", table)
    monkeypatch.setenv("AIRFLOW_CONN_EOD_TEST_PG", airflow_connection(postgres))
    module = load_dag_file(os.path.join(REPO, "tests", "dags", "eod_jdbc_test.py"))
    run = module.dag.test()
    assert str(run.state) == "success"
    result = xcom_value(run.run_id, "load")
    assert result["outcome"] == "committed" and result["rows"] == 25
    cmp = check_against_postgres(postgres, "orders_dag", table)
    assert cmp.exact, cmp.describe()
    logs = capfd.readouterr()
    assert "batch tests.jdbc_dag/o-00000000-" in logs.out + logs.err, "the log names the batch"
    haystacks = {"task logs": logs.out + logs.err, "xcom": json.dumps(result)}
    for dirpath, _dirs, files in os.walk(table):
        for name in files:
            if name.endswith(".json"):
                haystacks[os.path.join(dirpath, name)] = open(os.path.join(dirpath, name)).read()
    assert any("_eod" in k for k in haystacks) and any("_delta_log" in k for k in haystacks)
    for where, text in haystacks.items():
        assert postgres.password not in text, f"the password leaked into {where}"
        if where != "task logs":
            assert postgres.user not in text, f"the user name leaked into {where}"


@pytest.mark.parametrize("column_type", ["timestamp", "timestamptz"])
def test_a_timestamp_key_plans_exact_microsecond_frontiers(
    spark: Any, postgres: Any, table: str, column_type: str
) -> None:
    """Planning reads the head over a plain JDBC connection: a timestamp key's frontier keeps
    its microseconds, and a zoned one is read in UTC, so no row is skipped or read twice."""
    name = f"orders_ts_{column_type}"
    create_orders(postgres, name)
    if column_type == "timestamptz":
        postgres.execute(
            f"ALTER TABLE {name} ALTER COLUMN created_at TYPE timestamptz USING created_at AT TIME ZONE 'UTC'"
        )
    insert_orders(postgres, name, range(1, 31))  # naive values, taken as UTC
    if column_type == "timestamptz":
        # The loader's sessions see another zone: the frontier must still be UTC.
        postgres.execute(f"ALTER ROLE {postgres.user} SET timezone = 'America/New_York'")
    try:
        src = JdbcIncrementalSource(
            url=postgres.jdbc_url,
            table=name,
            key_column="created_at",
            key_type="timestamp",
            max_rows_per_batch=12,
        )
        ctx = _ctx(spark, postgres)
        highs = []
        for run in ("r0", "r1", "r2"):
            plan = _plan(src, ctx, table, run)
            assert plan is not None
            highs.append((plan.boundary["high"], plan.inputs[0]["rows"]))
            assert (
                run_load(spark, _spec(src, table, plan), credentials=ctx.credentials).outcome == "committed"
            )
        assert highs == [
            ("2026-11-01 12:00:00.000012", 12),
            ("2026-11-02 00:00:00.000024", 12),
            ("2026-11-02 06:00:00.000030", 6),
        ]
        assert _plan(src, ctx, table, "r3") is None
        cmp = check_against_postgres(postgres, name, table)
        assert cmp.exact and cmp.table_rows == 30, cmp.describe()
    finally:
        if column_type == "timestamptz":
            postgres.execute(f"ALTER ROLE {postgres.user} RESET timezone")
