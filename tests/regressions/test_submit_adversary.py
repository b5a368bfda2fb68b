"""Adversarial tests of the one load flow, submit mode and libpq planning.

Each test asserts what the guarantee promises and ends with a row-by-row check where data is
involved. Tests that fail while a defect exists say so in their docstring.

Pinned here, one test each: libpq planning under a non-ISO ``DateStyle`` and under libpq
settings the JDBC URL does not state (``PGOPTIONS``...); a driver in a non-UTC time zone; the
password on YARN's spark-submit command line; the input-changed error in submit mode; a
spark-submit that cannot start; and two regression guards (a driver killed between its commit
and its record, a zombie restatement driver).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_eod.airflow_exceptions import AirflowFailException
from airflow_eod.core.ask import ask
from airflow_eod.core.errors import BatchError, InputChangedError
from airflow_eod.core.load_flow import LoadRequest, load_batch
from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.result import ALREADY_COMMITTED, COMMITTED, NO_NEW_DATA
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.runners.local import local_run
from airflow_eod.sources import Credentials, JdbcIncrementalSource, ReadContext
from airflow_eod.spark.driver import CREDENTIALS_PASSWORD_ENV, CREDENTIALS_USER_ENV
from airflow_eod.spark.load_spec import LoadSettings, LoadSpec
from tests.conftest import REPO
from tests.support.helpers import check, run_child
from tests.support.jdbc_helpers import (
    airflow_connection,
    check_against_postgres,
    create_orders,
    insert_orders,
)
from tests.support.spark_cluster import task_env

DAY = (dt.datetime(2026, 11, 2, tzinfo=dt.UTC), dt.datetime(2026, 11, 3, tzinfo=dt.UTC))


def _no_spark() -> Any:
    raise AssertionError("planning and the ask must not start Spark")


def _context(run_id: str, try_number: int = 1, interval: tuple[Any, Any] | None = None) -> dict[str, Any]:
    """What Airflow hands ``execute``: the task instance and the data interval."""
    ti = SimpleNamespace(dag_id="adv", task_id="load", run_id=run_id, map_index=-1, try_number=try_number)
    ctx: dict[str, Any] = {"ti": ti}
    if interval is not None:
        ctx["data_interval_start"], ctx["data_interval_end"] = interval
    return ctx


def _zoned_orders(pg: Any, name: str, ids: range) -> None:
    """The orders table of tests/support/jdbc_helpers.py with a ``timestamptz`` key."""
    create_orders(pg, name)
    pg.execute(
        f"ALTER TABLE {name} ALTER COLUMN created_at TYPE timestamptz USING created_at AT TIME ZONE 'UTC'"
    )
    insert_orders(pg, name, ids)  # naive values, taken as UTC by the eod_loader session


# -- libpq planning ---------------------------------------------------------------------------
@pytest.mark.jdbc
@pytest.mark.spark
def test_libpq_planning_of_a_timestamptz_key_works_whatever_the_database_datestyle(
    spark: Any, postgres: Any, table: str
) -> None:
    """FAILS now. A database (or role) with a non-ISO ``DateStyle`` (``SQL, DMY``, ``German``,
    ``Postgres``) makes psycopg unable to parse ``timestamptz`` values, so the libpq planning
    query fails on every run: a pipeline that planned fine over the JVM (pgjdbc forces ISO)
    can never move again. The JVM read itself is unaffected."""
    name, role, password = "adv_datestyle", "adv_datestyle_loader", "adv-DateStyle-pw-1"
    _zoned_orders(postgres, name, range(1, 21))
    postgres.execute(f"DROP ROLE IF EXISTS {role}")
    postgres.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
    postgres.execute(f"ALTER ROLE {role} SET DateStyle = 'SQL, DMY'")
    postgres.execute(f"GRANT SELECT ON {name} TO {role}")
    creds = Credentials(role, password)
    source = JdbcIncrementalSource(
        url=postgres.jdbc_url,
        table=name,
        key_column="created_at",
        key_type="timestamp",
        max_rows_per_batch=15,
    )
    # Control: the JVM path (a URL parameter libpq is not told about) plans this source fine.
    jvm = JdbcIncrementalSource(
        url=postgres.jdbc_url + "?prepareThreshold=5",
        table=name,
        key_column="created_at",
        key_type="timestamp",
    )
    jvm_plan = jvm.plan(
        PlanLog(TableRef.parse(table + "-jvm"), "adv.datestyle"),
        ReadContext(spark_factory=lambda: spark, credentials=creds),
        run_token="control",
        is_committed=lambda k: False,
    )
    assert jvm_plan is not None and jvm_plan.inputs[0]["rows"] == 20
    results = []
    for run in ("run-1", "run-2", "run-3"):
        results.append(
            load_batch(
                LoadRequest(TableRef.parse(table), "adv.datestyle", run),
                source,
                ReadContext(spark_factory=_no_spark, credentials=creds),
                run=local_run(lambda: spark, TableRef.parse(table), source, credentials=creds),
            )
        )
    assert [(r.outcome, r.rows) for r in results] == [(COMMITTED, 15), (COMMITTED, 5), (NO_NEW_DATA, 0)]
    cmp = check_against_postgres(postgres, name, table)
    assert cmp.exact and cmp.table_rows == 20, cmp.describe()


@pytest.mark.jdbc
@pytest.mark.spark
def test_libpq_planning_reads_the_same_table_as_the_jvm_read_whatever_pgoptions_says(
    spark: Any, postgres: Any, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FAILS now. libpq takes settings the JDBC URL never states from the worker's
    environment (``PGOPTIONS``, ``PGDATESTYLE``, ...); pgjdbc ignores them. With a
    ``search_path`` in ``PGOPTIONS`` the plan's frontier and count come from another table
    than the one Spark reads: the batch commits 5 rows, and rows 6..30 are never loaded."""
    name = "adv_pgoptions"
    create_orders(postgres, name)
    insert_orders(postgres, name, range(1, 31))
    postgres.execute("CREATE SCHEMA IF NOT EXISTS adv_shadow")
    create_orders(postgres, f"adv_shadow.{name}")
    insert_orders(postgres, f"adv_shadow.{name}", range(1, 6))
    monkeypatch.setenv("PGOPTIONS", "-c search_path=adv_shadow,public")
    creds = Credentials(postgres.user, postgres.password)
    source = JdbcIncrementalSource(url=postgres.jdbc_url, table=name, key_column="id")
    outcomes = []
    for run in ("run-1", "run-2"):
        r = load_batch(
            LoadRequest(TableRef.parse(table), "adv.pgoptions", run),
            source,
            ReadContext(spark_factory=lambda: spark, credentials=creds),
            run=local_run(lambda: spark, TableRef.parse(table), source, credentials=creds),
        )
        outcomes.append((r.outcome, r.rows))
    monkeypatch.delenv("PGOPTIONS")
    assert outcomes[0] == (COMMITTED, 30), f"the first batch is every row of public.{name}: {outcomes}"
    cmp = check_against_postgres(postgres, f"public.{name}", table)
    assert cmp.exact and cmp.table_rows == 30, cmp.describe()


# -- the driver's JVM time zone ---------------------------------------------------------------
@pytest.mark.jdbc
@pytest.mark.spark
def test_a_driver_in_a_non_utc_time_zone_writes_the_source_timestamps_unchanged(
    postgres: Any, table: str, tmp_path: Any
) -> None:
    """FAILS now (an older defect that submit mode makes likelier: the driver and executors
    run on cluster nodes, in their own time zone). Spark's JDBC reader turns a
    ``timestamp without time zone`` into an instant through the JVM's default zone, not
    ``spark.sql.session.timeZone``: a driver whose JVM runs in America/New_York commits every
    ``created_at`` shifted by 4-5 hours."""
    name = "adv_driver_tz"
    create_orders(postgres, name)
    insert_orders(postgres, name, range(1, 11))
    source = JdbcIncrementalSource(url=postgres.jdbc_url, table=name, key_column="id")
    creds = Credentials(postgres.user, postgres.password)
    plan = source.plan(
        PlanLog(TableRef.parse(table), "adv.driver_tz"),
        ReadContext(spark_factory=_no_spark, credentials=creds),
        run_token="run-1",
        is_committed=lambda k: ask(TableRef.parse(table), k).committed,
    )
    assert plan is not None
    spec = LoadSpec(
        table=TableRef.parse(table),
        plan=plan,
        source=source,
        settings=LoadSettings(run_id="run-1", try_number=1),
    )
    env = {
        "TZ": "America/New_York",
        "PYSPARK_SUBMIT_ARGS": "--jars /usr/share/java/postgresql.jar pyspark-shell",
        CREDENTIALS_USER_ENV: postgres.user,
        CREDENTIALS_PASSWORD_ENV: postgres.password,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    child = run_child(spec, str(tmp_path), env=env)
    out, _ = child.communicate(timeout=240)
    assert child.returncode == 0, out.decode(errors="replace")[-3000:]
    assert ask(TableRef.parse(table), plan.key).committed
    cmp = check_against_postgres(postgres, name, table)
    assert cmp.exact and cmp.table_rows == 10, cmp.describe()


# -- secrets ----------------------------------------------------------------------------------
RECORDING_SPARK_SUBMIT = """#!/bin/sh
# Stands in for spark-submit on a machine without YARN: records what `ps` would show, fails.
printf '%s\\n' "$@" > "$EOD_ADV_ARGV"
exit 3
"""


@pytest.mark.jdbc
def test_submit_mode_on_yarn_keeps_the_password_off_the_spark_submit_command_line(
    postgres: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FAILS now. On YARN (client deploy mode too) SparkSubmitHook turns ``env_vars`` into
    ``--conf spark.yarn.appMasterEnv.EOD_SOURCE_PASSWORD=<password>`` on spark-submit's
    command line: every local user sees it in ``ps`` / ``/proc/<pid>/cmdline``. The docs
    promise credentials "never on its command line" in client mode."""
    from airflow_eod.operators.jdbc_to_delta import JdbcToDeltaOperator

    name = "adv_yarn_secret"
    create_orders(postgres, name)
    insert_orders(postgres, name, range(1, 6))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "spark-submit"
    fake.write_text(RECORDING_SPARK_SUBMIT)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    argv_file = tmp_path / "argv.txt"
    monkeypatch.setenv("EOD_ADV_ARGV", str(argv_file))
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(
        "AIRFLOW_CONN_ADV_YARN",
        json.dumps({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "client"}}),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_ADV_PG",
        airflow_connection(postgres),
    )
    table = str(tmp_path / "table")
    op = JdbcToDeltaOperator(
        task_id="load",
        execution="submit",
        spark_conn_id="adv_yarn",
        jdbc_conn_id="adv_pg",
        source_table=name,
        key_column="id",
        table_uri=table,
        pipeline_id="adv.yarn_secret",
    )
    with pytest.raises(BatchError, match="did not commit"):
        op.execute(_context("run-1"))
    argv = argv_file.read_text()
    assert "airflow_eod/spark/driver.py" in argv, argv
    assert postgres.password not in argv, f"the password is on spark-submit's command line:\n{argv}"


# -- submit mode on the real standalone cluster ------------------------------------------------
CLUSTER_CONF = {
    "spark.pyspark.python": sys.executable,
    "spark.executor.memory": "1g",
    "spark.cores.max": "1",
    "spark.sql.shuffle.partitions": "2",
}
CONN_ID = "adv_spark"
ORDERS_DDL = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"


@pytest.fixture
def cluster_env(spark_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A task's environment in submit mode: the Spark connection and spark-submit on PATH."""
    env = task_env(spark_cluster, CONN_ID)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("EOD_FAULTPOINTS", raising=False)
    return env


def _landing_op(execution: str, day_dir: str, table: str, pipeline: str, **kw: Any) -> Any:
    from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

    extra: dict[str, Any] = (
        {"spark_conn_id": CONN_ID, "spark_conf": CLUSTER_CONF} if execution == "submit" else {}
    )
    return LandingFilesToDeltaOperator(
        task_id="load",
        execution=execution,
        landing_path=day_dir,
        boundary="interval",
        table_uri=table,
        pipeline_id=pipeline,
        file_format="csv",
        schema=ORDERS_DDL,
        **extra,
        **kw,
    )


def _rewrite(day_dir: str, rows: int, seed: int) -> None:
    """Rewrite the day's first file in place with other rows (a corrected delivery)."""
    write_order_files(day_dir, 1, rows, seed=seed)


def _txn_commits(table: str) -> list[tuple[str, int]]:
    """(commit file, txn version) of every Delta commit that carries a batch marker."""
    log_dir = os.path.join(table, "_delta_log")
    found = []
    for name in sorted(os.listdir(log_dir)):
        if name.endswith(".json") and name[:-5].isdigit():
            with open(os.path.join(log_dir, name)) as fh:
                for line in fh:
                    action = json.loads(line) if line.strip() else {}
                    if "txn" in action:
                        found.append((name, int(action["txn"]["version"])))
    return found


@pytest.mark.cluster
@pytest.mark.spark
@pytest.mark.badinput
@pytest.mark.parametrize("execution", ["local", "submit"])
def test_an_input_changed_after_planning_fails_with_the_same_clear_error_in_both_modes(
    execution: str, spark: Any, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    """FAILS now in submit mode (local mode is the control). I6: an error names the batch and
    the cause. Locally a file rewritten after planning raises ``InputChangedError`` with the
    way out (``restate_batch_key=...``); submitted, the driver's error is replaced by
    ``BatchError: ... Cannot execute: spark-submit ... Error code is: 1.``: neither the type,
    the file nor the way out reaches the task's error. Then the way out (a restatement run)
    must load the corrected file, in either mode."""
    if execution == "submit":
        request.getfixturevalue("cluster_env")
    day_dir, table = str(tmp_path / "landing" / "2026-11-02"), str(tmp_path / "table")
    write_order_files(day_dir, 2, 10)
    pipeline = f"adv.changed_{execution}"
    op = _landing_op(execution, day_dir, table, pipeline)
    # Freeze the interval's plan as a first try would, then the delivery is corrected.
    frozen = op.build_source().plan(
        PlanLog(TableRef.parse(table), pipeline),
        ReadContext(),
        run_token="t",
        is_committed=lambda k: False,
        interval=DAY,
    )
    assert frozen is not None
    _rewrite(day_dir, 7, seed=99)
    error: BaseException | None = None
    try:
        op.execute(_context("run-1", interval=DAY))
    except Exception as exc:
        error = exc
    assert not os.path.exists(os.path.join(table, "_delta_log")), "nothing was committed"
    # The documented way out: a run with restate=True re-freezes the batch and loads it.
    restated = _landing_op(execution, day_dir, table, pipeline, restate=True).execute(
        _context("run-2", interval=DAY)
    )
    assert (restated["outcome"], restated["generation"], restated["rows"]) == (COMMITTED, 1, 17)
    cmp = check(table, day_dir)
    assert cmp.exact and cmp.table_rows == 17, cmp.describe()
    # No retry fixes a changed input: the task ends at once, with the error as its cause.
    assert isinstance(error, AirflowFailException), f"{type(error).__name__}: {error}"
    assert isinstance(error.__cause__, InputChangedError), f"{type(error.__cause__).__name__}"
    assert "orders-000001-0000.csv" in str(error) and f"restate_batch_key={frozen.batch_key}" in str(error)


@pytest.mark.cluster
@pytest.mark.spark
@pytest.mark.faults
def test_a_driver_killed_between_its_commit_and_its_record_is_reported_committed_and_settled(
    cluster_env: dict[str, str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression guard. spark-submit fails (the driver was SIGKILLed right after its commit,
    before the commit record): the task asks the table, reports ``committed`` (its own
    attempt), rebuilds the record, and a retry answers ``already_committed`` with no Spark."""
    day_dir, table = str(tmp_path / "landing" / "2026-11-02"), str(tmp_path / "table")
    write_order_files(day_dir, 2, 15)
    monkeypatch.setenv("EOD_FAULTPOINTS", "before_record=kill")
    first = _landing_op("submit", day_dir, table, "adv.killed").execute(_context("run-1", interval=DAY))
    monkeypatch.delenv("EOD_FAULTPOINTS")
    assert (first["outcome"], first["rows"]) == (COMMITTED, 30)
    batch_dir = os.path.join(table, "_eod", "pipelines", "adv.killed", "batches", first["batch_key"])
    assert os.listdir(batch_dir), "the task wrote the commit record the driver did not"
    assert os.listdir(os.path.join(table, "_eod", "specs")) == [], "the spec of a decided attempt is removed"
    monkeypatch.setenv("PATH", "/nonexistent")  # a retry that needed spark-submit would fail
    again = _landing_op("submit", day_dir, table, "adv.killed").execute(_context("run-1", 2, interval=DAY))
    assert (again["outcome"], again["table_version"]) == (ALREADY_COMMITTED, first["table_version"])
    assert len(_txn_commits(table)) == 1
    cmp = check(table, day_dir)
    assert cmp.exact and cmp.table_rows == 30, cmp.describe()


TASK_CHILD = textwrap.dedent(
    """
    import json, sys, types
    from datetime import datetime
    sys.path.insert(0, sys.argv[1])
    cfg = json.loads(sys.argv[2])
    from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator
    op = LandingFilesToDeltaOperator(task_id="load", **cfg["op"])
    ti = types.SimpleNamespace(
        dag_id="adv", task_id="load", run_id=cfg["run_id"], map_index=-1, try_number=cfg["try"]
    )
    ctx = {"ti": ti, "data_interval_start": datetime.fromisoformat(cfg["start"]),
           "data_interval_end": datetime.fromisoformat(cfg["end"])}
    print("EOD_ADV_RESULT " + json.dumps(op.execute(ctx)), flush=True)
    """
)


def _task(op_kwargs: dict[str, Any], run_id: str, try_number: int, faults: str = "") -> subprocess.Popen[str]:
    """An Airflow task's process running the operator, which a test can SIGKILL."""
    cfg = {
        "op": op_kwargs,
        "run_id": run_id,
        "try": try_number,
        "start": DAY[0].isoformat(),
        "end": DAY[1].isoformat(),
    }
    return subprocess.Popen(
        [sys.executable, "-c", TASK_CHILD, REPO, json.dumps(cfg)],
        env=dict(os.environ, EOD_FAULTPOINTS=faults),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _task_result(child: subprocess.Popen[str], timeout: float = 180) -> dict[str, Any]:
    out, _ = child.communicate(timeout=timeout)
    for line in out.splitlines():
        if line.startswith("EOD_ADV_RESULT "):
            return dict(json.loads(line[len("EOD_ADV_RESULT ") :]))
    raise AssertionError(f"the task failed (exit {child.returncode}):\n{out[-4000:]}")


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _staged(table: str, batch_key: str, generation: int) -> bool:
    root = os.path.join(table, "eod_data")
    for dirpath, _dirs, files in os.walk(root):
        if f"/{batch_key}/g{generation}-" in dirpath + "/" and any(f.endswith(".parquet") for f in files):
            return True
    return False


@pytest.mark.cluster
@pytest.mark.spark
@pytest.mark.faults
def test_a_zombie_restatement_driver_loses_to_a_retry_that_refreezes_the_corrected_input(
    cluster_env: dict[str, str], spark: Any, tmp_path: Any
) -> None:
    """Regression guard. A restatement run's try 1 is SIGKILLed while its driver (generation 1,
    frozen from delivery v1) sleeps before its commit; the delivery is corrected again (v2);
    try 2 finds generation 1's input changed, re-freezes generation 2 and submits it. The
    zombie must not land v1 rows over v2: the table ends as the landing directory is now."""
    import psutil

    day_dir, table = str(tmp_path / "landing" / "2026-11-02"), str(tmp_path / "table")
    write_order_files(day_dir, 2, 10)
    first = _landing_op("local", day_dir, table, "adv.zombie").execute(_context("run-0", interval=DAY))
    assert (first["outcome"], first["rows"]) == (COMMITTED, 20)
    _rewrite(day_dir, 6, seed=99)  # v1
    op_kwargs = {
        "execution": "submit",
        "spark_conn_id": CONN_ID,
        "spark_conf": CLUSTER_CONF,
        "landing_path": day_dir,
        "boundary": "interval",
        "table_uri": table,
        "pipeline_id": "adv.zombie",
        "file_format": "csv",
        "schema": ORDERS_DDL,
        "restate": True,
    }
    try1 = _task(op_kwargs, "restate-run", 1, faults="before_commit=sleep:20")
    _wait_for(lambda: _staged(table, first["batch_key"], 1), 120, "try 1's driver to stage generation 1")
    zombies = psutil.Process(try1.pid).children(recursive=True)
    os.kill(try1.pid, signal.SIGKILL)
    try1.communicate(timeout=30)
    assert any(p.is_running() for p in zombies), "the driver outlives its task"
    _rewrite(day_dir, 4, seed=123)  # v2
    result = _task_result(_task(op_kwargs, "restate-run", 2))
    _wait_for(lambda: not any(p.is_running() for p in zombies), 120, "the zombie driver to end")
    assert (result["outcome"], result["generation"], result["rows"]) == (COMMITTED, 2, 14), result
    assert [v for _, v in _txn_commits(table)][-1] == 2, _txn_commits(table)
    assert (
        ask(TableRef.parse(table), _plan_key(table, "adv.zombie", first["batch_key"])).committed_generation
        == 2
    )
    cmp = check(table, day_dir)
    assert cmp.exact and cmp.table_rows == 14, cmp.describe()


def _plan_key(table: str, pipeline: str, batch_key: str) -> Any:
    plan = PlanLog(TableRef.parse(table), pipeline).get_plan(batch_key)
    assert plan is not None
    return plan.key


@pytest.mark.spark
def test_a_submit_that_cannot_start_names_spark_submit_and_leaves_no_spec_behind(
    spark: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FAILS now (minor: unbounded state). ``spark-submit`` not on PATH: the task fails with
    an error naming it, and nothing is committed. But every failed attempt leaves its
    ``_eod/specs/<attempt>.json`` behind for good (only a decided-committed attempt removes
    its spec; nothing else ever does), one file per failed try, forever. A later run in local
    mode still loads the batch (the failure wedged nothing)."""
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONN_ID.upper()}",
        json.dumps({"conn_type": "spark", "host": "local[1]", "extra": {"deploy-mode": "client"}}),
    )
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    day_dir, table = str(tmp_path / "landing" / "2026-11-02"), str(tmp_path / "table")
    write_order_files(day_dir, 2, 5)
    for try_number in (1, 2, 3):
        with pytest.raises(BatchError, match="spark-submit"):
            _landing_op("submit", day_dir, table, "adv.nobin").execute(
                _context("run-1", try_number, interval=DAY)
            )
    assert not os.path.exists(os.path.join(table, "_delta_log"))
    done = _landing_op("local", day_dir, table, "adv.nobin").execute(_context("run-1", 4, interval=DAY))
    assert (done["outcome"], done["rows"]) == (COMMITTED, 10)
    cmp = check(table, day_dir)
    assert cmp.exact and cmp.table_rows == 10, cmp.describe()
    specs = os.path.join(table, "_eod", "specs")
    left = sorted(os.listdir(specs)) if os.path.isdir(specs) else []
    assert left == [], f"specs of failed attempts stay forever: {left}"
