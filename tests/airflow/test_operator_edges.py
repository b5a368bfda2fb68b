"""Issue 18, items 5, 6, 9, 10, 14 and 16: the edges a newcomer met with the load operators.

Each test says in its docstring what happened before the fix (main at 960f2aa).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, Field, write_deltalake

from airflow_eod.airflow_exceptions import AirflowFailException
from airflow_eod.core.delta.compat import check_schema
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import BatchError, ConfigurationError, SchemaMismatchError
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark.driver import error_from, error_path, write_error
from airflow_eod.spark.load_job import run_load
from tests.conftest import REPO
from tests.support.helpers import check, plan_for, spec_for
from tests.support.loopback import free_port

ORDERS_DDL = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"
DDL = ORDERS_DDL


def _context(run_id: str, try_number: int = 1) -> dict[str, Any]:
    """What Airflow hands ``execute``: the task instance (no data interval: offset loads)."""
    ti = SimpleNamespace(dag_id="edges", task_id="load", run_id=run_id, map_index=-1, try_number=try_number)
    return {"ti": ti}


def _op(landing: str, table: str, pipeline: str, **kw: Any) -> LandingFilesToDeltaOperator:
    return LandingFilesToDeltaOperator(
        task_id="load",
        landing_path=landing,
        table_uri=table,
        pipeline_id=pipeline,
        file_format="csv",
        schema=ORDERS_DDL,
        **kw,
    )


# -- item 5: another writer's new column -------------------------------------------------


def _rows(table: str) -> list[dict[str, Any]]:
    return sorted(DeltaTable(table).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])


@pytest.mark.spark
@pytest.mark.badinput
def test_a_column_another_writer_added_fails_with_the_way_out(spark: Any, tmp_path: Any, table: str) -> None:
    """Before: after ``ALTER TABLE ADD COLUMNS note`` by another writer, every load with
    ``schema_drift="fail"`` failed with "missing column note" and nothing about the way out.
    Now the error says that ``schema_drift='add_columns'`` fits (and declaring the column),
    and ``add_columns`` then loads the batch with ``note`` null."""
    landing = str(tmp_path / "pq")
    os.makedirs(landing)
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}), f"{landing}/a.parquet")
    source = LandingFilesSource(path=landing, file_format="parquet")
    run_load(spark, spec_for(source, table, plan_for(source, table, run="r0")))
    DeltaTable(table).alter.add_columns([Field("note", "string", nullable=True)])  # another writer
    version = DeltaTable(table).version()
    pq.write_table(pa.table({"id": pa.array([3], pa.int64()), "v": ["c"]}), f"{landing}/b.parquet")
    plan = plan_for(source, table, run="r1")
    with pytest.raises(SchemaMismatchError) as err:
        run_load(spark, spec_for(source, table, plan))
    text = str(err.value)
    assert text.startswith(f"batch {plan.key.label}: schema does not match the target table"), text
    assert "missing column note" in text
    assert "schema_drift='add_columns'" in text and "declare note in the operator's schema" in text, text
    assert DeltaTable(table).version() == version, "a refused batch changed the table"

    result = run_load(spark, spec_for(source, table, plan, try_number=2, schema_drift="add_columns"))
    assert (result.outcome, result.rows) == ("committed", 1)
    assert _rows(table) == [
        {"id": 1, "v": "a", "note": None},
        {"id": 2, "v": "b", "note": None},
        {"id": 3, "v": "c", "note": None},
    ]


def test_a_not_null_column_the_batch_lacks_points_to_the_schema_not_add_columns(tmp_path: Any) -> None:
    """Before: "missing column note" alone. A NOT NULL column cannot be filled with nulls,
    so the error must not send the user to ``add_columns``; it says to carry the column."""
    table = str(tmp_path / "t")
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("note", pa.string(), nullable=False)])
    write_deltalake(table, pa.table({"id": [1], "note": ["x"]}, schema=schema))
    batch = json.dumps(
        {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    )
    log = open_table(TableRef.parse(table))
    assert log is not None
    with pytest.raises(SchemaMismatchError) as err:
        check_schema(log, batch, [], "p/k")
    text = str(err.value)
    assert "missing column note" in text and "note is NOT NULL in the table" in text, text
    assert "cannot fill it with nulls" in text and "declare note in the operator's schema" in text


# -- item 6: restate with nothing to restate ------------------------------------------


@pytest.mark.spark
def test_restate_with_nothing_to_restate_is_refused(
    spark: Any, tmp_path: Any, landing: str, table: str
) -> None:
    """Before: ``restate=True`` on a run that planned no batch (an offset pipeline with
    nothing new, no ``restate_batch_key``) returned ``no_new_data`` quietly, and the person
    who asked for a restatement thought it done. Now the task fails at once, saying that
    nothing was restated and how to name the batch; the table is unchanged."""
    write_order_files(landing, 2, 10)
    first = _op(landing, table, "edges.restate").execute(_context("run-1"))
    assert (first["outcome"], first["rows"]) == ("committed", 20)
    version = DeltaTable(table).version()
    with pytest.raises(AirflowFailException) as err:
        _op(landing, table, "edges.restate", restate=True).execute(_context("run-2"))
    text = str(err.value)
    assert "restate=True, but this run has no batch to restate and nothing was restated" in text
    assert "restate_batch_key" in text and "airflow-eod status TABLE" in text
    assert isinstance(err.value.__cause__, ConfigurationError)
    # Without restate the same run is the quiet no_new_data it always was.
    assert _op(landing, table, "edges.restate").execute(_context("run-3"))["outcome"] == "no_new_data"
    assert DeltaTable(table).version() == version
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 20, cmp.describe()


# -- item 9: submit mode with the master down ------------------------------------------


@pytest.mark.spark
@pytest.mark.cluster
def test_submit_with_the_master_down_fails_in_seconds_naming_batch_and_master(
    spark: Any, tmp_path: Any, landing: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: spark-submit to a master nobody listens on ran for about 92 s per try and
    failed with ``Py4JJavaError ... Cannot call methods on a stopped SparkContext``, without
    the ``batch <pipeline>/<key>:`` prefix; "All masters are unresponsive" was an INFO line.
    Now the task fails within seconds, before submitting, with a retryable error that names
    the batch and the master; a later try (here in local mode) loads the batch once."""
    port = free_port()
    monkeypatch.setenv(
        "AIRFLOW_CONN_EDGES_SPARK_DOWN",
        json.dumps(
            {"conn_type": "spark", "host": f"spark://127.0.0.1:{port}", "extra": {"deploy-mode": "client"}}
        ),
    )
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    write_order_files(landing, 2, 10)
    op = _op(landing, table, "edges.down", execution="submit", spark_conn_id="edges_spark_down")
    started = time.monotonic()
    with pytest.raises(BatchError) as err:
        op.execute(_context("run-1"))
    elapsed = time.monotonic() - started
    text = str(err.value)
    assert elapsed < 20, f"took {elapsed:.0f} s to fail"
    assert text.startswith("batch edges.down/"), text
    master = f"the Spark master spark://127.0.0.1:{port} of connection 'edges_spark_down'"
    assert f"{master} cannot be reached" in text, text
    assert err.value.retryable, "a master may come back: the task's retries must try again"
    assert not os.path.exists(os.path.join(table, "_delta_log"))
    specs = os.path.join(table, "_eod", "specs")
    assert not os.path.isdir(specs) or os.listdir(specs) == []
    done = _op(landing, table, "edges.down").execute(_context("run-1", try_number=2))
    assert (done["outcome"], done["rows"]) == ("committed", 20)
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 20, cmp.describe()


def test_a_driver_whose_context_stopped_reports_batch_and_cause(tmp_path: Any) -> None:
    """Before: a driver that lost its master mid-run left ``Py4JJavaError: ... Cannot call
    methods on a stopped SparkContext`` with no batch; now its error names the batch and
    says what a stopped context means."""

    class Py4JJavaError(Exception):
        pass

    spec = str(tmp_path / "spec.json")
    stopped = Py4JJavaError(
        "An error occurred while calling o42.load.\n: java.lang.IllegalStateException: Cannot call "
        "methods on a stopped SparkContext.\n\tat org.apache.spark.SparkContext.assertNotStopped"
    )
    write_error(spec, stopped, "p/k-1")
    with open(error_path(spec), "rb") as fh:
        error = error_from(fh.read())
    assert isinstance(error, BatchError) and error.retryable
    assert str(error).startswith("batch p/k-1: Py4JJavaError: the driver's SparkContext was stopped")
    assert "All masters are unresponsive" in str(error) and "nothing was committed" in str(error)


# -- items 10 and 16: the task log of a malformed file, and the pandas warning ---------------

CHILD = """
import json, logging, os, sys
from types import SimpleNamespace
# Airflow sets up its logging on import: the handler below goes in after it, as a task's does.
from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

class Lines(logging.Handler):
    def __init__(self, path):
        super().__init__(logging.DEBUG)
        self.out = open(path, "w")
    def emit(self, record):
        exc = logging.Formatter().formatException(record.exc_info) if record.exc_info else ""
        self.out.write(json.dumps({"level": record.levelno, "name": record.name,
                                   "msg": record.getMessage(), "exc": exc}) + "\\n")
        self.out.flush()

root = logging.getLogger()
root.setLevel(logging.INFO)
root.addHandler(Lines(sys.argv[1]))
logging.getLogger("airflow_eod.spark.jvm").setLevel(logging.DEBUG)
logging.getLogger("py4j").setLevel(logging.WARNING)
logging.captureWarnings(True)  # as Airflow's task runner does: warnings become log records

def op(landing, table, pipeline):
    return LandingFilesToDeltaOperator(task_id="load", landing_path=landing, table_uri=table,
        pipeline_id=pipeline, file_format="csv", schema=sys.argv[6])

def ctx(run):
    return {"ti": SimpleNamespace(dag_id="edges", task_id="load", run_id=run, map_index=-1, try_number=1)}

print("RESULT " + json.dumps(op(sys.argv[2], sys.argv[3], "edges.good").execute(ctx("good"))))
logging.getLogger("edges").info("the malformed load starts")
try:
    op(sys.argv[4], sys.argv[5], "edges.bad").execute(ctx("bad"))
except Exception:
    logging.getLogger("airflow.task").error("Task failed with exception", exc_info=True)
"""


@pytest.fixture(scope="module")
def task_log(tmp_path_factory: Any) -> dict[str, Any]:
    """A good load, then a load of a malformed file, in a fresh task-like process whose JVM
    logs through Python logging (the operator's own path): every log record, and stderr."""
    tmp = tmp_path_factory.mktemp("tasklog")
    good, bad = str(tmp / "good"), str(tmp / "bad")
    write_order_files(good, 2, 10)
    write_order_files(bad, 1, 10)
    with open(os.path.join(bad, "z-bad.csv"), "w") as fh:
        fh.write("order_id,customer,amount,order_date,ordered_at\n")
        fh.write("not-a-number,c1,1.00,2026-11-20,2026-11-20 10:00:00\n")
    records = str(tmp / "records.jsonl")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=REPO)
    env.pop("PYTHONWARNINGS", None)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, records, good, str(tmp / "good_t"), bad, str(tmp / "bad_t"), DDL],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(records) as fh:
        lines = [json.loads(line) for line in fh]
    return {
        "records": lines,
        "stdout": proc.stdout,
        "stderr": proc.stderr,
        "good": (good, str(tmp / "good_t")),
        "bad_table": str(tmp / "bad_t"),
    }


@pytest.mark.spark
@pytest.mark.badinput
def test_a_malformed_file_logs_one_clear_error_and_the_jvm_trace_at_debug(task_log: dict[str, Any]) -> None:
    """Before: a malformed file gave a task log of ~330 lines of JVM stack traces at ERROR and
    WARN before the good message, and Spark's text in it advised setting ``mode`` to
    PERMISSIVE (which turns the malformed-record check off); the task's own error carried
    the same Java trace as its cause. Now the one error-level record is the good message;
    the JVM's trace is at DEBUG."""
    everything = task_log["records"]
    start = next(i for i, r in enumerate(everything) if r["msg"] == "the malformed load starts")
    records = everything[start:]  # the JVM's start-up warnings belong to the good load's task
    loud = [r for r in records if r["level"] >= 30]
    assert len(loud) == 1, [(r["level"], r["name"], r["msg"][:120]) for r in loud]
    (error,) = loud
    text = error["msg"] + "\n" + error["exc"]
    assert error["level"] == 40 and error["name"] == "airflow.task"
    assert "malformed record(s)" in text and "z-bad.csv: 1" in text, text[-2000:]
    assert "PERMISSIVE" not in text and "\tat org.apache" not in text, text[-3000:]
    quiet = [r for r in records if r["name"] == "airflow_eod.spark.jvm" and r["level"] == 10]
    assert any("PERMISSIVE" in r["msg"] for r in quiet), "the JVM's trace is kept, at debug"
    assert "PERMISSIVE" not in task_log["stderr"]
    assert not os.path.exists(os.path.join(task_log["bad_table"], "_delta_log")), "nothing committed"
    landing, table = task_log["good"]
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 20, cmp.describe()


@pytest.mark.spark
def test_a_task_log_has_no_pandas_3_warning(task_log: dict[str, Any]) -> None:
    """Before: every task that used Spark logged PySpark's FutureWarning "PySpark does not
    yet fully support pandas >= 3.0.0" (the load path uses no pandas). Now it is silenced
    in the task's process, before pyspark runs."""
    (result,) = [line[7:] for line in task_log["stdout"].splitlines() if line.startswith("RESULT ")]
    assert json.loads(result)["outcome"] == "committed"
    said = [r["msg"] for r in task_log["records"] if "fully support pandas" in r["msg"]]
    assert said == [] and "fully support pandas" not in task_log["stderr"], said or task_log["stderr"][-2000:]


# -- item 14: zero-length intervals refused when the DAG is parsed ---------------------------

_DAG_FILE = """
from datetime import datetime, timedelta, timezone
from airflow.sdk import DAG
try:
    from airflow.sdk import CronDataIntervalTimetable
except ImportError:  # Airflow 3.1 keeps it in airflow.timetables (tests/support/airflow_compat.py)
    from airflow.timetables.interval import CronDataIntervalTimetable
from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

with DAG("eod_edges_{name}", schedule={schedule}, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
    LandingFilesToDeltaOperator(
        task_id="load", landing_path="/landing/{{{{ ds }}}}", table_uri="/lake/t", file_format="csv",
        boundary="interval", {extra}
    )
"""


@pytest.mark.airflow
def test_an_interval_load_in_a_dag_of_zero_length_intervals_is_an_import_error(
    airflow_db: str, tmp_path: Any
) -> None:
    """Before: an interval load in a DAG with ``schedule=None``, ``"@once"``, ``"@daily"`` (a
    CronTriggerTimetable on the default config) or a timedelta was refused only when it ran,
    three tries after each deploy. Now the DAG file does not import, with the way out; a
    timetable with real intervals, or explicit interval bounds, import."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag  # type: ignore[no-redef]

    dags = tmp_path / "dags"
    dags.mkdir()
    cases = {
        "none": ("None", ""),
        "once": ("'@once'", ""),
        "daily": ("'@daily'", ""),
        "delta": ("timedelta(days=1)", ""),
        "real": ("CronDataIntervalTimetable('0 0 * * *', timezone='UTC')", ""),
        "explicit": ("None", "interval_start='{{ params.start }}', interval_end='{{ params.end }}'"),
    }
    for name, (schedule, extra) in cases.items():
        (dags / f"edges_{name}.py").write_text(_DAG_FILE.format(name=name, schedule=schedule, extra=extra))
    bag = DagBag(dag_folder=str(dags), safe_mode=False)
    errors = {os.path.basename(path): text for path, text in bag.import_errors.items()}
    assert sorted(errors) == ["edges_daily.py", "edges_delta.py", "edges_none.py", "edges_once.py"], errors
    for text in errors.values():
        assert "boundary='interval' needs data intervals that span time" in text, text
        assert "zero-length" in text and "CronDataIntervalTimetable" in text and "interval_start" in text
    assert "CronTriggerTimetable" in errors["edges_daily.py"]
    assert {"eod_edges_real", "eod_edges_explicit"} <= set(bag.dags)


@pytest.mark.airflow
def test_an_interval_load_attached_later_to_such_a_dag_is_refused(airflow_db: str) -> None:
    """The check also runs when the task gets its DAG after ``__init__`` (``op.dag = dag``)."""
    from datetime import UTC, datetime

    from airflow.sdk import DAG

    op = _op("/landing", "/lake/t", "edges.late", boundary="interval")
    with pytest.raises(ConfigurationError, match="zero-length"):
        op.dag = DAG("eod_edges_late", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC))
    offsets = _op("/landing", "/lake/t", "edges.late2")
    offsets.dag = DAG("eod_edges_late2", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC))
