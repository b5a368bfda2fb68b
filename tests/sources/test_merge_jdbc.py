"""Merge loads from PostgreSQL through the JDBC source (issue 22): a table whose rows are
inserted, updated and soft-deleted (sliced by ``updated_at``), and a change log sliced by its
log sequence number. Real PostgreSQL, real Spark, real Delta tables; every step ends with the
table compared row by row with PostgreSQL's newest row per key
(:func:`tests.support.merge_pg.check_merge_with_postgres`)."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.errors import InputChangedError, MalformedInputError
from airflow_eod.core.load_flow import FrozenBatch, LoadRequest, load_batch
from airflow_eod.core.result import LoadResult
from airflow_eod.core.table_ref import TableRef
from airflow_eod.runners.local import local_run
from airflow_eod.sources import Credentials, JdbcIncrementalSource, ReadContext
from airflow_eod.spark.load_spec import LoadSettings
from tests.support.merge_pg import check_merge_with_postgres

pytestmark = [pytest.mark.merge, pytest.mark.jdbc, pytest.mark.spark]

T0 = dt.datetime(2026, 11, 2, 8, 0, 0)
ITEM_COLUMNS = ["id", "name", "qty", "price", "deleted", "updated_at"]
LOG_COLUMNS = ["lsn", "op", "id", "name", "amount"]


def _creds(pg: Any) -> Credentials:
    return Credentials(pg.user, pg.password)


def _load(
    spark: Any,
    pg: Any,
    table: str,
    source: JdbcIncrementalSource,
    token: str,
    settings: LoadSettings,
    *,
    pipeline: str,
    restate_key: str | None = None,
    transform: Callable[[Any], Any] | None = None,
    run: Callable[[FrozenBatch], LoadResult] | None = None,
) -> LoadResult:
    """Plan, ask and load one batch as the operators do (the flow without Airflow)."""
    ref = TableRef.parse(table)
    request = LoadRequest(
        ref, pipeline, token, restate=restate_key is not None, restate_batch_key=restate_key
    )
    ctx = ReadContext(spark_factory=lambda: spark, credentials=_creds(pg))
    runner = run or local_run(
        lambda: spark, ref, source, settings=settings, transform_fn=transform, credentials=_creds(pg)
    )
    return load_batch(request, source, ctx, run=runner)


def _version(table: str) -> int | None:
    return DeltaTable(table).version() if os.path.isdir(os.path.join(table, "_delta_log")) else None


def _operation(table: str, version: int) -> dict[str, Any]:
    path = os.path.join(table, "_delta_log", f"{version:020d}.json")
    actions = [json.loads(line) for line in open(path)]
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    kinds = [next(iter(a)) for a in actions]
    return {"operation": info.get("operation"), "removes": kinds.count("remove"), "txn": kinds.count("txn")}


# -- (a) a table with updated_at: inserted, updated, soft-deleted ---------------------------
ITEMS = LoadSettings(
    run_id="r",
    write_mode="merge",
    merge_keys=("id",),
    order_by="updated_at",
    delete_when="deleted",
)


def _items_table(pg: Any, name: str) -> JdbcIncrementalSource:
    pg.execute(
        f"CREATE TABLE {name} (id bigint PRIMARY KEY, name text NOT NULL, qty int, "
        "price numeric(10,2), deleted boolean NOT NULL DEFAULT false, updated_at timestamp NOT NULL)"
    )
    return JdbcIncrementalSource(url=pg.jdbc_url, table=name, key_column="updated_at", key_type="timestamp")


def _insert_items(pg: Any, name: str, ids: range, at: dt.datetime) -> None:
    pg.execute(
        f"INSERT INTO {name} (id, name, qty, price, updated_at) VALUES (%s, %s, %s, %s, %s)",
        [(i, f"item {i}", i % 9, Decimal(i) / 4, at + dt.timedelta(milliseconds=i)) for i in ids],
        many=True,
    )


def _check_items(pg: Any, name: str, table: str, *, tombstones: bool = True) -> None:
    got = check_merge_with_postgres(
        pg,
        name,
        table,
        keys=["id"],
        order_by="updated_at",
        columns=ITEM_COLUMNS,
        is_delete=lambda r: r["deleted"],
        tombstones=tombstones,
    )
    assert got.ok, got.describe()


def test_inserts_updates_and_soft_deletes_by_updated_at_end_as_postgres_rows(
    spark: Any, postgres: Any, table: str
) -> None:
    """Each step of the source's life is one offset batch of ``updated_at``: an update moves
    its row above the frontier, so the next batch carries it, and the merge replaces the
    row instead of adding one (the pilot's 5 extra rows); a soft delete stays as its
    tombstone, the row as PostgreSQL holds it."""
    name = "merge_items"
    src = _items_table(postgres, name)
    pipe = "tests.merge_items"
    _insert_items(postgres, name, range(1, 41), T0)
    first = _load(spark, postgres, table, src, "r1", ITEMS, pipeline=pipe)
    assert (first.outcome, first.rows) == ("committed", 40)
    _check_items(postgres, name, table)

    # Updates of 10 loaded rows (one of them twice: PostgreSQL holds only the last), and new rows.
    t1 = T0 + dt.timedelta(hours=1)
    postgres.execute(
        f"UPDATE {name} SET qty = qty + 100, price = price * 2, updated_at = %s + id * INTERVAL '1 ms' "
        "WHERE id BETWEEN 11 AND 20",
        (t1,),
    )
    postgres.execute(
        f"UPDATE {name} SET name = 'renamed', updated_at = %s WHERE id = 15", (t1 + dt.timedelta(1),)
    )
    _insert_items(postgres, name, range(41, 46), t1)
    second = _load(spark, postgres, table, src, "r2", ITEMS, pipeline=pipe)
    assert (second.outcome, second.rows) == ("committed", 15)
    assert len(DeltaTable(table).to_pyarrow_table()) == 45, "updates replace rows, they add none"
    _check_items(postgres, name, table)
    commit = _operation(table, second.table_version)
    assert commit["operation"] == "MERGE" and commit["removes"] >= 1 and commit["txn"] == 1

    # Soft deletes (the application sets deleted and updated_at), an update, an insert.
    t2 = t1 + dt.timedelta(days=2)
    postgres.execute(
        f"UPDATE {name} SET deleted = true, updated_at = %s + id * INTERVAL '1 ms' "
        "WHERE id IN (2, 12, 15, 33, 41)",
        (t2,),
    )
    postgres.execute(f"UPDATE {name} SET qty = 0, updated_at = %s WHERE id = 3", (t2,))
    _insert_items(postgres, name, range(46, 48), t2)
    third = _load(spark, postgres, table, src, "r3", ITEMS, pipeline=pipe)
    assert (third.outcome, third.rows) == ("committed", 8)
    _check_items(postgres, name, table)
    live = [r["id"] for r in DeltaTable(table).to_pyarrow_table().to_pylist() if not r["deleted"]]
    assert sorted(live) == [
        r[0] for r in postgres.rows(f"SELECT id FROM {name} WHERE NOT deleted ORDER BY id")
    ]

    # A retry of the last run writes nothing, and a run with nothing new plans nothing.
    again = _load(spark, postgres, table, src, "r3", ITEMS, pipeline=pipe)
    assert (again.outcome, again.table_version) == ("already_committed", third.table_version)
    assert _load(spark, postgres, table, src, "r4", ITEMS, pipeline=pipe).outcome == "no_new_data"
    assert _version(table) == third.table_version
    _check_items(postgres, name, table)


def test_a_row_updated_after_planning_fails_the_merge_and_a_refreeze_loads_it(
    spark: Any, postgres: Any, table: str
) -> None:
    """I3 on the merge path, as on the append path: an UPDATE between planning and the read
    moves a row out of the frozen ``updated_at`` range, and the batch fails loudly with
    nothing committed (every retry too). The documented way out, a re-freeze, loads the
    range as it is now; the next batch brings the updated row, and the table ends as
    PostgreSQL's rows."""
    name = "merge_items_i3"
    src = _items_table(postgres, name)
    pipe = "tests.merge_items_i3"
    _insert_items(postgres, name, range(1, 21), T0)
    assert _load(spark, postgres, table, src, "r1", ITEMS, pipeline=pipe).outcome == "committed"
    _insert_items(postgres, name, range(21, 31), T0 + dt.timedelta(hours=1))
    before = _version(table)
    local = local_run(lambda: spark, TableRef.parse(table), src, settings=ITEMS, credentials=_creds(postgres))
    frozen: list[str] = []

    def update_then_load(batch: FrozenBatch) -> LoadResult:
        frozen.append(batch.plan.batch_key)
        postgres.execute(
            f"UPDATE {name} SET qty = -1, updated_at = %s WHERE id = 25", (T0 + dt.timedelta(hours=2),)
        )
        return local(batch)

    with pytest.raises(InputChangedError, match="held 10 rows when planned and holds 9 now") as err:
        _load(spark, postgres, table, src, "r2", ITEMS, pipeline=pipe, run=update_then_load)
    assert frozen[0] in str(err.value) and "eod_restate" in str(err.value)
    assert _version(table) == before, "nothing committed"
    with pytest.raises(InputChangedError):  # the retry reads the same frozen plan
        _load(spark, postgres, table, src, "r2", ITEMS, pipeline=pipe)
    assert _version(table) == before

    # An update during the read, after Spark read the rows (a transform runs then): the
    # check before the merge's commit fails it.
    def update_while_reading(df: Any) -> Any:
        postgres.execute(f"UPDATE {name} SET name = 'changed under the read' WHERE id = 22")
        return df

    with pytest.raises(InputChangedError, match="content changed since"):
        _load(
            spark,
            postgres,
            table,
            src,
            "r2-refreeze",
            ITEMS,
            pipeline=pipe,
            restate_key=frozen[0],
            transform=update_while_reading,
        )
    assert _version(table) == before
    refrozen = _load(
        spark, postgres, table, src, "r2-refreeze-2", ITEMS, pipeline=pipe, restate_key=frozen[0]
    )
    assert (refrozen.outcome, refrozen.rows, refrozen.generation) == ("committed", 9, 2)
    nxt = _load(spark, postgres, table, src, "r3", ITEMS, pipeline=pipe)
    assert (nxt.outcome, nxt.rows) == ("committed", 1)
    _check_items(postgres, name, table)


# -- (b) a change log, loaded by its log sequence number ------------------------------------
LOG = LoadSettings(
    run_id="r",
    write_mode="merge",
    merge_keys=("id",),
    order_by="lsn",
    delete_when="op = 'D'",
    keep_tombstones=False,
)
Change = tuple[str, int, str | None, Decimal | None]  # op, id, name, amount


def _log_table(pg: Any, name: str, **kw: Any) -> JdbcIncrementalSource:
    pg.execute(
        f"CREATE TABLE {name} (lsn bigserial PRIMARY KEY, op char(1) NOT NULL, id bigint, "
        "name text, amount numeric(10,2), changed_at timestamp)"
    )
    return JdbcIncrementalSource(url=pg.jdbc_url, table=name, key_column="lsn", **kw)


def _append(pg: Any, name: str, changes: list[Change]) -> None:
    """Changes in this order: each gets the next lsn."""
    for change in changes:
        pg.execute(f"INSERT INTO {name} (op, id, name, amount) VALUES (%s, %s, %s, %s)", change)


def _check_log(pg: Any, name: str, table: str, *, tombstones: bool = False) -> None:
    got = check_merge_with_postgres(
        pg,
        name,
        table,
        keys=["id"],
        order_by="lsn",
        columns=LOG_COLUMNS,
        is_delete=lambda r: r["op"] == "D",
        tombstones=tombstones,
    )
    assert got.ok, got.describe()


def _u(i: int, tag: str) -> Change:
    return ("U", i, f"{tag}{i}", Decimal(i) + Decimal("0.5"))


def test_a_change_log_merges_many_changes_of_a_key_per_batch_newest_wins(
    spark: Any, postgres: Any, table: str
) -> None:
    """A CDC log ``(lsn, op, id, ...)``: within a batch several changes of one key (the
    greatest lsn wins, whatever the read's partitioning), updates of rows an earlier batch
    loaded, deletes (gone: ``keep_tombstones=False``), a key deleted then inserted again."""
    name = "merge_changes"
    src = _log_table(postgres, name, num_partitions=3)
    pipe = "tests.merge_changes"
    batch1: list[Change] = [("I", i, f"n{i}", Decimal(i)) for i in range(1, 21)]
    batch1 += [
        _u(3, "a"),
        _u(3, "b"),
        ("D", 5, None, None),
        ("I", 21, "n21", Decimal(21)),
        ("D", 21, None, None),
    ]
    batch1 += [_u(7, "x"), ("D", 7, None, None), ("I", 7, "back7", Decimal(70))]
    _append(postgres, name, batch1)
    r1 = _load(spark, postgres, table, src, "r1", LOG, pipeline=pipe)
    assert (r1.outcome, r1.rows) == ("committed", 21), "one row per key of the batch"
    _check_log(postgres, name, table)
    assert len(DeltaTable(table).to_pyarrow_table()) == 19  # 1..21 without 5 and 21: deleted

    batch2: list[Change] = [_u(1, "c"), _u(2, "c"), ("D", 4, None, None), ("I", 5, "again5", Decimal(5))]
    batch2 += [_u(6, "d"), _u(6, "e"), ("D", 6, None, None), _u(8, "f"), ("I", 22, "n22", Decimal(22))]
    _append(postgres, name, batch2)
    r2 = _load(spark, postgres, table, src, "r2", LOG, pipeline=pipe)
    assert (r2.outcome, r2.rows) == ("committed", 7)
    _check_log(postgres, name, table)

    batch3: list[Change] = [("D", 4, None, None), ("I", 4, "new4", Decimal(4)), _u(21, "late")]
    batch3 += [_u(i, "g") for i in range(10, 16)] + [("D", 22, None, None)]
    _append(postgres, name, batch3)
    r3 = _load(spark, postgres, table, src, "r3", LOG, pipeline=pipe)
    assert (r3.outcome, r3.rows) == ("committed", 9)
    _check_log(postgres, name, table)
    assert _operation(table, r3.table_version)["operation"] == "MERGE"
    again = _load(spark, postgres, table, src, "r2", LOG, pipeline=pipe)
    assert (again.outcome, again.table_version) == ("already_committed", r2.table_version)
    _check_log(postgres, name, table)


def test_changes_appended_after_planning_wait_and_an_in_place_edit_fails_the_batch(
    spark: Any, postgres: Any, table: str
) -> None:
    """A change log only grows: changes written after planning have greater lsns, so the
    frozen batch stays as planned and the next batch carries them (the newer change of a
    key then wins over the one just merged). An edit of a frozen log row while Spark reads
    the batch fails it before its commit (I3), with nothing committed."""
    name = "merge_changes_i3"
    src = _log_table(postgres, name)
    pipe = "tests.merge_changes_i3"
    _append(postgres, name, [("I", i, f"n{i}", Decimal(i)) for i in range(1, 11)])
    local = local_run(lambda: spark, TableRef.parse(table), src, settings=LOG, credentials=_creds(postgres))

    def more_changes_then_load(batch: FrozenBatch) -> LoadResult:
        _append(postgres, name, [_u(3, "later"), ("D", 4, None, None), ("I", 11, "n11", Decimal(11))])
        return local(batch)

    r1 = _load(spark, postgres, table, src, "r1", LOG, pipeline=pipe, run=more_changes_then_load)
    assert (r1.outcome, r1.rows) == ("committed", 10), "the batch is the range frozen at planning"
    rows = {r["id"]: r for r in DeltaTable(table).to_pyarrow_table().to_pylist()}
    assert rows[3]["name"] == "n3" and 4 in rows
    r2 = _load(spark, postgres, table, src, "r2", LOG, pipeline=pipe)
    assert (r2.outcome, r2.rows) == ("committed", 3)
    _check_log(postgres, name, table)

    _append(postgres, name, [_u(1, "m"), _u(2, "m")])

    def edit_while_reading(df: Any) -> Any:
        postgres.execute(f"UPDATE {name} SET amount = 0 WHERE id = 2 AND name = 'm2'")
        return df

    before = _version(table)
    with pytest.raises(InputChangedError, match="content changed since"):
        _load(spark, postgres, table, src, "r3", LOG, pipeline=pipe, transform=edit_while_reading)
    assert _version(table) == before


# -- null keys and ordering values -----------------------------------------------------------
def test_a_null_key_or_ordering_value_is_refused_naming_the_batch(
    spark: Any, postgres: Any, table: str
) -> None:
    """Which row of a key is newest cannot be decided for a row whose key or ordering value
    is NULL: the batch is refused (an error no retry fixes) with nothing committed, naming
    the batch, the columns and the ways out; the source fixed and the batch re-frozen, it loads."""
    name = "merge_changes_nulls"
    src = _log_table(postgres, name)
    pipe = "tests.merge_nulls"
    by_time = LoadSettings(
        run_id="r", write_mode="merge", merge_keys=("id",), order_by="changed_at", delete_when="op = 'D'"
    )
    postgres.execute(
        f"INSERT INTO {name} (op, id, name, changed_at) SELECT 'I', i, 'n' || i, "
        "TIMESTAMP '2026-11-02 08:00' + i * INTERVAL '1 minute' FROM generate_series(1, 8) i"
    )
    postgres.execute(f"INSERT INTO {name} (op, id, name, changed_at) VALUES ('U', NULL, 'who?', now())")
    with pytest.raises(
        MalformedInputError, match=r"1 row\(s\) of the batch have a null in id, changed_at"
    ) as err:
        _load(spark, postgres, table, src, "r1", by_time, pipeline=pipe)
    batch_key = err.value.batch.split("/")[-1] if err.value.batch else ""
    assert str(err.value).startswith(f"batch {pipe}/o-") and not err.value.retryable
    assert "eod_restate" in str(err.value), "the way out: fix the source, then re-freeze the batch"
    assert _version(table) is None

    postgres.execute(f"UPDATE {name} SET id = 9 WHERE id IS NULL")
    r1 = _load(spark, postgres, table, src, "r1-refreeze", by_time, pipeline=pipe, restate_key=batch_key)
    assert (r1.outcome, r1.rows) == ("committed", 9)

    postgres.execute(f"INSERT INTO {name} (op, id, name, changed_at) VALUES ('U', 4, 'when?', NULL)")
    with pytest.raises(MalformedInputError, match="null in id, changed_at"):
        _load(spark, postgres, table, src, "r2", by_time, pipeline=pipe)
    assert _version(table) == r1.table_version
    got = check_merge_with_postgres(
        postgres,
        f"(SELECT * FROM {name} WHERE changed_at IS NOT NULL) loaded",
        table,
        keys=["id"],
        order_by="changed_at",
        columns=LOG_COLUMNS,
    )
    assert got.ok, got.describe()
