"""Adversarial review of issue 18 (main at 7b309d0): defects reproduced against the new JDBC
overlap index, the content fingerprint, catch-up and the conf restatement.

Each test failed on 7b309d0 (then marked ``xfail(strict=True)``) and passes since the fixes: a
fix turns it into an XPASS, which fails the run until the mark is removed. Real PostgreSQL,
real Spark, real Delta tables where data is loaded, checked row by row against the source.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core import planner
from airflow_eod.core.errors import InputChangedError, OverlappingIntervalError
from airflow_eod.core.faults import InjectedFault
from airflow_eod.core.load_flow import LoadRequest, load_batch
from airflow_eod.core.planlog.intervals import IntervalIndex
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.result import LoadResult
from airflow_eod.core.table_ref import TableRef
from airflow_eod.runners.local import local_run
from airflow_eod.sources import Credentials, JdbcIncrementalSource, ReadContext
from airflow_eod.spark.load_spec import LoadSettings
from tests.support.jdbc_helpers import create_orders

pytestmark = [pytest.mark.guarantee]

DAY = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
PIPE = "tests.adversary_i18"


def _rows(pg: Any, name: str, n: int, *, hours_apart: int = 3) -> None:
    """``n`` orders from 2025-01-01T00:00 UTC, ``hours_apart`` hours apart (8 a day)."""
    start = DAY.replace(tzinfo=None)
    pg.execute(
        f"INSERT INTO {name} (id, customer, amount, created_at) VALUES (%s, %s, %s, %s)",
        [(1 + i, f"c{i % 5}", Decimal(i) / 4, start + dt.timedelta(hours=i * hours_apart)) for i in range(n)],
        many=True,
    )


def _days(first: float, last: float) -> tuple[dt.datetime, dt.datetime]:
    return DAY + dt.timedelta(days=first), DAY + dt.timedelta(days=last)


def _version(table: str) -> int | None:
    return DeltaTable(table).version() if os.path.isdir(os.path.join(table, "_delta_log")) else None


# Statements "another writer" commits between the load's two checks of the source: the first
# right after the check before the read, the second right before the check before the commit.
_BETWEEN_CHECKS: list[Callable[[], None]] = []


class _ConcurrentWriter(JdbcIncrementalSource):
    """The JDBC source, unchanged, except that another writer's statements commit at two
    exact moments of the load: after the check before Spark's read, and after the read
    (before the check before the commit). Only the timing is staged; every query is real."""

    def verify(self, plan: Plan, ctx: ReadContext) -> None:
        if len(_BETWEEN_CHECKS) == 1:
            _BETWEEN_CHECKS.pop(0)()  # second check (before the commit): the writer's 2nd statement
        super().verify(plan, ctx)
        if len(_BETWEEN_CHECKS) == 2:
            _BETWEEN_CHECKS.pop(0)()  # first check (before the read): then the writer's 1st


def _load_interval(spark: Any, pg: Any, table: str, source: JdbcIncrementalSource, token: str,
                   interval: tuple[dt.datetime, dt.datetime]) -> LoadResult:  # fmt: skip
    creds = Credentials(pg.user, pg.password)
    request = LoadRequest(TableRef.parse(table), PIPE, token, interval=interval)
    ctx = ReadContext(spark_factory=lambda: spark, credentials=creds)
    return load_batch(
        request, source, ctx, run=local_run(lambda: spark, TableRef.parse(table), source, credentials=creds)
    )


def _interval_source(cls: type[JdbcIncrementalSource], pg: Any, name: str) -> JdbcIncrementalSource:
    return cls(
        url=pg.jdbc_url, table=name, key_column="created_at", key_type="timestamp", boundary="interval"
    )


@pytest.mark.spark
@pytest.mark.jdbc
def test_a_row_deleted_and_reinserted_around_the_read_is_lost_under_a_committed_batch(
    spark: Any, postgres: Any, table: str
) -> None:
    """Another writer refreshes a row the non-transactional way (``DELETE`` committed, then
    the same row ``INSERT``ed again, e.g. an autocommit script): the DELETE lands after the
    load's check before the read, the INSERT before its check before the commit. Both checks
    see the frozen 8 rows with the frozen fingerprint, Spark read 7, and the batch commits 7
    rows. The missing row is lost for good: the batch is committed, every retry or clear says
    ``already_committed``, and nothing (no error, no count, ``verify``) says so. The staged
    row count (``staged.rows``) is known before the commit and never compared with the
    plan's frozen ``rows``. docs/sources/jdbc.md ("What remains") admits that a change made
    and reverted between the two checks "can be committed as read"; a row missing from the
    read is that case at its worst (data lost, not stale), and the one a free count catches."""
    create_orders(postgres, "adv_refresh")
    _rows(postgres, "adv_refresh", 16)
    src = _interval_source(_ConcurrentWriter, postgres, "adv_refresh")
    row = postgres.rows("SELECT id, customer, amount, created_at FROM adv_refresh WHERE id = 3")[0]
    _BETWEEN_CHECKS[:] = [
        lambda: postgres.execute("DELETE FROM adv_refresh WHERE id = 3"),
        lambda: postgres.execute(
            "INSERT INTO adv_refresh (id, customer, amount, created_at) VALUES (%s, %s, %s, %s)", row
        ),
    ]
    # Fixed: what Spark read is kept and held to the frozen count and fingerprint.
    with pytest.raises(InputChangedError, match="Spark read 7 rows"):
        _load_interval(spark, postgres, table, src, "d1", _days(0, 1))
    # The writer's first statement landed after the check before the read; the read's own
    # check refused the batch before the second one had its turn.
    assert len(_BETWEEN_CHECKS) == 1, "the change landed between the check and the read"
    _BETWEEN_CHECKS.clear()
    assert _version(table) is None, "nothing was committed"


@pytest.mark.spark
@pytest.mark.jdbc
def test_an_update_undone_between_the_two_checks_commits_a_value_the_frozen_range_never_held(
    spark: Any, postgres: Any, table: str
) -> None:
    """An UPDATE of a planned row commits after the check before the read, and is undone
    (a second UPDATE, or the first one's transaction compensated) before the check before
    the commit. Spark read the updated amount; both checks see the frozen content; the batch
    commits ``amount = 1000.50`` for a row that holds ``0.50`` at planning, at both checks
    and forever after. Issue 18 item 2 asks that "the rows Spark reads for a batch are
    provably the rows frozen at planning"; they were not."""
    create_orders(postgres, "adv_aba")
    _rows(postgres, "adv_aba", 16)
    src = _interval_source(_ConcurrentWriter, postgres, "adv_aba")
    _BETWEEN_CHECKS[:] = [
        lambda: postgres.execute("UPDATE adv_aba SET amount = amount + 1000 WHERE id = 3"),
        lambda: postgres.execute("UPDATE adv_aba SET amount = amount - 1000 WHERE id = 3"),
    ]
    # Fixed: each row's hash is computed by the database as Spark reads it, and their sum is
    # held to the frozen fingerprint.
    with pytest.raises(InputChangedError, match="Spark read the planned 8 rows with other content"):
        _load_interval(spark, postgres, table, src, "d1", _days(0, 1))
    # The writer's first statement landed after the check before the read; the read's own
    # check refused the batch before the second one had its turn.
    assert len(_BETWEEN_CHECKS) == 1, "the change landed between the check and the read"
    _BETWEEN_CHECKS.clear()
    assert _version(table) is None, "nothing was committed"


# -- the interval index --------------------------------------------------------------------
def _plan_log(tmp_path: Any) -> PlanLog:
    path = tmp_path / "t"
    path.mkdir(parents=True)
    return PlanLog(TableRef.parse(str(path)), PIPE)


def _freeze(plan_log: PlanLog, start: dt.datetime, end: dt.datetime) -> Plan:
    return planner.plan_interval_batch(
        plan_log, start=start, end=end, inputs=lambda: [{"rows": 1}], source={"type": "jdbc_incremental"},
        exclusive=True,
    )  # fmt: skip


def test_a_planner_killed_between_registering_and_checking_wedges_the_next_day(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Daily intervals [01-01, 01-02) and [01-02, 01-03) are frozen. A manual run with a
    mid-day logical date plans [01-02T12:00, 01-03T12:00): its planner registers the interval
    in the index and is killed (OOM, lost node) before it checks, so it never takes its names
    back (``refuse_overlaps`` has no ``finally``, and a SIGKILL has none anyway). From then on
    the scheduled run of [01-03, 01-04) is refused with OverlappingIntervalError, "being
    planned by another run now, or its planner died: run that interval again". Running that
    interval again is refused too (it overlaps the frozen [01-02, 01-03)), so the orphan
    registration is never replaced by a plan, and every interval touching
    [01-02T12:00, 01-03T12:00) is refused for good. OverlappingIntervalError is not
    retryable; there is no command to drop the registration: only a hand edit of
    ``_eod/.../spans/`` lets the pipeline move again."""
    plan_log = _plan_log(tmp_path)
    _freeze(plan_log, *_days(0, 1))
    _freeze(plan_log, *_days(1, 2))
    noon = _days(1.5, 2.5)

    def dies(self: IntervalIndex, span: Any, **_kw: Any) -> Any:
        raise InjectedFault("SIGKILL: the planner died after registering its interval")

    with monkeypatch.context() as m:
        m.setattr(IntervalIndex, "overlapping", dies)
        with pytest.raises(InjectedFault):
            _freeze(plan_log, *noon)
    # The documented way out: "if it died, run that interval again".
    with pytest.raises(OverlappingIntervalError, match="i-20250102T000000Z-20250103T000000Z"):
        _freeze(plan_log, *noon)
    # The next scheduled day must be loadable: nothing froze the noon interval.
    assert _freeze(plan_log, *_days(2, 3)).batch_key == "i-20250103T000000Z-20250104T000000Z"


@pytest.mark.spark
@pytest.mark.jdbc
@pytest.mark.delta_spark
def test_an_update_while_the_delta_spark_engine_reads_is_committed_silently(
    spark: Any, postgres: Any, table: str
) -> None:
    """``_write`` checks the source again before the commit only on the delta-rs path; the
    ``engine="delta-spark"`` branch counts the DataFrame (one JDBC read) and saves it (a
    second JDBC read, which commits) with no ``source.verify`` after either. An UPDATE that
    lands after the check before the read (here inside the transform, before Spark's lazy
    read) is committed under the frozen key without a word: the guarantee of issue 18 item 2
    ("checked before the read and before the commit") does not hold for this engine. Read
    from the code at 7b309d0; run since issue 19 with the jars."""
    create_orders(postgres, "adv_dspark")
    _rows(postgres, "adv_dspark", 16)
    src = _interval_source(JdbcIncrementalSource, postgres, "adv_dspark")
    creds = Credentials(postgres.user, postgres.password)

    def change_then_read(df: Any) -> Any:
        postgres.execute("UPDATE adv_dspark SET amount = amount + 1000 WHERE id = 3")
        return df

    run = local_run(lambda: spark, TableRef.parse(table), src, credentials=creds,
                    transform_fn=change_then_read, settings=LoadSettings(engine="delta-spark"))  # fmt: skip
    request = LoadRequest(TableRef.parse(table), PIPE, "d1", interval=_days(0, 1))
    with pytest.raises(InputChangedError):
        load_batch(request, src, ReadContext(spark_factory=lambda: spark, credentials=creds), run=run)
    assert _version(table) is None, "nothing committed"


def test_a_linked_specs_directory_takes_spec_writes_and_removals_out_of_the_table(tmp_path: Any) -> None:
    """Invariant I11. ``_eod/specs`` replaced by a link to a directory elsewhere (someone who
    controls the table's files): ``spec_path`` (``os.makedirs(exist_ok=True)`` then the
    operator's ``open(path, "w")``) writes each submitted attempt's spec there, and
    ``remove_decided_specs`` lists that directory and deletes the files in it whose names
    match a decided batch. The interval index refuses a linked directory and the plan log
    checks the real path of every entry; the spec files check only that each file is not a
    link itself."""
    from airflow_eod.core.ask import BatchStatus
    from airflow_eod.core.batch import BatchKey
    from airflow_eod.core.errors import UnsafePathError
    from airflow_eod.core.spec_files import SPECS_DIR, _batch_tag, remove_decided_specs, spec_path

    table = tmp_path / "table"
    (table / "_eod").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, table / SPECS_DIR)
    batch = BatchKey(PIPE, "o-00000000-aa")
    decided = BatchStatus(batch, 0, 0, 1, None, 1)
    planted = f"{_batch_tag(batch)}-g0-theirs.json"  # a file of the other directory's owner
    with open(os.path.join(outside, planted), "w") as fh:
        fh.write("{}")
    # Fixed: the spec's path is a checked join, refused through the link.
    with pytest.raises(UnsafePathError, match="outside"):
        spec_path(TableRef.parse(str(table)), batch, 0, "attempt1")
    assert remove_decided_specs(TableRef.parse(str(table)), decided) == []  # and cleanup leaves it alone
    assert os.listdir(outside) == [planted], "nothing outside the table was written or removed"


def test_a_sigkilled_planners_registration_never_wedges_its_neighbours(tmp_path: Any) -> None:
    """A SIGKILL runs no ``finally``: the dead planner's names stay in the index with no plan
    behind them. Planning its own interval again (the way out the error names) is refused by
    the frozen overlap and takes those names away; and a name nobody planned again is dropped
    once it is older than ``STALE_AFTER_S``. A fresh one (a planner still at work) blocks."""
    from airflow_eod.core.planlog.intervals import STALE_AFTER_S, span_of

    plan_log = _plan_log(tmp_path)
    _freeze(plan_log, *_days(0, 1))
    _freeze(plan_log, *_days(1, 2))
    index = IntervalIndex(plan_log)
    index.ensure_complete()
    noon = span_of(*_days(1.5, 2.5))
    index.register(noon)  # the dead planner's names: registered, nothing stored, no finally

    # A fresh registration may be a planner at work: the neighbour waits.
    with pytest.raises(OverlappingIntervalError, match="being planned by another run now"):
        _freeze(plan_log, *_days(2, 3))
    # The way out the error names: plan that interval again. It is refused (it overlaps the
    # frozen day 2), and takes the dead planner's names with it.
    with pytest.raises(OverlappingIntervalError, match="i-20250102T000000Z-20250103T000000Z"):
        _freeze(plan_log, *_days(1.5, 2.5))
    assert _freeze(plan_log, *_days(2, 3)).batch_key == "i-20250103T000000Z-20250104T000000Z"

    # Nobody plans it again: an old name with no plan is dropped by the next planner.
    late = span_of(*_days(3.5, 4.5))
    index.register(late)
    old = time.time() - STALE_AFTER_S - 5
    aged = 0
    for folder, _dirs, names in os.walk(index.root):
        for name in names:
            if name.startswith(f"{late[0]}_{late[1]}_"):
                os.utime(os.path.join(folder, name), (old, old))
                aged += 1
    assert aged == 2, "the interval touches two days"
    assert _freeze(plan_log, *_days(4, 5)).batch_key == "i-20250105T000000Z-20250106T000000Z"
    assert not index.overlapping(span_of(*_days(4, 5))), "the stale names are gone"
