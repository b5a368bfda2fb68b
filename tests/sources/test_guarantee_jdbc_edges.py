"""The JDBC source's edges (issue 18, items 1-3): intervals that overlap, ranges that change
after planning with the same row count, and rows whose key is NULL. Real PostgreSQL, real
Spark, real Delta tables, each load checked row by row against the source."""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core import planner
from airflow_eod.core.audit.verify import audit_table
from airflow_eod.core.errors import (
    ConfigurationError,
    InputChangedError,
    NullKeyError,
    OverlappingIntervalError,
    PlanLogError,
)
from airflow_eod.core.load_flow import FrozenBatch, LoadRequest, load_batch
from airflow_eod.core.planlog.intervals import IntervalIndex, span_of
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.result import LoadResult
from airflow_eod.core.table_ref import TableRef
from airflow_eod.runners.local import local_run
from airflow_eod.sources import Credentials, JdbcIncrementalSource, ReadContext
from tests.support.jdbc_helpers import check_against_postgres, create_orders

pytestmark = [pytest.mark.guarantee, pytest.mark.jdbc]

DAY = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
PIPE = "tests.jdbc_edges"


def _rows(pg: Any, name: str, n: int, *, hours_apart: int = 3, first_id: int = 1) -> None:
    """``n`` orders from 2025-01-01T00:00 UTC, ``hours_apart`` hours apart (8 a day by default)."""
    start = DAY.replace(tzinfo=None)
    pg.execute(
        f"INSERT INTO {name} (id, customer, amount, created_at) VALUES (%s, %s, %s, %s)",
        [
            (first_id + i, f"c{i % 5}", Decimal(i) / 4, start + dt.timedelta(hours=i * hours_apart))
            for i in range(n)
        ],
        many=True,
    )


def _source(pg: Any, name: str, **kw: Any) -> JdbcIncrementalSource:
    kw.setdefault("key_column", "id")
    kw.setdefault("url", pg.jdbc_url)
    return JdbcIncrementalSource(table=name, **kw)


def _interval_source(pg: Any, name: str, **kw: Any) -> JdbcIncrementalSource:
    return _source(pg, name, key_column="created_at", key_type="timestamp", boundary="interval", **kw)


def _creds(pg: Any) -> Credentials:
    return Credentials(pg.user, pg.password)


def _load(
    spark: Any,
    pg: Any,
    table: str,
    source: JdbcIncrementalSource,
    token: str,
    *,
    interval: tuple[dt.datetime, dt.datetime] | None = None,
    restate_key: str | None = None,
    transform: Callable[[Any], Any] | None = None,
    run: Callable[[FrozenBatch], LoadResult] | None = None,
) -> LoadResult:
    creds = _creds(pg)
    request = LoadRequest(
        TableRef.parse(table),
        PIPE,
        token,
        interval=interval,
        restate=restate_key is not None,
        restate_batch_key=restate_key,
    )
    ctx = ReadContext(spark_factory=lambda: spark, credentials=creds)
    return load_batch(
        request,
        source,
        ctx,
        run=run
        or local_run(lambda: spark, TableRef.parse(table), source, credentials=creds, transform_fn=transform),
    )


def _days(first: int, last: int) -> tuple[dt.datetime, dt.datetime]:
    return DAY + dt.timedelta(days=first), DAY + dt.timedelta(days=last)


def _version(table: str) -> int | None:
    return DeltaTable(table).version() if os.path.isdir(os.path.join(table, "_delta_log")) else None


# -- item 1: overlapping intervals ---------------------------------------------------------
@pytest.mark.spark
def test_an_interval_overlapping_committed_ones_is_refused_and_the_same_interval_retries(
    spark: Any, postgres: Any, table: str
) -> None:
    """Used to commit the overlap twice: daily [01-01, 01-02) and [01-02, 01-03) committed,
    then [01-01T12:00, 01-02T12:00) loaded its 8 rows again (16 source rows, 24 table rows)
    and `verify` said nothing. Now it is refused at planning, naming both batches and the
    way out; a retry of the very same interval, and the adjacent next day, still load."""
    create_orders(postgres, "edges_overlap")
    _rows(postgres, "edges_overlap", 24)  # 3 days, 8 rows a day
    src = _interval_source(postgres, "edges_overlap")
    assert _load(spark, postgres, table, src, "day-1", interval=_days(0, 1)).rows == 8

    # The second day's first try dies after planning (nothing committed); its retry loads it.
    def dies(frozen: FrozenBatch) -> LoadResult:
        raise RuntimeError(f"worker lost while loading {frozen.plan.key}")

    with pytest.raises(RuntimeError, match="worker lost"):
        _load(spark, postgres, table, src, "day-2", interval=_days(1, 2), run=dies)
    retried = _load(spark, postgres, table, src, "day-2", interval=_days(1, 2))
    assert (retried.outcome, retried.rows) == ("committed", 8)
    version = _version(table)

    odd = (DAY + dt.timedelta(hours=12), DAY + dt.timedelta(days=1, hours=12))
    with pytest.raises(OverlappingIntervalError) as err:
        _load(spark, postgres, table, src, "manual-noon", interval=odd)
    text = str(err.value)
    assert text.startswith(f"batch {PIPE}/i-20250101T120000Z-20250102T120000Z:")
    assert "i-20250101T000000Z-20250102T000000Z" in text and "i-20250102T000000Z-20250103T000000Z" in text
    assert "restate" in text and "do not overlap" in text and text.count("(committed)") == 2
    assert not err.value.retryable
    assert PlanLog(TableRef.parse(table), PIPE).get_plan("i-20250101T120000Z-20250102T120000Z") is None, (
        "nothing frozen"
    )
    assert _version(table) == version, "nothing committed"
    # Refused again on another try (the refusal left nothing behind that lets it through).
    with pytest.raises(OverlappingIntervalError):
        _load(spark, postgres, table, src, "manual-noon", interval=odd)

    again = _load(spark, postgres, table, src, "day-1-cleared", interval=_days(0, 1))
    assert again.outcome == "already_committed"
    assert _load(spark, postgres, table, src, "day-3", interval=_days(2, 3)).rows == 8
    cmp = check_against_postgres(postgres, "edges_overlap", table)
    assert cmp.exact and cmp.table_rows == 24, cmp.describe()
    assert not [f for f in audit_table(table).findings if f.kind == "overlapping_intervals"]


def _plan_log(tmp_path: Any) -> PlanLog:
    path = tmp_path / "t"
    path.mkdir(parents=True)
    return PlanLog(TableRef.parse(str(path)), PIPE)


def _freeze(plan_log: PlanLog, start: dt.datetime, end: dt.datetime) -> Plan:
    return planner.plan_interval_batch(
        plan_log,
        start=start,
        end=end,
        inputs=lambda: [{"rows": 1}],
        source={"type": "jdbc_incremental"},
        exclusive=True,
    )


def test_an_overlap_with_an_interval_being_planned_or_frozen_by_an_older_release_is_refused(
    tmp_path: Any,
) -> None:
    """Two runs planning overlapping intervals at once: each registers before it checks, so
    the second to check sees the first (here: a registration whose plan is not stored yet).
    Plans stored before the index existed are registered by the first planner that finds
    the index incomplete, so they are seen too."""
    plan_log = _plan_log(tmp_path)
    index = IntervalIndex(plan_log)
    index.ensure_complete()
    index.register(span_of(*_days(0, 1)))  # another run between its registration and its plan
    with pytest.raises(OverlappingIntervalError, match="being planned by another run"):
        _freeze(plan_log, DAY + dt.timedelta(hours=6), DAY + dt.timedelta(hours=30))
    assert index.overlapping(span_of(*_days(0, 1))) == [], "the refused interval left the index"

    # Two runs of one interval X at once, one of them refused because of a third, Z: the
    # refused run takes back its own registration only, not the one of the run that froze X.
    x, z = _days(2, 3), (DAY + dt.timedelta(days=2, hours=20), DAY + dt.timedelta(days=3, hours=4))
    index.register(span_of(*x))  # the run that passed its check (before Z was registered)
    zs = index.register(span_of(*z))  # Z, in flight
    with pytest.raises(OverlappingIntervalError):
        _freeze(plan_log, *x)  # the second run of X sees Z
    index.unregister(span_of(*z), zs)  # Z is refused too, and leaves
    assert index.overlapping(span_of(*z)) == [span_of(*x)], "X is still registered"

    old = _plan_log(tmp_path / "old")
    # An older release stored this plan with no index at all.
    old.put_plan(Plan(PIPE, "i-20250101T000000Z-20250102T000000Z", "interval",
                      {"start": DAY.isoformat(), "end": (DAY + dt.timedelta(days=1)).isoformat()},
                      [{"rows": 8}], source={"type": "jdbc_incremental"}))  # fmt: skip
    with pytest.raises(OverlappingIntervalError, match="frozen"):
        _freeze(old, DAY + dt.timedelta(hours=23), DAY + dt.timedelta(hours=25))
    assert _freeze(old, *_days(1, 2)).batch_key == "i-20250102T000000Z-20250103T000000Z"
    assert _freeze(old, *_days(1, 2)).batch_key == "i-20250102T000000Z-20250103T000000Z", "a retry"


def test_the_overlap_check_reads_only_the_days_the_interval_touches(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Invariant I8: planning interval 201 of a daily pipeline lists two day directories
    (the day it starts and the day it ends), however many intervals came before."""
    plan_log = _plan_log(tmp_path)
    for day in range(200):
        _freeze(plan_log, *_days(day, day + 1))
    listed: list[str] = []
    real = os.listdir

    def counting(path: Any = ".") -> list[str]:
        listed.append(str(path))
        return real(path)

    monkeypatch.setattr(os, "listdir", counting)
    with pytest.raises(OverlappingIntervalError):
        _freeze(plan_log, DAY + dt.timedelta(days=199, hours=12), DAY + dt.timedelta(days=200, hours=12))
    _freeze(plan_log, *_days(200, 201))
    spans = [p for p in listed if os.sep + "spans" in p]
    assert len(spans) <= 4, spans
    assert not [p for p in listed if p.endswith("intervals")], "no listing of every plan"


def test_a_linked_index_directory_is_refused_and_nothing_is_written_through_it(tmp_path: Any) -> None:
    """Invariant I11: a day directory of the index replaced by a link to elsewhere (someone
    who controls the table's files) is neither read, written nor cleaned through."""
    plan_log = _plan_log(tmp_path)
    _freeze(plan_log, *_days(0, 1))
    outside = tmp_path / "outside"
    outside.mkdir()
    day = span_of(*_days(1, 2))[0] // (86_400 * 1_000_000)
    os.symlink(outside, os.path.join(plan_log.root, "spans", str(day)))
    with pytest.raises(PlanLogError, match="symbolic link"):
        _freeze(plan_log, *_days(1, 2))
    assert os.listdir(outside) == []
    assert plan_log.get_plan("i-20250102T000000Z-20250103T000000Z") is None


@pytest.mark.spark
def test_verify_reports_committed_jdbc_intervals_that_overlap(
    spark: Any, postgres: Any, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table where it happened anyway (an older release, or the check bypassed): `verify`
    used to exit 0 on it; now it reports `overlapping_intervals`, an error, naming both."""
    create_orders(postgres, "edges_verify")
    _rows(postgres, "edges_verify", 16)
    src = _interval_source(postgres, "edges_verify")
    _load(spark, postgres, table, src, "d1", interval=_days(0, 1))
    _load(spark, postgres, table, src, "d2", interval=_days(1, 2))
    # As a release without the check (raising=False: the base commit has no such function).
    monkeypatch.setattr(planner, "refuse_overlaps", lambda *a, **k: None, raising=False)
    odd = (DAY + dt.timedelta(hours=12), DAY + dt.timedelta(days=1, hours=12))
    assert _load(spark, postgres, table, src, "noon", interval=odd).rows == 8
    cmp = check_against_postgres(postgres, "edges_verify", table)
    assert not cmp.exact and cmp.table_rows == 24, "the duplicate this finding is about"
    report = audit_table(table)
    found = [f for f in report.findings if f.kind == "overlapping_intervals"]
    assert not report.ok
    noon, day2 = "i-20250101T120000Z-20250102T120000Z", "i-20250102T000000Z-20250103T000000Z"
    assert {f.batch_key for f in found} == {noon, day2}
    assert all(f.severity == "error" and "Two JDBC interval batches overlap" in f.message for f in found)
    assert any("2025-01-01T12:00:00+00:00, 2025-01-02T00:00:00+00:00" in f.message for f in found)


# -- item 2: a range that changes after planning, keeping its count -------------------------
@pytest.mark.spark
def test_an_update_between_planning_and_the_read_fails_then_a_refreeze_loads_the_new_values(
    spark: Any, postgres: Any, table: str
) -> None:
    """Used to commit silently: only the row count was compared, and an UPDATE keeps it.
    Now the range's content fingerprint, frozen at planning, is compared before the read
    and before the commit: InputChangedError, nothing committed; the documented way out
    (restate=True on the batch: a re-freeze) loads the rows as they are now."""
    create_orders(postgres, "edges_update")
    _rows(postgres, "edges_update", 20)
    src = _source(postgres, "edges_update")
    load = local_run(lambda: spark, TableRef.parse(table), src, credentials=_creds(postgres))
    frozen_keys: list[str] = []

    def update_then_load(frozen: FrozenBatch) -> LoadResult:
        frozen_keys.append(frozen.plan.batch_key)
        postgres.execute("UPDATE edges_update SET amount = amount + 1000 WHERE id = 7")
        return load(frozen)

    with pytest.raises(InputChangedError, match="their content changed since") as err:
        _load(spark, postgres, table, src, "r1", run=update_then_load)
    assert frozen_keys[0] in str(err.value) and "restate=True" in str(err.value)
    assert _version(table) is None, "nothing committed"
    # The retry reads the same frozen plan, and the range still differs from it.
    with pytest.raises(InputChangedError):
        _load(spark, postgres, table, src, "r1")
    result = _load(spark, postgres, table, src, "r1-refreeze", restate_key=frozen_keys[0])
    assert (result.outcome, result.rows, result.generation) == ("committed", 20, 1)
    cmp = check_against_postgres(postgres, "edges_update", table)
    assert cmp.exact, cmp.describe()
    assert postgres.rows("SELECT amount FROM edges_update WHERE id = 7")[0][0] == Decimal("1001.50")


@pytest.mark.spark
def test_a_delete_and_reinsert_keeping_the_count_while_spark_reads_fails_the_batch(
    spark: Any, postgres: Any, table: str
) -> None:
    """A DELETE plus a re-INSERT with other values keeps the count: it was committed without
    a word. Here it happens after the check before the read (inside the transform, before
    Spark's lazy read runs), on an interval batch: the check before the commit fails it."""
    create_orders(postgres, "edges_reinsert")
    _rows(postgres, "edges_reinsert", 16)
    src = _interval_source(postgres, "edges_reinsert")

    def change_then_read(df: Any) -> Any:
        postgres.execute(
            "DELETE FROM edges_reinsert WHERE id = 3;"
            "INSERT INTO edges_reinsert VALUES (3, 'someone else', 99.00, '2025-01-01 06:00:00')"
        )
        return df

    with pytest.raises(InputChangedError, match="holds 8 rows as planned, but their content changed"):
        _load(spark, postgres, table, src, "d1", interval=_days(0, 1), transform=change_then_read)
    assert _version(table) is None, "nothing committed"
    key = "i-20250101T000000Z-20250102T000000Z"
    result = _load(spark, postgres, table, src, "d1-refreeze", interval=_days(0, 1), restate_key=key)
    assert (result.outcome, result.rows) == ("committed", 8)
    cmp = check_against_postgres(postgres, "edges_reinsert", table, "created_at < '2025-01-02'")
    assert cmp.exact, cmp.describe()


@pytest.mark.spark
def test_the_fingerprint_is_the_same_over_libpq_and_the_jvm_whatever_the_session_settings(
    spark: Any, postgres: Any, tmp_path: Any
) -> None:
    """Planning goes over libpq, the check in a submitted driver over pgjdbc: a row rendered
    differently by the two (a zoned timestamp in the role's time zone, floats) must not
    fail a batch whose rows did not change."""
    postgres.execute(
        "CREATE TABLE edges_render (id int, at timestamptz, ratio double precision, "
        "span interval, raw bytea);"
        "INSERT INTO edges_render SELECT i, TIMESTAMPTZ '2025-03-30 00:30:00.000123+00' + i * "
        "INTERVAL '17 minutes', i / 3.0, i * INTERVAL '90 minutes', int4send(i) "
        "FROM generate_series(1, 12) i"
    )
    postgres.execute(f"ALTER ROLE {postgres.user} SET timezone = 'Europe/Berlin'")
    postgres.execute(f"ALTER ROLE {postgres.user} SET extra_float_digits = 0")
    try:
        native = _source(postgres, "edges_render")
        jvm = _source(postgres, "edges_render", url=postgres.jdbc_url + "?prepareThreshold=5")
        ctx = ReadContext(spark_factory=lambda: spark, credentials=_creds(postgres))
        plan = native.plan(
            PlanLog(TableRef.parse(str(tmp_path)), PIPE), ctx, run_token="r", is_committed=lambda _k: False
        )
        assert plan is not None and plan.inputs[0]["fingerprint"].startswith("h64sum:")
        jvm.verify(plan, ctx)  # the same rows, the same fingerprint
        postgres.execute("UPDATE edges_render SET ratio = ratio + 1e-12 WHERE id = 5")
        with pytest.raises(InputChangedError, match="content changed"):
            jvm.verify(plan, ctx)
    finally:
        postgres.execute(f"ALTER ROLE {postgres.user} RESET timezone")
        postgres.execute(f"ALTER ROLE {postgres.user} RESET extra_float_digits")


def test_a_plan_frozen_without_a_fingerprint_keeps_the_count_check(postgres: Any, tmp_path: Any) -> None:
    """Plans written before fingerprints existed hold only ``rows``: they are still checked
    by their count (and are not failed for lacking a fingerprint)."""
    create_orders(postgres, "edges_oldplan")
    _rows(postgres, "edges_oldplan", 10)
    src = _source(postgres, "edges_oldplan")
    ctx = ReadContext(credentials=_creds(postgres))  # libpq: no SparkSession needed
    boundary = {"table": "edges_oldplan", "key_column": "id", "low": None, "high": 10}
    old = Plan(PIPE, "o-00000000-0123456789ab", "offsets", boundary, [{"rows": 10}], seq=0)
    postgres.execute("UPDATE edges_oldplan SET amount = 0 WHERE id = 2")
    src.verify(old, ctx)
    inputs = [{"rows": 10, "fingerprint": "md5x:1:2"}]
    other_scheme = Plan(PIPE, old.batch_key, "offsets", boundary, inputs, seq=0)
    src.verify(other_scheme, ctx)  # a fingerprint computed another way is not compared
    postgres.execute("DELETE FROM edges_oldplan WHERE id = 2")
    with pytest.raises(InputChangedError, match="held 10 rows when planned and holds 9 now"):
        src.verify(old, ctx)


# -- item 3: rows whose key is NULL --------------------------------------------------------
def _nullable_orders(pg: Any, name: str) -> None:
    pg.execute(f"CREATE TABLE {name} (id bigint, customer text, amount numeric(10,2), created_at timestamp)")
    _rows(pg, name, 12)
    pg.execute(f"UPDATE {name} SET id = NULL WHERE id IN (4, 9)")


@pytest.mark.spark
def test_rows_with_a_null_key_are_counted_warned_about_and_on_the_result(
    spark: Any, postgres: Any, table: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Rows whose key is NULL were never loaded, and nothing said so. Now planning counts
    them: by default a warning with the count and ``null_key_rows`` on the result."""
    _nullable_orders(postgres, "edges_nulls")
    src = _source(postgres, "edges_nulls")
    with caplog.at_level(logging.WARNING, logger="airflow_eod"):
        result = _load(spark, postgres, table, src, "r1")
    assert (result.outcome, result.rows, result.null_key_rows) == ("committed", 10, 2)
    assert result.to_dict()["null_key_rows"] == 2
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    said = "2 row(s) of edges_nulls have a NULL id"
    assert any(said in m and str(result.batch_key) in m for m in warned), warned
    cmp = check_against_postgres(postgres, "edges_nulls", table, "id IS NOT NULL")
    assert cmp.exact and cmp.table_rows == 10, cmp.describe()
    with pytest.raises(ConfigurationError, match="null_keys 'sometimes'"):
        _source(postgres, "edges_nulls", null_keys="sometimes")


@pytest.mark.spark
def test_rows_with_a_null_key_fail_the_load_when_asked(spark: Any, postgres: Any, table: str) -> None:
    """``null_keys="fail"``: a non-retryable NullKeyError naming the batch and the count,
    nothing committed; once the rows get keys above the frontier, the same run loads."""
    _nullable_orders(postgres, "edges_nulls_fail")
    src = _source(postgres, "edges_nulls_fail", null_keys="fail")
    with pytest.raises(NullKeyError, match=r"2 row\(s\) of edges_nulls_fail have a NULL id") as err:
        _load(spark, postgres, table, src, "r1")
    assert str(err.value).startswith(f"batch {PIPE}/o-00000000-") and not err.value.retryable
    assert _version(table) is None
    postgres.execute("UPDATE edges_nulls_fail SET id = 100 + amount * 4 WHERE id IS NULL")
    result = _load(spark, postgres, table, src, "r1")
    assert (result.outcome, result.rows, result.null_key_rows) == ("committed", 10, 0)
    assert _load(spark, postgres, table, src, "r2").rows == 2
    cmp = check_against_postgres(postgres, "edges_nulls_fail", table)
    assert cmp.exact and cmp.table_rows == 12, cmp.describe()
