"""Test helpers: plan a landing batch, build a load spec, and run the checker."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from types import ModuleType
from typing import Any

from airflow_eod.core.ask import ask
from airflow_eod.core.planlog.restatement import plan_restatement
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.compare import Comparison, compare_table_with_landing
from airflow_eod.examples.sample_data import ORDERS_ARROW_SCHEMA, ORDERS_COLUMNS
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark.load_spec import LoadSettings, LoadSpec

ORDERS_DDL = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"
PIPELINE = "tests.orders"


def orders_source(landing: str, **kw: Any) -> LandingFilesSource:
    return LandingFilesSource(path=landing, file_format="csv", schema=ORDERS_DDL, **kw)


def plan_for(source: LandingFilesSource, table: str, run: str = "run-1", pipeline: str = PIPELINE) -> Plan:
    plan = source.plan(
        PlanLog(TableRef.parse(table), pipeline),
        run_token=run,
        is_committed=lambda k: ask(TableRef.parse(table), k).committed,
    )
    assert plan is not None
    return plan


def interval_plan(source: Any, table: str, start: datetime, end: datetime, pipeline: str = PIPELINE) -> Plan:
    """Plan the interval batch ``[start, end)`` (the run token names the interval)."""
    plan = source.plan(
        PlanLog(TableRef.parse(table), pipeline),
        None,
        run_token=f"run-{start.isoformat()}",
        is_committed=lambda k: False,
        interval=(start, end),
    )
    assert plan is not None
    return plan


def restate(source: Any, table: str, plan: Plan, run: str = "restate-run", ctx: Any = None) -> Plan:
    """Plan a restatement (committed batch) or re-freeze (never committed) of ``plan``'s
    batch by the run ``run``, as the load operators do (``ctx``: the read context a source
    that asks its system needs, as Kafka's and JDBC's do)."""
    committed = ask(TableRef.parse(table), plan.key).committed_generation
    return plan_restatement(
        PlanLog(TableRef.parse(table), plan.pipeline_id),
        plan,
        run_token=run,
        committed_generation=committed,
        replan=lambda p, g: source.replan(p, g, ctx, committed=committed is not None),
    )


def spec_for(source: LandingFilesSource, table: str, plan: Plan, try_number: int = 1, **kw: Any) -> LoadSpec:
    """The spec of ``plan``; ``kw`` may name settings (``engine=...``) and spec fields alike."""
    names = {f.name for f in dataclasses.fields(LoadSettings)}
    settings = {k: kw.pop(k) for k in list(kw) if k in names}
    return LoadSpec(
        table=TableRef.parse(table),
        plan=plan,
        source=source,
        settings=LoadSettings(**{"run_id": "run-1", "try_number": try_number, **settings}),
        **kw,
    )


def check(table: str, landing: str) -> Comparison:
    return compare_table_with_landing(table, landing, "csv", ORDERS_COLUMNS, ORDERS_ARROW_SCHEMA)


def run_child(
    spec: LoadSpec, tmp: str, faults: str = "", name: str = "child", env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start the spark-submit entrypoint as a real child process (its own JVM); its result
    JSON goes to ``<tmp>/<name>-result.json``."""
    spec_path = os.path.join(tmp, f"{name}-spec.json")
    with open(spec_path, "w") as fh:
        fh.write(spec.to_json())
    child_env = dict(os.environ, **(env or {}), EOD_FAULTPOINTS=faults)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow_eod.spark.driver",
            "--local",
            "--spec",
            spec_path,
            "--result",
            os.path.join(tmp, f"{name}-result.json"),
        ],
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def stage_data(table: str, batch: Any, data: Any, attempt: str | None = None) -> tuple[Any, Any]:
    """Stage ``data`` as one parquet file of an attempt of ``batch`` (generation 0), the way
    Spark stages it, with the manifest its commit carries."""
    import uuid

    import pyarrow.parquet as pq
    from deltalake import Schema

    from airflow_eod.core.delta.parquet_stats import file_stats
    from airflow_eod.core.manifest import Manifest
    from airflow_eod.core.staged_files import StagedBatch, StagedFile
    from airflow_eod.core.table_layout import attempt_dir

    attempt = attempt or uuid.uuid4().hex[:16]
    rel_dir = attempt_dir(batch, 0, attempt)
    os.makedirs(os.path.join(table, rel_dir), exist_ok=True)
    rel = f"{rel_dir}/part-0.parquet"
    pq.write_table(data, os.path.join(table, rel))
    rows, stats = file_stats(os.path.join(table, rel))
    st = os.stat(os.path.join(table, rel))
    schema_json = Schema.from_arrow(data.schema).to_json()
    staged = StagedBatch(
        schema_json, [], rel_dir, [StagedFile(rel, st.st_size, int(st.st_mtime * 1000), {}, rows, stats)]
    )
    manifest = Manifest(batch.pipeline_id, batch.key, 0, {"k": batch.key}, "fp", rows, 1, attempt, "delta-rs")
    return staged, manifest


def stage_rows(table: str, plan: Plan, generation: int, tag: str, rows: list[int]) -> tuple[Any, Any]:
    """Stage a batch as the Spark side would (pyarrow here), rows ``seq`` tagged ``src=tag``;
    no rows: no files, as Spark stages an empty partitioned DataFrame."""
    import uuid

    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import Schema

    from airflow_eod.core.delta.parquet_stats import file_stats
    from airflow_eod.core.manifest import Manifest
    from airflow_eod.core.staged_files import StagedBatch, StagedFile
    from airflow_eod.core.table_layout import attempt_dir

    attempt = uuid.uuid4().hex[:16]
    rel_dir = attempt_dir(plan.key, generation, attempt)
    os.makedirs(os.path.join(table, rel_dir), exist_ok=True)
    schema = pa.schema([("seq", pa.int64()), ("src", pa.string())])
    files = []
    if rows:
        rel = f"{rel_dir}/part-0.parquet"
        data = pa.table({"seq": rows, "src": [tag] * len(rows)}, schema=schema)
        pq.write_table(data, os.path.join(table, rel))
        n, stats = file_stats(os.path.join(table, rel))
        st = os.stat(os.path.join(table, rel))
        files.append(StagedFile(rel, st.st_size, int(st.st_mtime * 1000), {}, n, stats))
    staged = StagedBatch(Schema.from_arrow(schema).to_json(), [], rel_dir, files)
    manifest = Manifest(
        plan.pipeline_id,
        plan.batch_key,
        generation,
        plan.boundary,
        plan.input_fingerprint,
        len(rows),
        len(files),
        attempt,
        "delta-rs",
    )
    return staged, manifest


def land_and_plan(table: str, landing: str, pipeline: str, n: int) -> Plan:
    """Land a one-row CSV file ``f<n>.csv`` and plan the pipeline's next offset batch."""
    os.makedirs(landing, exist_ok=True)
    with open(os.path.join(landing, f"f{n:05d}.csv"), "w") as fh:
        fh.write(f"seq\n{n}\n")
    plan = LandingFilesSource(path=landing, file_format="csv").plan(
        PlanLog(TableRef.parse(table), pipeline),
        run_token=f"run-{n}",
        is_committed=lambda k: ask(TableRef.parse(table), k).committed,
    )
    assert plan is not None
    return plan


# -- races: did the loser really lose one? ---------------------------------------------
# The commit engine's lost-race paths (airflow_eod/core/load_commit.py): the loser of a race for
# the table's creation, or for the next table version, logs one of these and asks again.
LOST_CREATION_RACE = "another attempt created the table first; asking again"
LOST_VERSION_RACE = "commit lost a race for version"
COMMIT_LOGGER = "airflow_eod.core.load_commit"


def lost_races(text: str) -> int:
    """How many lost-race lines of the commit engine ``text`` (a log) holds."""
    return text.count(LOST_CREATION_RACE) + text.count(LOST_VERSION_RACE)


@contextmanager
def commit_log() -> Iterator[list[str]]:
    """Collect the commit engine's log messages (INFO and up) while the block runs; for a
    racer in a child process, where pytest's ``caplog`` does not reach."""
    messages: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger(COMMIT_LOGGER)
    handler, level = _Collect(logging.INFO), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


# -- Airflow: DAG files and what a run left in the metadata DB --------------------------
def load_dag_file(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3] + "_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def xcom_value(run_id: str, task_id: str) -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalars(
            select(XComModel).where(
                XComModel.run_id == run_id, XComModel.task_id == task_id, XComModel.key == "return_value"
            )
        ).one()
        return row.value


def task_tries(run_id: str, task_id: str) -> list[str]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        hist = session.scalars(
            select(TaskInstanceHistory).where(
                TaskInstanceHistory.run_id == run_id, TaskInstanceHistory.task_id == task_id
            )
        ).all()
        ti = session.scalars(
            select(TaskInstance).where(TaskInstance.run_id == run_id, TaskInstance.task_id == task_id)
        ).one()
        return [str(h.state) for h in sorted(hist, key=lambda h: h.try_number)] + [str(ti.state)]


def txn_commits(table: str) -> list[tuple[str, int]]:
    """(appId, txn version) of every Delta commit that carries a batch marker."""
    log_dir = os.path.join(table, "_delta_log")
    found = []
    for name in sorted(os.listdir(log_dir)):
        if name.endswith(".json") and name[:-5].isdigit():
            with open(os.path.join(log_dir, name)) as fh:
                for line in fh:
                    action = json.loads(line) if line.strip() else {}
                    if "txn" in action:
                        found.append((action["txn"]["appId"], int(action["txn"]["version"])))
    return found
