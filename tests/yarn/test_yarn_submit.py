"""Submit mode on YARN: loads through SparkSubmitHook with a ``yarn`` Spark connection, in
client and in cluster deploy mode, on Hadoop's mini cluster (tests/support/mini_yarn.py).

Each test runs a DAG of tests/dags/eod_yarn_test.py under ``dag.test()`` in a child process
(the task log is its output) and ends with the row-by-row checker.
"""

from __future__ import annotations

import os
import shutil
import signal
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.result import ALREADY_COMMITTED, COMMITTED
from airflow_eod.examples.sample_data import write_order_files
from tests.support.dag_children import batch_commits, finish, staged, wait_for
from tests.support.helpers import check, xcom_value
from tests.support.jdbc_helpers import (
    airflow_connection,
    check_against_postgres,
    create_orders,
    insert_orders,
)
from tests.support.spark_conf import delta_spark_conf
from tests.support.yarn_runs import (
    app_ids,
    driver_faults,
    new_applications,
    rerun_in_process,
    start_run,
    yarn_task_env,
)

pytestmark = [pytest.mark.yarn, pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]

DAY = datetime(2026, 11, 2, tzinfo=UTC)


@pytest.fixture
def yarn_env(
    mini_yarn: Any, airflow_db: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    env = {
        **yarn_task_env(mini_yarn),
        "EOD_TEST_LANDING": str(tmp_path / "landing"),
        "EOD_TEST_TABLE": str(tmp_path / "table"),
        "EOD_TEST_JDBC_TABLE": str(tmp_path / "jdbc_table"),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("EOD_FAULTPOINTS", raising=False)
    return env


def test_landing_files_load_on_yarn_in_client_mode(mini_yarn: Any, yarn_env: dict[str, str]) -> None:
    """The driver in the task (client mode), the executors on YARN. (Cluster mode loads landing
    files in every test below, into local and HDFS tables.)"""
    mode = "client"
    landing, table = yarn_env["EOD_TEST_LANDING"], yarn_env["EOD_TEST_TABLE"]
    day = os.path.join(landing, DAY.date().isoformat())
    write_order_files(day, 3, 20)
    before = app_ids(mini_yarn)
    run, log = finish(start_run(f"landing_{mode}", DAY))
    assert run["state"] == "success", log[-6000:]
    result = xcom_value(run["run_id"], "load")
    assert result["outcome"] == COMMITTED and result["rows"] == 60
    apps = new_applications(mini_yarn, before)
    assert len(apps) == 1, apps
    assert apps[0]["finalStatus"] == "SUCCEEDED", apps[0]
    assert apps[0]["id"] in log, "the task log names the YARN application"
    print("\n".join(line for line in log.splitlines() if "application_" in line or "batch " in line))
    cmp = check(table, day)
    assert cmp.exact and cmp.table_rows == 60, cmp.describe()
    assert len(batch_commits(table)) == 1

    # The same interval again (in this process): the table holds it, nothing is submitted.
    assert rerun_in_process(f"landing_{mode}", DAY) == ALREADY_COMMITTED
    assert len(new_applications(mini_yarn, before)) == 1, "no second application"


def _running(cluster: Any, before: set[str]) -> str | None:
    for app in new_applications(cluster, before):
        if app["state"] == "RUNNING":
            return str(app["id"])
    return None


def _files_containing(root: str, needle: str) -> list[str]:
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                with open(path, "rb") as fh:
                    if needle.encode() in fh.read():
                        found.append(path)
            except OSError:
                continue
    return found


# CI: delta-rs; Delta Spark on HDFS is `extended` here (tests/spark/test_hdfs_loads.py loads,
# crashes and races it on the mini HDFS in CI).
@pytest.mark.parametrize(
    "engine", ["delta-rs", pytest.param("delta-spark", marks=[pytest.mark.delta_spark, pytest.mark.extended])]
)
def test_a_cluster_mode_driver_loads_an_hdfs_table(
    mini_yarn: Any, yarn_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, engine: str
) -> None:
    """The table on the cluster's HDFS: the spec is written beside it on HDFS, the driver on
    YARN reads it there, the executors write over hdfs://, the driver commits (delta-rs:
    put-if-absent as a rename without overwrite; Delta Spark: its HDFSLogStore), and the task
    asks the table on HDFS. A re-run asks and submits nothing."""
    landing = yarn_env["EOD_TEST_LANDING"]
    table = f"{mini_yarn.namenode}/lake/{uuid.uuid4().hex}/orders"
    monkeypatch.setenv("EOD_TEST_TABLE", table)
    monkeypatch.setenv("EOD_TEST_ENGINE", engine)
    day = os.path.join(landing, DAY.date().isoformat())
    write_order_files(day, 2, 20)
    before = app_ids(mini_yarn)
    conf = delta_spark_conf() if engine == "delta-spark" else {}
    run, log = finish(start_run("landing_cluster", DAY, conf=conf))
    [app] = new_applications(mini_yarn, before)
    assert run["state"] == "success", log[-3000:] + mini_yarn.container_logs(app["id"])
    assert xcom_value(run["run_id"], "load")["outcome"] == COMMITTED
    assert f"Identified spark application id: {app['id']}" in log, "the task log names the application"
    assert f"spark-submit ran YARN application {app['id']}" in log, "and so does the decision"
    print(
        "\n".join(
            line for line in log.splitlines() if "application_" in line and "Application report" not in line
        )
    )
    assert len(DeltaTable(table).history()) == 1
    cmp = check(table, day)
    assert cmp.exact and cmp.table_rows == 40, cmp.describe()
    assert rerun_in_process("landing_cluster", DAY) == ALREADY_COMMITTED
    assert len(new_applications(mini_yarn, before)) == 1, "the re-run submitted nothing"


@pytest.mark.jdbc
# CI: cluster mode (where the credentials travel); client mode is `extended`.
@pytest.mark.parametrize("mode", [pytest.param("client", marks=pytest.mark.extended), "cluster"])
def test_jdbc_load_on_yarn_and_where_its_credentials_go(
    mini_yarn: Any, yarn_env: dict[str, str], postgres: Any, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The source's password reaches the driver in its environment: client mode, spark-submit's
    process environment (no command line); cluster mode, a ``spark.yarn.appMasterEnv`` setting
    on spark-submit's command line, masked in the task log, redacted by Spark, and gone from
    HDFS (the staging directory) and the node's files when the application ends."""
    postgres.execute("DROP TABLE IF EXISTS orders_yarn")
    create_orders(postgres, "orders_yarn")
    insert_orders(postgres, "orders_yarn", range(1, 41))
    monkeypatch.setenv("AIRFLOW_CONN_EOD_TEST_PG", airflow_connection(postgres))
    before = app_ids(mini_yarn)
    run, log = finish(start_run(f"jdbc_{mode}", None))
    assert run["state"] == "success", log[-6000:]
    table = yarn_env["EOD_TEST_JDBC_TABLE"]
    result = xcom_value(run["run_id"], "load")
    assert result["outcome"] == COMMITTED and result["rows"] == 40
    apps = new_applications(mini_yarn, before)
    assert len(apps) == 1 and apps[0]["finalStatus"] == "SUCCEEDED", apps
    cmp = check_against_postgres(postgres, "orders_yarn", table)
    assert cmp.exact, cmp.describe()

    assert postgres.password not in log, "the password is not in the task's log"
    submit_cmd = next(line for line in log.splitlines() if "Spark-Submit cmd:" in line)
    if mode == "cluster":
        # The hook passes env_vars to the AM as settings on the command line (masked here).
        assert "spark.yarn.appMasterEnv.EOD_SOURCE_PASSWORD=***" in submit_cmd, submit_cmd
    else:
        assert "EOD_SOURCE_PASSWORD" not in submit_cmd, "client mode: the environment, not argv"
    assert "--jars /usr/share/java/postgresql.jar" in submit_cmd, "the command is logged whole"
    mini_yarn.wait_finished(apps[0]["id"])
    assert not mini_yarn.staging_exists(apps[0]["id"]), "the staging directory on HDFS is removed"
    assert not _files_containing(table, postgres.password), "not in the table, its plan or its specs"
    kept = _files_containing(mini_yarn.root, postgres.password)
    print(f"{mode} mode: the password is kept in {len(kept)} file(s) of the cluster:", *kept, sep="\n  ")
    if mode == "client":
        assert not kept, f"client mode: the password never reaches the cluster, found in {kept}"
        return
    # What YARN keeps of an application's environment (docs/deployment.md says so): the
    # NodeManager's localized copy of Spark's __spark_conf__.zip and the container's launch
    # script (kept with its logs); and, until the DataNode drops it, the block of the staging
    # directory's copy. Nowhere else: not in a container's output (Spark redacts it).
    where = {
        "__spark_conf__.properties": "the NodeManager's localized Spark configuration",
        "launch_container.sh": "the container's launch script",
        "blk_": "a DataNode block of the deleted staging copy",
    }
    for path in kept:
        assert any(mark in os.path.basename(path) for mark in where), f"the password is in {path}"
    assert any(p.endswith("launch_container.sh") for p in kept), kept
    assert "reach the driver on the YARN cluster" in log, "the task log warns where they go"


@pytest.mark.faults
@pytest.mark.jdbc
def test_on_kill_kills_the_cluster_mode_application_and_leaves_no_password_on_hdfs(
    mini_yarn: Any, yarn_env: dict[str, str], postgres: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM of the task (what Airflow sends when a task is stopped from the UI or times
    out) runs the operator's on_kill, on a worker without a ``yarn`` command: the YARN
    application is killed first (its driver would otherwise load on), then spark-submit,
    which has removed its staging directory, whose ``__spark_conf__.zip`` holds the source's
    password (the adversary of issue 24 found it left there when spark-submit was killed
    first: tests/regressions/test_yarn_adversary.py). The retry loads the rows once."""
    assert shutil.which("yarn") is None, "this test shows the kill without Hadoop's CLI"
    postgres.execute("DROP TABLE IF EXISTS orders_yarn")
    create_orders(postgres, "orders_yarn")
    insert_orders(postgres, "orders_yarn", range(1, 21))
    monkeypatch.setenv("AIRFLOW_CONN_EOD_TEST_PG", airflow_connection(postgres))
    table = yarn_env["EOD_TEST_JDBC_TABLE"]
    before = app_ids(mini_yarn)
    child = start_run("jdbc_cluster", None, conf=driver_faults("before_commit=sleep:120"))
    try:
        app = wait_for(lambda: _running(mini_yarn, before), 180, "the application to run")
        wait_for(lambda: staged(table), 180, "the driver to stage its files")
        child.send_signal(signal.SIGTERM)
        run, log = finish(child)
    finally:
        if child.poll() is None:
            child.kill()
    ended = mini_yarn.wait_finished(app, timeout=90)
    assert ended["state"] == "KILLED", ended
    assert f"YARN application {app}: kill returned 0" in log, log[-4000:]
    assert run["state"] == "failed"
    assert not mini_yarn.staging_exists(app), "the staging directory (and the password in it) is gone"
    assert not os.path.exists(os.path.join(table, "_delta_log")) or not batch_commits(table)

    retry, log = finish(start_run("jdbc_cluster", None))
    assert retry["state"] == "success", log[-4000:]
    assert xcom_value(retry["run_id"], "load")["outcome"] == COMMITTED
    assert len(batch_commits(table)) == 1
    cmp = check_against_postgres(postgres, "orders_yarn", table)
    assert cmp.exact, cmp.describe()


@pytest.mark.faults
def test_a_task_killed_while_its_cluster_mode_driver_runs_is_retried_into_one_commit(
    mini_yarn: Any, yarn_env: dict[str, str]
) -> None:
    """SIGKILL of the task: no on_kill, the cluster-mode driver (a zombie on YARN) loads on and
    commits or loses to the retry, which submits a second application; one commit lands."""
    landing, table = yarn_env["EOD_TEST_LANDING"], yarn_env["EOD_TEST_TABLE"]
    day = os.path.join(landing, DAY.date().isoformat())
    write_order_files(day, 2, 20)
    before = app_ids(mini_yarn)
    first = start_run("landing_cluster", DAY, conf=driver_faults("before_commit=sleep:25"))
    zombie = wait_for(lambda: _running(mini_yarn, before), 180, "the application to run")
    wait_for(lambda: staged(table), 180, "the zombie to stage its files")
    os.kill(first.pid, signal.SIGKILL)
    first.communicate(timeout=30)
    assert mini_yarn.application(zombie)["state"] == "RUNNING", "the driver outlives its task"
    run, log = finish(start_run("landing_cluster", DAY))
    assert run["state"] == "success", log[-4000:]
    outcome = xcom_value(run["run_id"], "load")["outcome"]
    ended = mini_yarn.wait_finished(zombie)
    apps = new_applications(mini_yarn, before)
    commits = batch_commits(table)
    print(f"zombie on YARN: zombie {zombie} {ended['finalStatus']}, retry {outcome}, commits {len(commits)}")
    assert len(apps) == 2, "the retry submitted its own application"
    assert len(commits) == 1, f"one commit of the batch, found {commits}"
    cmp = check(table, day)
    assert cmp.exact and cmp.table_rows == 40, cmp.describe()


@pytest.mark.faults
# CI: before_record with YARN's re-attempt (the run after the commit finds it); the other
# two are `extended`.
@pytest.mark.parametrize(
    ("point", "attempts"),
    [
        pytest.param("before_commit", 2, marks=pytest.mark.extended),
        ("before_record", 2),
        pytest.param("before_record", 1, marks=pytest.mark.extended),
    ],
)
def test_a_crashed_cluster_mode_driver_is_decided_by_the_table_and_yarn_reattempts_it_once(
    mini_yarn: Any, yarn_env: dict[str, str], tmp_path: Any, point: str, attempts: int
) -> None:
    """The driver is SIGKILLed before its commit, or between its commit and its record.
    ``spark.yarn.maxAppAttempts=2``: YARN starts the driver again with the same spec, as an
    attempt of its own, which commits, or finds the first run's commit. ``=1``: the
    application fails, spark-submit fails, and the task finds the batch in the table. Either
    way one commit lands, and the task decides ``committed`` from the table."""
    landing, table = yarn_env["EOD_TEST_LANDING"], yarn_env["EOD_TEST_TABLE"]
    day = os.path.join(landing, DAY.date().isoformat())
    write_order_files(day, 2, 20)
    before = app_ids(mini_yarn)
    marker = tmp_path / "first-attempt-died"
    conf = {**driver_faults(f"{point}=kill^{marker}"), "spark.yarn.maxAppAttempts": str(attempts)}
    run, log = finish(start_run("landing_cluster", DAY, conf=conf))
    assert marker.exists(), "the first attempt reached the fault point"
    [app] = new_applications(mini_yarn, before)
    ran = mini_yarn.attempts(app["id"])
    print(f"driver killed at {point}, maxAppAttempts {attempts}: {len(ran)} attempt(s), {app['finalStatus']}")
    assert len(ran) == attempts, ran
    assert app["finalStatus"] == ("SUCCEEDED" if attempts > 1 else "FAILED"), app
    assert run["state"] == "success", log[-3000:] + mini_yarn.container_logs(app["id"])
    assert xcom_value(run["run_id"], "load")["outcome"] == COMMITTED
    assert len(batch_commits(table)) == 1
    cmp = check(table, day)
    assert cmp.exact and cmp.table_rows == 40, cmp.describe()
