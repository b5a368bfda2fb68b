"""Cluster tier: loads submitted through SparkSubmitHook to a real Spark standalone master
and worker on 127.0.0.1, with the submitting task killed, and the driver killed.

The DAGs are tests/dags/eod_submit_test.py. A DAG run's task runs under ``dag.test()`` in a
child process, so that the test can SIGKILL it while its spark-submit and driver live on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import UTC, datetime
from typing import Any

import psutil
import pytest

from airflow_eod.core.result import ALREADY_COMMITTED, COMMITTED
from airflow_eod.examples.sample_data import write_order_files
from tests.conftest import REPO
from tests.support.dag_children import batch_commits, finish, staged, start_dag_run, wait_for
from tests.support.helpers import check, load_dag_file, xcom_value
from tests.support.jdbc_helpers import (
    airflow_connection,
    check_against_postgres,
    create_orders,
    insert_orders,
)
from tests.support.spark_cluster import task_env

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]

DAG_FILE = os.path.join(REPO, "tests", "dags", "eod_submit_test.py")
DAY = datetime(2026, 11, 2, tzinfo=UTC)


@pytest.fixture
def submit_env(
    spark_cluster: Any, airflow_db: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """The environment of a task in submit mode: the Spark connection, paths, spark-submit on PATH."""
    env = {
        **task_env(spark_cluster, "eod_spark_test"),
        "EOD_TEST_LANDING": str(tmp_path / "landing"),
        "EOD_TEST_TABLE": str(tmp_path / "table"),
        "EOD_TEST_JDBC_TABLE": str(tmp_path / "jdbc_table"),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("EOD_FAULTPOINTS", raising=False)
    return env


def _start_child(dag: str, logical_date: datetime | None, faults: str = "") -> subprocess.Popen[str]:
    return start_dag_run(DAG_FILE, dag, logical_date, {"EOD_FAULTPOINTS": faults})


def test_submit_mode_loads_landing_files_on_the_cluster(
    spark_cluster: Any, submit_env: dict[str, str]
) -> None:
    landing, table = submit_env["EOD_TEST_LANDING"], submit_env["EOD_TEST_TABLE"]
    write_order_files(os.path.join(landing, DAY.date().isoformat()), 3, 40)
    apps_before = len(spark_cluster.applications(completed=True))
    run, log = finish(_start_child("landing_dag", DAY))
    assert run["state"] == "success", log[-4000:]
    result = xcom_value(run["run_id"], "load")
    assert result["outcome"] == COMMITTED and result["rows"] == 120
    assert "Spark-Submit cmd: spark-submit --master spark://127.0.0.1:" in log
    assert "EOD_RESULT " in log, "the driver's result line reaches the task log"
    assert len(spark_cluster.applications(completed=True)) == apps_before + 1, "it ran on the cluster"
    cmp = check(table, os.path.join(landing, DAY.date().isoformat()))
    assert cmp.exact and cmp.table_rows == 120, cmp.describe()

    # A re-run of the interval: the table holds it, so no Spark application is submitted.
    t0 = time.perf_counter()
    module = load_dag_file(DAG_FILE)
    rerun = module.landing_dag.test(logical_date=DAY)
    elapsed = time.perf_counter() - t0
    assert str(rerun.state) == "success"
    again = xcom_value(rerun.run_id, "load")
    assert again["outcome"] == ALREADY_COMMITTED and again["table_version"] == result["table_version"]
    assert len(spark_cluster.applications(completed=True)) == apps_before + 1, "no second application"
    print(f"submit mode: a re-run of a committed batch took {elapsed:.2f}s (dag.test, in-process)")


@pytest.mark.jdbc
def test_submit_mode_loads_a_jdbc_table_with_credentials_only_in_the_environment(
    spark_cluster: Any, submit_env: dict[str, str], postgres: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_orders(postgres, "orders_submit")
    insert_orders(postgres, "orders_submit", range(1, 31))
    monkeypatch.setenv(
        "AIRFLOW_CONN_EOD_TEST_PG",
        airflow_connection(postgres),
    )
    run, log = finish(_start_child("jdbc_dag", None))
    assert run["state"] == "success", log[-4000:]
    table = submit_env["EOD_TEST_JDBC_TABLE"]
    result = xcom_value(run["run_id"], "load")
    assert result["outcome"] == COMMITTED and result["rows"] == 30
    cmp = check_against_postgres(postgres, "orders_submit", table)
    assert cmp.exact, cmp.describe()
    assert postgres.password not in log, "the password is not in the task's log"
    cmd = next((line for line in log.splitlines() if "Spark-Submit cmd:" in line), "")
    assert "--jars /usr/share/java/postgresql.jar" in cmd, cmd or log[-3000:]
    # The lines an operator reads in the task log (shown with `pytest -s`).
    shown = ("Spark-Submit cmd:", "EOD_RESULT", "submitting attempt", "the table holds")
    for line in log.splitlines():
        if any(k in line for k in shown):
            print(line)
    for dirpath, _dirs, files in os.walk(table):
        for name in files:
            if name.endswith(".json"):
                with open(os.path.join(dirpath, name)) as fh:
                    assert postgres.password not in fh.read(), f"the password is in {name}"


@pytest.mark.faults
# CI runs this zombie on YARN, in cluster deploy mode (tests/yarn/test_yarn_submit.py::
# test_a_task_killed_while_its_cluster_mode_driver_runs_is_retried_into_one_commit): the same
# decision from the table and fencing; on the standalone master it is `extended`.
@pytest.mark.extended
def test_a_task_killed_while_its_driver_runs_is_retried_into_one_commit(
    spark_cluster: Any, submit_env: dict[str, str]
) -> None:
    """SIGKILL the task process while its driver sits between staging and commit: the driver
    (a zombie) lives on and commits or loses; the retry submits again; one commit lands."""
    landing, table = submit_env["EOD_TEST_LANDING"], submit_env["EOD_TEST_TABLE"]
    day_landing = os.path.join(landing, DAY.date().isoformat())
    write_order_files(day_landing, 2, 30)
    first = _start_child("landing_dag", DAY, faults="before_commit=sleep:20")
    wait_for(lambda: staged(table), 180, "the first driver to stage its files")
    orphans = psutil.Process(first.pid).children(recursive=True)
    assert orphans, "spark-submit runs as a child of the task"
    os.kill(first.pid, signal.SIGKILL)
    first.communicate(timeout=30)
    assert any(p.is_running() for p in orphans), "the driver outlives its task: a zombie"
    run, log = finish(_start_child("landing_dag", DAY))
    assert run["state"] == "success", log[-4000:]
    outcome = xcom_value(run["run_id"], "load")["outcome"]
    assert outcome in (COMMITTED, ALREADY_COMMITTED)
    wait_for(lambda: not any(p.is_running() for p in orphans), 120, "the zombie driver to end")
    commits = batch_commits(table)
    assert len(commits) == 1, f"one commit of the batch, found {commits}"
    cmp = check(table, day_landing)
    assert cmp.exact and cmp.table_rows == 60, cmp.describe()
    print(f"zombie test: retry outcome {outcome}; commits of the batch: {len(commits)}")


@pytest.mark.faults
def test_a_driver_killed_after_its_commit_is_decided_by_the_table(
    spark_cluster: Any, submit_env: dict[str, str]
) -> None:
    """The driver dies (SIGKILL) right after its commit: spark-submit fails, and the task asks
    the table, which holds the batch. A retry of the run is then ``already_committed``."""
    landing, table = submit_env["EOD_TEST_LANDING"], submit_env["EOD_TEST_TABLE"]
    day_landing = os.path.join(landing, DAY.date().isoformat())
    write_order_files(day_landing, 2, 25)
    run, log = finish(_start_child("landing_dag", DAY, faults="after_commit=kill"))
    assert run["state"] == "success", log[-4000:]
    assert "Cannot execute: spark-submit" in log or "the submitted load failed" in log, log[-4000:]
    first = xcom_value(run["run_id"], "load")
    assert first["outcome"] == COMMITTED, "this attempt's manifest is the one the table holds"
    retry, log = finish(_start_child("landing_dag", DAY))
    assert retry["state"] == "success", log[-4000:]
    again = xcom_value(retry["run_id"], "load")
    assert again["outcome"] == ALREADY_COMMITTED and again["table_version"] == first["table_version"]
    assert "Spark-Submit cmd" not in log, "the retry asked the table and submitted nothing"
    assert len(batch_commits(table)) == 1
    cmp = check(table, day_landing)
    assert cmp.exact and cmp.table_rows == 50, cmp.describe()
