"""Issue 6, reproduced and pinned: zero-length data intervals (case 3), mapped loads (case 4),
a sensor fed a ``no_new_data`` key and the plan log's directory fsync (case 14), and the
console script on a path that holds no table (case 15).

The Airflow cases run real DAG files from ``tests/dags`` under ``dag.test()`` (SQLite
metadata DB), load with the session's SparkSession into real Delta tables, and compare the
table with the landing files row by row.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.cli import main
from airflow_eod.core.ask import ask
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.planner import plan_interval_batch
from airflow_eod.core.source import Credentials, ReadContext
from airflow_eod.core.storage import LocalStorage
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.sources.jdbc_incremental import JdbcIncrementalSource
from tests.conftest import REPO
from tests.support.helpers import check, load_dag_file, task_tries, xcom_value

pytestmark = pytest.mark.guarantee

DAGS = os.path.join(REPO, "tests", "dags")


def _mapped_xcoms(run_id: str, task_id: str) -> dict[int, Any]:
    """The return value of every mapped instance of ``task_id``, by map index."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(
            select(XComModel).where(
                XComModel.run_id == run_id, XComModel.task_id == task_id, XComModel.key == "return_value"
            )
        ).all()
        return {row.map_index: row.value for row in rows}


def _mapped_states(run_id: str, task_id: str) -> dict[int, str]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.run_id == run_id, TaskInstance.task_id == task_id)
        ).all()
        return {ti.map_index: str(ti.state) for ti in tis}


# -- case 4: mapped tasks ---------------------------------------------------------------


@pytest.mark.airflow
@pytest.mark.spark
def test_mapped_interval_load_loads_every_directory_once(
    airflow_db: str, spark: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    """``.partial(...).expand(landing_path=[d0, d1, d2])`` with ``boundary="interval"``: each
    mapped instance is its own pipeline, so each directory is loaded, once."""
    root, table = tmp_path / "landing", str(tmp_path / "table")
    for i in range(3):
        write_order_files(str(root / f"d{i}"), 2, 40, first_id=1 + 1000 * i)
    monkeypatch.setenv("EOD_TEST_MAPPED_LANDING", str(root))
    monkeypatch.setenv("EOD_TEST_MAPPED_TABLE", table)
    module = load_dag_file(os.path.join(DAGS, "eod_guarantee_mapped.py"))

    run = module.dag.test(logical_date=datetime(2026, 11, 20, tzinfo=UTC))

    assert str(run.state) == "success"
    assert _mapped_states(run.run_id, "load") == {0: "success", 1: "success", 2: "success"}
    results = _mapped_xcoms(run.run_id, "load")
    assert sorted(results) == [0, 1, 2]
    assert [results[i]["outcome"] for i in range(3)] == ["committed"] * 3, results
    assert [results[i]["rows"] for i in range(3)] == [80, 80, 80], results
    pipelines = [results[i]["pipeline_id"] for i in range(3)]
    assert pipelines == [f"eod_guarantee_mapped.load.m{i}" for i in range(3)]
    # Three distinct pipelines, three distinct batches, each committed in the table.
    batches = {(results[i]["pipeline_id"], results[i]["batch_key"]) for i in range(3)}
    assert len(batches) == 3
    for pipeline, key in batches:
        assert key == "i-20261119T000000Z-20261120T000000Z"
        assert ask(TableRef.parse(table), BatchKey(pipeline, key)).committed
    assert sorted(r["table_version"] for r in results.values()) == [0, 1, 2]
    cmp = check(table, str(root))
    assert cmp.exact and cmp.table_rows == 240, cmp.describe()


# -- case 3: zero-length intervals ------------------------------------------------------

_ZERO_LENGTH_FIXES = (
    "zero-length",
    "CronDataIntervalTimetable",
    "DeltaDataIntervalTimetable",
    "create_cron_data_intervals = True",
    "interval_start and interval_end",
    "boundary='offsets'",
)


@pytest.mark.airflow
@pytest.mark.spark
def test_zero_length_intervals_are_refused_and_real_intervals_load(
    airflow_db: str, spark: Any, tmp_path: Any, monkeypatch: Any, capfd: Any
) -> None:
    """On stock Airflow 3 an ``@daily`` DAG (CronTriggerTimetable) and a ``schedule=None``
    DAG give their runs start == end. Two such runs on one day render the same ``{{ ds }}``
    directory under two different keys, so it was loaded twice (a JDBC interval load
    committed rows=0 instead). Such a DAG must be refused with a message that names the fix
    (since issue 18 item 14 when it is parsed, no run at all), and leave the table alone; a
    CronDataIntervalTimetable DAG loads."""
    root, table = tmp_path / "landing", str(tmp_path / "table")
    write_order_files(str(root / "2026-11-19"), 2, 50, first_id=1)
    write_order_files(str(root / "2026-11-20"), 2, 50, first_id=5000)
    monkeypatch.setenv("EOD_TEST_IV_LANDING", str(root))
    monkeypatch.setenv("EOD_TEST_IV_TABLE", table)
    module = load_dag_file(os.path.join(DAGS, "eod_guarantee_intervals.py"))

    first = module.intervals.test(logical_date=datetime(2026, 11, 20, tzinfo=UTC))
    assert str(first.state) == "success"
    loaded = xcom_value(first.run_id, "load")
    assert (loaded["outcome"], loaded["rows"]) == ("committed", 100)
    assert loaded["batch_key"] == "i-20261119T000000Z-20261120T000000Z"
    version = DeltaTable(table).version()
    capfd.readouterr()

    for dag_id, schedule in (("eod_guarantee_trigger", "@daily"), ("eod_guarantee_manual", None)):
        with pytest.raises(ConfigurationError) as err:
            module.interval_dag(dag_id, schedule, "{{ ds }}")
        for needle in _ZERO_LENGTH_FIXES[1:]:
            assert needle in str(err.value), f"{dag_id}: the error does not say {needle!r}"
        assert "zero-length" in str(err.value)
        assert DeltaTable(table).version() == version, "a refused DAG changed the table"
    cmp = check(table, str(root / "2026-11-19"))
    assert cmp.exact and cmp.table_rows == 100, cmp.describe()

    # The timetable with real intervals loads the next day; nothing the refusals did is in
    # its way, and every row is in the table once.
    second = module.intervals.test(logical_date=datetime(2026, 11, 21, tzinfo=UTC))
    assert str(second.state) == "success"
    assert xcom_value(second.run_id, "load")["batch_key"] == "i-20261120T000000Z-20261121T000000Z"
    cmp = check(table, str(root))
    assert cmp.exact and cmp.table_rows == 200, cmp.describe()


def _no_spark() -> Any:
    raise AssertionError("a zero-length interval was not refused: the source went on to read")


def test_jdbc_interval_source_refuses_a_zero_length_interval_before_reading(tmp_path: Any) -> None:
    """The JDBC source plans through the same ``require_interval``: on main it went on to
    count the rows of [start, start) (0, later committed as the day's batch)."""
    source = JdbcIncrementalSource(
        url="jdbc:postgresql://127.0.0.1:9/shop",
        table="orders",
        key_column="updated_at",
        key_type="timestamp",
        boundary="interval",
    )
    at = datetime(2026, 11, 20, tzinfo=UTC)
    with pytest.raises(ConfigurationError, match="zero-length") as err:
        source.plan(
            PlanLog(TableRef.parse(str(tmp_path / "table")), "tests.jdbc_interval"),
            ReadContext(spark_factory=_no_spark, credentials=Credentials("shop", "secret")),
            run_token="run",
            is_committed=lambda key: False,
            interval=(at, at),
        )
    assert "CronDataIntervalTimetable" in str(err.value)


# -- case 14: a sensor fed a no_new_data key; the directory fsync --------------------------


@pytest.mark.airflow
def test_sensor_of_a_load_with_nothing_to_load_is_skipped_at_once(
    airflow_db: str, tmp_path: Any, monkeypatch: Any, capfd: Any
) -> None:
    """The load finds nothing new, so its ``batch_key`` is ``None`` and the sensor's template
    renders ``"None"``: a valid-looking key of a batch that can never exist. The sensor must
    be skipped at once (in poke and in reschedule mode), not time out."""
    landing = tmp_path / "landing"
    landing.mkdir()
    monkeypatch.setenv("EOD_TEST_SENSOR_LANDING", str(landing))
    monkeypatch.setenv("EOD_TEST_SENSOR_TABLE", str(tmp_path / "table"))
    module = load_dag_file(os.path.join(DAGS, "eod_guarantee_sensor.py"))

    started = time.monotonic()
    run = module.nothing.test()
    elapsed = time.monotonic() - started

    assert xcom_value(run.run_id, "load")["outcome"] == "no_new_data"
    assert task_tries(run.run_id, "confirm_poke") == ["skipped"]
    assert task_tries(run.run_id, "confirm_reschedule") == ["skipped"]
    assert str(run.state) == "success"
    assert elapsed < 45, f"the sensors waited ({elapsed:.0f} s) instead of skipping"
    logs = capfd.readouterr()
    assert "had nothing to load" in logs.out + logs.err


@pytest.mark.airflow
def test_sensor_with_a_key_of_the_wrong_shape_fails_at_once_without_retries(
    airflow_db: str, tmp_path: Any, monkeypatch: Any, capfd: Any
) -> None:
    monkeypatch.setenv("EOD_TEST_SENSOR_TABLE", str(tmp_path / "table"))
    module = load_dag_file(os.path.join(DAGS, "eod_guarantee_sensor.py"))

    started = time.monotonic()
    run = module.garbage.test()
    elapsed = time.monotonic() - started

    assert str(run.state) == "failed"
    assert task_tries(run.run_id, "confirm") == ["failed"], "a wrong key must not be retried"
    assert elapsed < 45, f"the sensor waited ({elapsed:.0f} s) before failing"
    logs = capfd.readouterr()
    assert "batch_key '2026-11-20' is not an airflow-eod batch key" in logs.out + logs.err


def test_put_if_absent_fsyncs_the_directory_after_the_link(tmp_path: Any, monkeypatch: Any) -> None:
    """A power cut cannot be simulated in a test, so this is a spy: it wraps the real
    ``os.link`` and ``os.fsync`` (the calls still happen) and records what was fsynced, by
    the inode behind the descriptor. A new name is durable only once its directory is
    fsynced after the link, and a directory created for it only once its parent is."""
    real_link, real_fsync = os.link, os.fsync
    directory = tmp_path / "plans" / "intervals"
    events: list[tuple[str, str]] = []

    def named(st: os.stat_result) -> str:
        for path in (directory, directory.parent, tmp_path):
            if path.exists() and os.stat(path).st_ino == st.st_ino:
                return f"dir:{path.relative_to(tmp_path.parent)}"
        return "dir:?" if stat.S_ISDIR(st.st_mode) else "file"

    def spy_link(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        real_link(src, dst, *args, **kwargs)
        events.append(("link", os.path.basename(dst)))

    def spy_fsync(fd: int) -> None:
        real_fsync(fd)
        events.append(("fsync", named(os.fstat(fd))))

    monkeypatch.setattr(os, "link", spy_link)
    monkeypatch.setattr(os, "fsync", spy_fsync)

    assert LocalStorage(root=str(directory)).put_if_absent("a.json", b"{}") is True
    link = events.index(("link", "a.json"))
    assert ("fsync", "file") in events[:link], "the content is flushed before the link"
    leaf = f"dir:{directory.relative_to(tmp_path.parent)}"
    assert ("fsync", leaf) in events[link:], f"the directory is not fsynced after the link: {events}"
    for created in (directory, directory.parent):
        parent = f"dir:{created.parent.relative_to(tmp_path.parent)}"
        assert ("fsync", parent) in events, f"the new directory {created.name} is not durable: {events}"
    assert [n for n in os.listdir(directory)] == ["a.json"], "no temporary file is left"

    events.clear()
    assert LocalStorage(root=str(directory)).put_if_absent("a.json", b"[]") is False
    assert (directory / "a.json").read_text() == "{}"
    assert os.listdir(directory) == ["a.json"]


# -- case 15: the console script on a path with no table ---------------------------------


def test_cli_on_a_path_with_no_table_says_so_and_exits_2(tmp_path: Any, capsys: Any) -> None:
    """A typo in the path used to look like an answer: ``check`` said ``"committed": false``
    (exit 1) and ``status`` said "no airflow-eod pipelines" (exit 0)."""
    missing = str(tmp_path / "typo")
    empty = str(tmp_path / "empty")
    os.makedirs(empty)
    key = "i-20261120T000000Z-20261121T000000Z"
    for path in (missing, empty):
        for argv in (
            ["ask", path, "--pipeline", "tests.cli", "--batch", key],
            ["status", path],
            ["status", path, "--json"],
        ):
            assert main(argv) == 2, argv
            out, err = capsys.readouterr()
            assert out == "", f"{argv}: nothing may read as an answer on stdout"
            assert f"there is no Delta table at {path}" in err, argv

    # The console script itself exits 2 too.
    exe = os.path.join(os.path.dirname(sys.executable), "airflow-eod")
    proc = subprocess.run(
        [exe, "ask", missing, "--pipeline", "p", "--batch", key], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "there is no Delta table at" in proc.stderr and proc.stdout == ""


def test_cli_status_without_a_table_names_the_batches_planned_there(tmp_path: Any, capsys: Any) -> None:
    """A first load that died before its commit leaves a plan and no table: ``status`` still
    exits 2, and names the planned batch a runbook needs next."""
    table = str(tmp_path / "table")
    start, end = datetime(2026, 11, 20, tzinfo=UTC), datetime(2026, 11, 21, tzinfo=UTC)
    plan = plan_interval_batch(
        PlanLog(TableRef.parse(table), "tests.cli"), start=start, end=end, inputs=lambda: []
    )
    assert main(["status", table]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"there is no Delta table at {table}" in err
    assert f"pipeline tests.cli planned, never committed: {plan.batch_key}" in err
