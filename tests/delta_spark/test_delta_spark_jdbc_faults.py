"""JDBC loads on the Delta Spark engine (``engine="delta-spark"``) under faults: a crash at
every boundary the engine passes, of a key-offset batch and of a timestamp-interval batch,
then a retry; two attempts of one batch racing (threads in one driver, and two drivers);
a row of the planned range changed in PostgreSQL after planning. Real PostgreSQL (one
server for the session), the session's Spark, real Delta tables written by Delta Spark;
every case ends with the row-by-row check against PostgreSQL and ``verify`` (the audit).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.audit.verify import audit_table
from airflow_eod.core.errors import InputChangedError
from airflow_eod.core.faults import InjectedFault
from airflow_eod.core.load_flow import FrozenBatch, LoadRequest, load_batch
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.result import LoadResult
from airflow_eod.core.table_ref import TableRef
from airflow_eod.runners.local import local_run
from airflow_eod.sources import Credentials, JdbcIncrementalSource, ReadContext
from airflow_eod.spark import delta_spark_engine
from airflow_eod.spark.driver import CREDENTIALS_PASSWORD_ENV, CREDENTIALS_USER_ENV
from airflow_eod.spark.load_spec import LoadSettings, LoadSpec
from tests.conftest import DELTA_SPARK_JARS_ENV, POSTGRES_JDBC_JAR
from tests.support.helpers import run_child
from tests.support.jdbc_helpers import check_against_postgres, create_orders, insert_orders

pytestmark = [
    pytest.mark.spark,
    pytest.mark.delta_spark,
    pytest.mark.jdbc,
    pytest.mark.faults,
]

ENGINE = "delta-spark"
PIPE = "tests.ds_jdbc_faults"
# insert_orders puts row i at 2026-11-01 + i hours (+ i µs): day d holds ids 24d..24d+23
# (day 0: ids 1..23).
DAY = datetime(2026, 11, 1, tzinfo=UTC)
# The fault points a JDBC load on the delta-spark engine passes, in order: after_plan (the
# freeze), before_write (before the read), before_commit (just before Delta Spark's save),
# before_record (its commit is done, the ask after it is not), after_commit. It stages
# nothing (no after_stage) and leaves no attempt directory (no in_cleanup).
POINTS = ["after_plan", "before_write", "before_commit", "before_record", "after_commit"]
COMMITTED_BY_THE_CRASH = {"before_record", "after_commit"}


# The children's sessions rebuild Delta snapshots in as few tasks as the tests' own session
# does (tests/support/spark_conf.py says why).
SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"


# -- helpers -----------------------------------------------------------------------------------
def _offsets(pg: Any, name: str, rows: int, **kw: Any) -> JdbcIncrementalSource:
    create_orders(pg, name)
    insert_orders(pg, name, range(1, rows + 1))
    return JdbcIncrementalSource(url=pg.jdbc_url, table=name, key_column="id", **kw)


def _intervals(pg: Any, name: str, rows: int) -> JdbcIncrementalSource:
    create_orders(pg, name)
    insert_orders(pg, name, range(1, rows + 1))
    return JdbcIncrementalSource(
        url=pg.jdbc_url, table=name, key_column="created_at", key_type="timestamp", boundary="interval"
    )


def _day(d: int) -> tuple[datetime, datetime]:
    return DAY + timedelta(days=d), DAY + timedelta(days=d + 1)


def _day_where(d: int) -> str:
    start, end = _day(d)
    return f"created_at >= '{start:%Y-%m-%d}' AND created_at < '{end:%Y-%m-%d}'"


def _creds(pg: Any) -> Credentials:
    return Credentials(pg.user, pg.password)


def _load(
    spark: Any,
    pg: Any,
    table: str,
    source: JdbcIncrementalSource,
    token: str,
    *,
    try_number: int = 1,
    interval: tuple[datetime, datetime] | None = None,
    restate_key: str | None = None,
    transform: Callable[[Any], Any] | None = None,
    wrap: Callable[[Callable[[FrozenBatch], LoadResult]], Callable[[FrozenBatch], LoadResult]] | None = None,
    engine: str = ENGINE,
) -> LoadResult:
    """The whole flow (freeze, ask, read, Delta Spark's write) as one try of run ``token``."""
    request = LoadRequest(
        TableRef.parse(table),
        PIPE,
        token,
        interval=interval,
        try_number=try_number,
        restate=restate_key is not None,
        restate_batch_key=restate_key,
    )
    ctx = ReadContext(spark_factory=lambda: spark, credentials=_creds(pg))
    run = local_run(
        lambda: spark,
        TableRef.parse(table),
        source,
        settings=LoadSettings(engine=engine, run_id=token, try_number=try_number),
        credentials=_creds(pg),
        transform_fn=transform,
    )
    return load_batch(request, source, ctx, run=wrap(run) if wrap else run)


def _delta_version(table: str) -> int | None:
    return DeltaTable(table).version() if os.path.isdir(os.path.join(table, "_delta_log")) else None


def _commits(table: str) -> list[list[tuple[str, int]]]:
    """The ``txn`` markers (app id, version) of each commit, oldest first."""
    log = os.path.join(table, "_delta_log")
    out = []
    for name in sorted(n for n in os.listdir(log) if n.endswith(".json")):
        with open(os.path.join(log, name)) as fh:
            actions = [json.loads(line) for line in fh if line.strip()]
        out.append([(a["txn"]["appId"], a["txn"]["version"]) for a in actions if "txn" in a])
    return out


def _checked(pg: Any, source_table: str, table: str, *, rows: int, batches: int, where: str = "TRUE") -> None:
    """The table holds the PostgreSQL rows ``where``, row by row, once; every commit holds one
    batch marker; and ``verify`` finds nothing wrong and counts ``batches`` batches whose
    live rows are the rows their manifests recorded."""
    cmp = check_against_postgres(pg, source_table, table, where)
    assert cmp.exact and cmp.table_rows == rows, cmp.describe()
    markers = _commits(table)
    assert [len(m) for m in markers] == [1] * batches, markers
    assert len({m[0] for m in markers}) == batches, "a batch committed twice"
    report = audit_table(table)
    assert report.ok, [f.message for f in report.findings]
    assert report.findings == [], [f.message for f in report.findings]
    assert len(report.batches) == batches, report.batches
    for b in report.batches:
        assert b.live_rows == b.recorded_rows and b.live_files > 0, b


# -- 1. a crash at each boundary of an offset batch ---------------------------------------------
@pytest.mark.parametrize("point", POINTS)
def test_a_crash_at_each_boundary_of_an_offset_batch_then_a_retry_lands_it_once(
    spark: Any, postgres: Any, table: str, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"dsjf_off_{point}"
    src = _offsets(postgres, name, 60, max_rows_per_batch=40)
    monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
    with pytest.raises(InjectedFault, match=point):
        _load(spark, postgres, table, src, "r1")
    log = PlanLog(TableRef.parse(table), PIPE)
    seq = log.claimed_seq("r1")
    assert seq is not None, "the crash came after the freeze: the run's batch is frozen"
    plan = log.get_offset_plan(seq)
    assert (plan.boundary["low"], plan.boundary["high"]) == (None, 40)
    committed = point in COMMITTED_BY_THE_CRASH
    assert ask(TableRef.parse(table), plan.key).committed == committed
    version = _delta_version(table)
    assert version == (0 if committed else None)
    # Rows that arrive between the crash and the retry are not in the frozen batch.
    insert_orders(postgres, name, range(61, 71))
    retry = _load(spark, postgres, table, src, "r1", try_number=2)
    assert (retry.batch_key, retry.rows) == (plan.batch_key, 40)
    assert retry.outcome == ("already_committed" if committed else "committed")
    assert retry.table_version == 0 and _delta_version(table) == 0, "the retry wrote at most once"
    monkeypatch.delenv("EOD_FAULTPOINTS")
    nxt = _load(spark, postgres, table, src, "r2", try_number=1)
    assert (nxt.outcome, nxt.rows, nxt.table_version) == ("committed", 30, 1)
    _checked(postgres, name, table, rows=70, batches=2)


# -- 2. a crash at each boundary of an interval batch -------------------------------------------
@pytest.mark.parametrize("point", POINTS)
def test_a_crash_at_each_boundary_of_an_interval_batch_then_a_retry_lands_it_once(
    spark: Any, postgres: Any, table: str, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"dsjf_int_{point}"
    src = _intervals(postgres, name, 71)  # three days
    monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
    with pytest.raises(InjectedFault, match=point):
        _load(spark, postgres, table, src, "d1", interval=_day(1))
    key = "i-20261102T000000Z-20261103T000000Z"
    plan = PlanLog(TableRef.parse(table), PIPE).get_plan(key)
    assert plan is not None and plan.inputs[0]["rows"] == 24, "the crash came after the freeze"
    committed = point in COMMITTED_BY_THE_CRASH
    assert ask(TableRef.parse(table), plan.key).committed == committed
    assert _delta_version(table) == (0 if committed else None)
    retry = _load(spark, postgres, table, src, "d1", try_number=2, interval=_day(1))
    assert (retry.batch_key, retry.rows, retry.table_version) == (key, 24, 0)
    assert retry.outcome == ("already_committed" if committed else "committed")
    # Another run of the same interval (a cleared task, a new run id) writes nothing either.
    monkeypatch.delenv("EOD_FAULTPOINTS")
    again = _load(spark, postgres, table, src, "d1-cleared", interval=_day(1))
    assert (again.outcome, again.table_version) == ("already_committed", 0)
    assert _delta_version(table) == 0
    _checked(postgres, name, table, rows=24, batches=1, where=_day_where(1))


# -- 3. two attempts of one batch racing ---------------------------------------------------------
@pytest.mark.parametrize("first_batch", [True, False], ids=["creating-the-table", "table-exists"])
def test_two_attempts_of_one_jdbc_batch_racing_in_threads_commit_once(
    spark: Any, postgres: Any, table: str, first_batch: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tries of one run, each through the whole flow (both freeze the run's batch, both
    ask "no", both read it), pause between their ask and Delta Spark's write, so both write:
    Delta Spark's fencing of the appId (or of the table's creation) must pick one winner,
    and the loser must report ``already_committed``."""
    name = f"dsjf_race_{'new' if first_batch else 'old'}"
    src = _offsets(postgres, name, 90, max_rows_per_batch=50)
    batches = 1
    if not first_batch:
        _load(spark, postgres, table, src, "r0")
        batches = 2
    monkeypatch.setenv("EOD_FAULTPOINTS", "before_commit=sleep:2")
    results: list[Any] = [None, None]

    def attempt(i: int) -> None:
        try:
            results[i] = _load(spark, postgres, table, src, "r1", try_number=i + 1)
        except BaseException as exc:  # reported by the assertion below
            results[i] = exc

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert sorted(getattr(r, "outcome", repr(r)) for r in results) == ["already_committed", "committed"]
    assert len({(r.batch_key, r.table_version, r.rows) for r in results}) == 1, results
    assert _delta_version(table) == batches - 1
    where = "TRUE" if not first_batch else "id <= 50"
    _checked(postgres, name, table, rows=90 if not first_batch else 50, batches=batches, where=where)


def _child_env(pg: Any) -> dict[str, str]:
    """A child driver with the Delta Spark and PostgreSQL jars, the credentials in its
    environment (never in the spec)."""
    jars = [*os.environ[DELTA_SPARK_JARS_ENV].split(","), POSTGRES_JDBC_JAR]
    return {
        "PYSPARK_SUBMIT_ARGS": f"--jars {','.join(jars)} --conf {SNAPSHOT_PARTITIONS}=2 pyspark-shell",
        CREDENTIALS_USER_ENV: pg.user,
        CREDENTIALS_PASSWORD_ENV: pg.password,
    }


# Two driver JVMs with Delta Spark (about 45 s): CI keeps the races in threads of one driver
# (test_two_attempts_of_one_jdbc_batch_racing_in_threads_commit_once, both cases).
@pytest.mark.extended
def test_two_drivers_loading_the_same_jdbc_batch_commit_once(
    spark: Any, postgres: Any, table: str, tmp_path: Any
) -> None:
    """Two processes (two JVMs, two Delta Spark writers) load the same frozen key range,
    both waiting between their ask and their write until the other is there too."""
    name = "dsjf_procs"
    src = _offsets(postgres, name, 40)
    ctx = ReadContext(spark_factory=lambda: spark, credentials=_creds(postgres))
    plan = src.plan(
        PlanLog(TableRef.parse(table), PIPE),
        ctx,
        run_token="r1",
        is_committed=lambda k: ask(TableRef.parse(table), k).committed,
    )
    assert isinstance(plan, Plan)
    kids = [
        run_child(
            LoadSpec(
                table=TableRef.parse(table),
                plan=plan,
                source=src,
                settings=LoadSettings(engine=ENGINE, run_id="r1", try_number=n),
            ),
            str(tmp_path),
            f"before_commit=meet:{tmp_path}/meet:2",
            who,
            _child_env(postgres),
        )
        for n, who in ((1, "a"), (2, "b"))
    ]
    outs = [k.communicate(timeout=400)[0].decode() for k in kids]
    assert [k.returncode for k in kids] == [0, 0], "\n".join(o[-2000:] for o in outs)
    results = [json.loads((tmp_path / f"{who}-result.json").read_text()) for who in "ab"]
    assert sorted(r["outcome"] for r in results) == ["already_committed", "committed"]
    assert {(r["table_version"], r["rows"]) for r in results} == {(0, 40)}
    assert _delta_version(table) == 0
    _checked(postgres, name, table, rows=40, batches=1)


# -- 4. a row of the planned range changed after planning -----------------------------------------
def _update(pg: Any, name: str, row: int) -> None:
    pg.execute(f"UPDATE {name} SET amount = amount + 1000 WHERE id = {row}")


@pytest.mark.parametrize("when", ["before-the-read", "after-the-read"])
def test_a_row_updated_after_planning_fails_the_batch_and_names_a_way_out_the_engine_takes(
    spark: Any, postgres: Any, table: str, when: str
) -> None:
    """Before the read, the check before the read fails it; after the read (the rows are
    read and kept as planned), the check just before Delta Spark's write: Delta Spark
    commits inside its write, so nothing later could take it back. InputChangedError names
    the batch; nothing is committed; a retry fails the same way.

    The way out it names used to be a re-freeze through ``restate``, which this engine
    refuses (at parse time, and for ``dag_run.conf`` at the task's start): the error now
    says so and names the way that works, one re-freeze run with ``engine="delta-rs"``
    (a pipeline may switch engines between runs), after which the delta-spark runs go on."""
    name = f"dsjf_upd_{when.replace('-', '_')}"
    src = _offsets(postgres, name, 20, max_rows_per_batch=10)
    assert _load(spark, postgres, table, src, "r0").rows == 10  # ids 1..10: the table exists
    frozen: list[str] = []

    def update_first(run: Callable[[FrozenBatch], LoadResult]) -> Callable[[FrozenBatch], LoadResult]:
        def wrapped(batch: FrozenBatch) -> LoadResult:
            frozen.append(batch.plan.batch_key)
            _update(postgres, name, 17)
            return run(batch)

        return wrapped

    def update_after_read(df: Any) -> Any:
        frozen.append("read")
        _update(postgres, name, 17)
        return df

    kw: dict[str, Any] = (
        {"wrap": update_first} if when == "before-the-read" else {"transform": update_after_read}
    )
    with pytest.raises(InputChangedError, match="content changed") as err:
        _load(spark, postgres, table, src, "r1", **kw)
    plan = PlanLog(TableRef.parse(table), PIPE).get_offset_plan(1)
    assert (plan.boundary["low"], plan.boundary["high"]) == (10, 20)
    text = str(err.value)
    assert frozen and text.startswith(f"batch {plan.key.label}:") and not err.value.retryable
    assert "engine='delta-spark' cannot re-freeze" in text and "engine='delta-rs'" in text, text
    assert _delta_version(table) == 0, "nothing committed"
    with pytest.raises(InputChangedError):
        _load(spark, postgres, table, src, "r1", try_number=2)
    assert _delta_version(table) == 0
    # The way out the error names: one re-freeze run on the delta-rs engine.
    result = _load(spark, postgres, table, src, "r1-refreeze", restate_key=plan.batch_key, engine="delta-rs")
    assert (result.outcome, result.rows, result.generation, result.table_version) == ("committed", 10, 1, 1)
    assert _load(spark, postgres, table, src, "r2").outcome == "no_new_data"
    _checked(postgres, name, table, rows=20, batches=2)
    assert postgres.rows(f"SELECT amount FROM {name} WHERE id = 17")[0][0] == Decimal("1004.25")


def test_a_row_updated_while_delta_spark_writes_is_not_read_again(
    spark: Any, postgres: Any, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the last check, just before Delta Spark's save: the rows the batch writes are
    the rows it read and checked (kept in Spark), not a second query of the database, so the
    commit holds the batch as planned, matching its manifest's fingerprint; the update is
    for a re-freeze to load."""
    name = "dsjf_upd_in_write"
    src = _offsets(postgres, name, 20)
    postgres.execute(f"CREATE TABLE {name}_as_planned AS SELECT * FROM {name}")
    real = delta_spark_engine.fault_point

    def update_at(point: str, **kw: Any) -> None:
        if point == "before_commit":
            _update(postgres, name, 7)
        real(point, **kw)

    monkeypatch.setattr(delta_spark_engine, "fault_point", update_at)
    result = _load(spark, postgres, table, src, "r1")
    assert (result.outcome, result.rows) == ("committed", 20)
    _checked(postgres, f"{name}_as_planned", table, rows=20, batches=1)
    assert not check_against_postgres(postgres, name, table).exact, "the update is not in the batch"
