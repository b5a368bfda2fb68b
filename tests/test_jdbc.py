"""JDBC incremental loads from a real PostgreSQL server, with the checker after each case."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.errors import InputChangedError
from airflow_eod.core.plan_log import Plan, PlanLog
from airflow_eod.sources import Credentials, JdbcIncrementalSource, ReadContext
from airflow_eod.spark.load_job import CREDENTIALS_PASSWORD_ENV, CREDENTIALS_USER_ENV, LoadSpec, run_load
from tests.jdbc_helpers import check_against_postgres, create_orders, insert_orders

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
        PlanLog(table, "tests.jdbc"), ctx, run_token=run, is_committed=lambda k: ask(table, k).committed
    )


def _spec(src: JdbcIncrementalSource, table: str, plan: Plan, try_number: int = 1) -> LoadSpec:
    return LoadSpec(
        table_uri=table, plan=asdict(plan), source=src.to_dict(), run_id="r", try_number=try_number
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
    _setup(postgres, "orders_late", 40)
    src = _source(postgres, "orders_late")
    ctx = _ctx(spark, postgres)
    plan = _plan(src, ctx, table, "r0")
    assert plan is not None and plan.boundary["high"] == 40
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


def test_a_crash_after_the_commit_then_a_retry_writes_nothing(
    spark: Any, postgres: Any, table: str, tmp_path: Any
) -> None:
    _setup(postgres, "orders_crash", 30)
    src = _source(postgres, "orders_crash")
    ctx = _ctx(spark, postgres)
    plan = _plan(src, ctx, table, "r0")
    assert plan is not None
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(_spec(src, table, plan).to_json())
    env = dict(
        os.environ,
        EOD_FAULTPOINTS="after_commit=kill",
        PYSPARK_SUBMIT_ARGS="--jars /usr/share/java/postgresql.jar pyspark-shell",
        **{CREDENTIALS_USER_ENV: postgres.user, CREDENTIALS_PASSWORD_ENV: postgres.password},
    )
    child = subprocess.run(
        [sys.executable, "-m", "airflow_eod.spark.load_job", "--spec", str(spec_path)],
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert child.returncode == -signal.SIGKILL, child.stdout.decode()[-2000:] + child.stderr.decode()[-2000:]
    assert ask(table, plan.key).committed
    version = DeltaTable(table).version()
    retry_plan = _plan(src, ctx, table, "r0")
    assert retry_plan == plan
    result = run_load(spark, _spec(src, table, retry_plan, try_number=2), credentials=ctx.credentials)
    assert result.outcome == "already_committed" and DeltaTable(table).version() == version
    cmp = check_against_postgres(postgres, "orders_crash", table)
    assert cmp.exact and cmp.table_rows == 30, cmp.describe()


def test_a_row_changed_inside_the_planned_range_fails_the_batch(
    spark: Any, postgres: Any, table: str
) -> None:
    _setup(postgres, "orders_del", 20)
    src = _source(postgres, "orders_del")
    ctx = _ctx(spark, postgres)
    plan = _plan(src, ctx, table, "r0")
    assert plan is not None
    postgres.execute("DELETE FROM orders_del WHERE id = 7")
    with pytest.raises(InputChangedError, match=r"held 20 rows when planned and holds 19 now") as err:
        run_load(spark, _spec(src, table, plan), credentials=ctx.credentials)
    assert plan.key.label in str(err.value)
    assert not os.path.exists(os.path.join(table, "_delta_log"))


@pytest.mark.airflow
def test_operator_keeps_credentials_out_of_logs_xcom_plans_and_commits(
    spark: Any, postgres: Any, airflow_db: str, tmp_path: Any, capfd: Any
) -> None:
    from tests.conftest import REPO
    from tests.test_airflow import _load_dag_file, _xcom

    _setup(postgres, "orders_dag", 25)
    table = str(tmp_path / "jdbc_table")
    os.environ["EOD_TEST_JDBC_TABLE"] = table
    os.environ["AIRFLOW_CONN_EOD_TEST_PG"] = json.dumps(
        {
            "conn_type": "postgres",
            "host": postgres.host,
            "port": postgres.port,
            "schema": postgres.database,
            "login": postgres.user,
            "password": postgres.password,
        }
    )
    module = _load_dag_file(os.path.join(REPO, "tests", "dags", "eod_jdbc_test.py"))
    run = module.dag.test()
    assert str(run.state) == "success"
    result = _xcom(run.run_id, "load")
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
