"""Adversary tests (third round) for issue 19: restatement removes spelled as the log's adds,
the ask's foreign-marker refusal and its log search, and verify's deletion-vector and
unattributed-delete accounting, attacked with real Delta Spark and delta-rs writes.

Each test asserts the correct behaviour. Those whose docstring says "Reproduced defect"
failed before the fix named there; the others are attacks that held.
"""

from __future__ import annotations

import csv
import json
import os
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.audit.verify import audit_table
from airflow_eod.core.table_ref import TableRef
from airflow_eod.spark.load_job import run_load
from tests.delta_spark.test_delta_spark_engine import pytestmark as delta_spark_tier
from tests.support.delta_spark_helpers import findings as _findings
from tests.support.delta_spark_helpers import load_rows as _load_rows
from tests.support.delta_spark_helpers import log_commit as _commit
from tests.support.delta_spark_helpers import spark_append as _theirs
from tests.support.delta_spark_helpers import spark_ids as _ids
from tests.support.delta_spark_helpers import sql_on as _sql
from tests.support.delta_spark_helpers import write_rows as _write_rows
from tests.support.helpers import check, orders_source, plan_for, restate, spec_for

pytestmark = delta_spark_tier

ORDERS = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"
DV = "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"

# Partition values every writer spells differently: Spark's escapePathName escapes some of
# them in the directory name ('%', '#', '?', ':', '/', '=', '{', '[', ...), the log's URI
# encoding escapes others (' ', '%' again), Delta Spark leaves non-ASCII as it is.
ODD = [
    "a%b",
    "a+b",
    "a#b",
    "a?b",
    "a%20b",
    "é%C3%A9",
    "a=b",
    "a:b",
    "a;b",
    "{x}",
    "[y]",
    "a^b",
    "x/y",
    "a&b!$'()*@~",
    "ü ß 日本",
    "100%",
]


def _write_odd(landing: str, values: list[str], name: str = "orders-odd.csv", first: int = 1) -> None:
    os.makedirs(landing, exist_ok=True)
    with open(os.path.join(landing, name), "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["order_id", "customer", "amount", "order_date", "ordered_at"])
        for i, who in enumerate(values):
            day = i % 27 + 1
            w.writerow(
                [first + i, who, f"{i + 1}.50", f"2026-11-{day:02d}", f"2026-11-{day:02d}T10:00:00.000000Z"]
            )


def _landing_ids(landing: str) -> list[int]:
    ids = []
    for name in sorted(os.listdir(landing)):
        with open(os.path.join(landing, name), newline="") as fh:
            ids += [int(r["order_id"]) for r in csv.DictReader(fh)]
    return sorted(ids)


def _same_for_both(spark: Any, table: str, landing: str) -> None:
    """delta-rs and Delta Spark read the same rows, and both match the landing files (on a
    deletion-vector table, which deltalake cannot read, Delta Spark's rows and the files)."""
    spark.catalog.clearCache()
    sp = sorted(r.order_id for r in spark.read.format("delta").load(table).select("order_id").collect())
    assert sp == _landing_ids(landing), (len(sp), len(_landing_ids(landing)))
    if "deletionVectors" not in (DeltaTable(table).protocol().reader_features or []):
        cmp = check(table, landing)
        assert cmp.exact, cmp.describe()
        got = DeltaTable(table).to_pyarrow_table(columns=["order_id"]).to_pylist()
        assert sorted(r["order_id"] for r in got) == sp
    assert len(DeltaTable(table).file_uris()) == len(spark.read.format("delta").load(table).inputFiles())


# == 1. Restating batches whose partition paths hold odd characters ======================
@pytest.mark.parametrize("first", ["delta-spark", "delta-rs"])
def test_restating_odd_partition_paths(spark: Any, landing: str, table: str, first: str) -> None:
    """A batch partitioned by values with '%', '+', '#', '?', ' ', '=', ':', ';', '/', brackets
    and non-ASCII, loaded by either engine, restated twice with delta-rs: every reader sees
    each row once, and verify is clean."""
    _write_odd(landing, ODD)
    source = orders_source(landing)
    plan = plan_for(source, table)
    got = run_load(spark, spec_for(source, table, plan, engine=first, partition_by=["customer"]))
    assert got.outcome == "committed" and got.rows == len(ODD), got
    _same_for_both(spark, table, landing)
    for gen in (1, 2):
        again = restate(source, table, plan, run=f"restate-{gen}")
        got = run_load(spark, spec_for(source, table, again, restate=True, partition_by=["customer"]))
        assert got.outcome == "committed" and got.generation == gen, got
        _same_for_both(spark, table, landing)
    report = audit_table(table)
    assert report.ok, _findings(report)


# == 2. The ask: a foreign marker above a generation whose record our crash never wrote ====
@pytest.mark.faults
def test_a_foreign_marker_above_a_batch_whose_committer_died_before_its_record(
    spark: Any, landing: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our attempt commits the batch (generation 0) and dies before its record (fault point
    before_record); before the retry, another writer's Delta Spark write uses the batch's
    app id with txnVersion 5. The batch's rows ARE in the table (commit 1 carries its
    manifest): the retry must report already_committed and the ask generation 0, as it does
    when the record had been written.

    Reproduced defect, fixed (WEDGE, with a false claim). Seen: ``ask`` raises ForeignMarkerError
    "the table's marker of this batch (txn appId eod:tests.orders:o-00000001-..., version 5)
    was set by commit 2 (WRITE), which carries no airflow-eod manifest of the batch ... The
    batch's rows are not in the table and nothing was loaded", while commit 1 holds the
    batch's 10 rows and its manifest. ``_ask`` falls back only to the batch's newest *record*
    (``newest``), which the crash never wrote; ``repair_record`` is asked only for the
    marker's generation (5), never for the generations below it that the log holds. Every
    retry, sensor and downstream ask of the batch fails for good; following the runbook
    ("the rows are not in the table") invites loading them again under another id.

    Fix: before blaming another writer, the ask repairs the record of a lower generation
    from the batch's own commit in the log (``own_commit_below``).
    """
    from airflow_eod.core.faults import InjectedFault

    _load_rows(spark, landing, table, [(1, "a")], 1)
    _write_rows(landing, [(i, "b") for i in range(100, 110)], "orders-002.csv")
    source = orders_source(landing)
    plan = plan_for(source, table, run="run-2")
    monkeypatch.setenv("EOD_FAULTPOINTS", "before_record=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, table, plan))
    monkeypatch.delenv("EOD_FAULTPOINTS")
    _theirs(spark, table, [(900_000, "x")], txnAppId=plan.key.app_id, txnVersion="5")
    status = ask(TableRef.parse(table), plan.key)
    assert status.committed_generation == 0 and status.record is not None, status
    got = run_load(spark, spec_for(source, table, plan, try_number=2))
    assert got.outcome == "already_committed", got
    assert [i for i in _ids(spark, table) if 100 <= i < 110] == list(range(100, 110))


# == 3. verify: deletes in files where batch rows and another writer's rows were mixed =====
@pytest.mark.parametrize("props", ["", DV], ids=["plain", "dv"])
def test_a_delete_of_more_rows_than_another_writer_had_in_the_mixed_file(
    spark: Any, landing: str, table: str, props: str
) -> None:
    """OPTIMIZE mixes the batch's 10 rows with another writer's single row into one file; a
    DELETE then removes 6 of the batch's rows from that file. At most one of the deleted rows
    can have been the other writer's: at least 5 batch rows are gone, and verify must report
    an error, not only the warning rows_deleted_unattributed.

    Reproduced defect, fixed (MISSED LOSS), on a plain and a deletion-vector table. Seen:
    ``report.ok`` is True; warnings only: foreign_file (the DELETE's output), batch_file_compacted,
    and rows_deleted_unattributed "the table holds 5 live rows, 6 fewer than its 1 committed
    batches recorded (10) plus other writers' rows (1); other writers' DELETE or MERGE
    (commit(s) 4) deleted at least as many rows from files in which an OPTIMIZE or MERGE had
    mixed batch rows with theirs". ``check_total`` downgrades whenever the shortfall is at most
    the rows the mixed deletes removed; it never bounds the shortfall by the other writers'
    rows that were folded into the mixed files (1 here), so 5 certainly-lost batch rows pass.

    Fix: the allowance is also bounded by the other writers' rows folded into files that
    held batch rows.
    """
    spark.sql(f"CREATE TABLE delta.`{table}` ({ORDERS}) USING delta {props}")
    _load_rows(spark, landing, table, [(i, "a") for i in range(1, 11)], 1)
    _theirs(spark, table, [(900_000, "x")])
    _sql(spark, "OPTIMIZE {t}", table)
    _sql(spark, "DELETE FROM {t} WHERE order_id <= 6", table)
    assert _ids(spark, table) == [7, 8, 9, 10, 900_000]
    report = audit_table(table)
    assert not report.ok, _findings(report)


def test_a_delete_in_an_optimize_output_of_a_partition_no_other_writer_wrote(
    spark: Any, landing: str, table: str
) -> None:
    """A table partitioned by customer. Batches 1 and 2 each write a file in partitions 'p1'
    and 'p2'; another writer appends 5 rows to 'p1' only. One OPTIMIZE compacts each
    partition (OPTIMIZE bins never span partitions): the output in 'p1' mixes batch rows with
    the other writer's, the output in 'p2' holds batch rows only. A DELETE of one batch row
    in 'p2' is a loss of a batch row: verify must report an error.

    Reproduced defect, fixed (MISSED LOSS). Seen: ``report.ok`` is True; warnings only: foreign_file
    (the DELETE's output in p2), compacted_file, batch_file_compacted for both batches, and
    rows_deleted_unattributed "the table holds 10 live rows, 1 fewer than its 2 committed
    batches recorded (6) plus other writers' rows (5); other writers' DELETE or MERGE (commit(s)
    5) deleted at least as many rows from files in which an OPTIMIZE or MERGE had mixed batch
    rows with theirs". ``check_total`` marks every file a folding commit added as mixed
    (``mixed.update(added)``), though the log's partitionValues show the other writer's rows
    (p1) cannot be in the p2 output.

    Fix: an output is mixed only in a partition of an input that held another writer's rows
    (``LogFacts.partitions``).
    """
    spark.sql(f"CREATE TABLE delta.`{table}` ({ORDERS}) USING delta PARTITIONED BY (customer)")
    _load_rows(spark, landing, table, [(1, "p1"), (2, "p2"), (3, "p2")], 1)
    _load_rows(spark, landing, table, [(11, "p1"), (12, "p2"), (13, "p2")], 2)
    _theirs(spark, table, [(900_000 + i, "p1") for i in range(5)])
    assert audit_table(table).ok
    _sql(spark, "OPTIMIZE {t}", table)
    last = [
        json.loads(x)
        for x in open(os.path.join(table, "_delta_log", f"{DeltaTable(table).version():020d}.json"))
    ]
    adds = {a["add"]["partitionValues"]["customer"] for a in last if "add" in a}
    assert adds == {"p1", "p2"}, adds  # the premise: both partitions compacted in one commit
    assert audit_table(table).ok
    _sql(spark, "DELETE FROM {t} WHERE order_id = 12", table)
    report = audit_table(table)
    assert not report.ok, _findings(report)


# == 4. Deletion vectors on files whose paths hold odd characters ===========================
@pytest.mark.parametrize("first", ["delta-spark", "delta-rs"])
def test_deletion_vectors_on_odd_partition_paths_are_seen(
    spark: Any, landing: str, table: str, first: str
) -> None:
    """A deletion-vector table partitioned by the odd values, two rows of the batch in each
    partition; another writer's DELETE hides one row of every batch file with a deletion
    vector. verify must count the hidden rows (an error: batch rows are gone), and a
    restatement must refuse (a remove without the deletion vector removes nothing for Delta
    Spark) rather than leave the old rows live for Delta Spark."""
    from airflow_eod.core.errors import BatchRefusedError

    spark.sql(f"CREATE TABLE delta.`{table}` ({ORDERS}) USING delta PARTITIONED BY (customer) {DV}")
    _write_odd(landing, ODD + ODD)
    source = orders_source(landing)
    plan = plan_for(source, table)
    got = run_load(spark, spec_for(source, table, plan, engine=first, partition_by=["customer"]))
    assert got.outcome == "committed" and got.rows == 2 * len(ODD), got
    _same_for_both(spark, table, landing)
    assert audit_table(table).ok
    _sql(spark, f"DELETE FROM {{t}} WHERE order_id <= {len(ODD)}", table)
    last = _commit(table, DeltaTable(table).version())
    assert sum(1 for a in last if "deletionVector" in a.get("add", {})) == len(ODD), "premise: DVs"
    report = audit_table(table)
    errors = [f for f in report.errors if f.batch_key == plan.key.key]
    assert errors, _findings(report)
    version = DeltaTable(table).version()
    again = restate(source, table, plan, run="restate-dv")
    with pytest.raises(BatchRefusedError, match="deletion"):
        run_load(spark, spec_for(source, table, again, restate=True, partition_by=["customer"]))
    assert DeltaTable(table).version() == version


# == 5. verify after a run of legitimate Delta Spark maintenance and DML ====================
@pytest.mark.parametrize("props", ["", DV], ids=["plain", "dv"])
def test_legitimate_dml_and_maintenance_are_no_false_alarm(
    spark: Any, landing: str, table: str, props: str
) -> None:
    """Two batches, another writer's appends, then (each followed by verify): OPTIMIZE
    ZORDER BY, an UPDATE of a batch row, a MERGE that updates batch rows and inserts rows of
    its own, a DELETE of only the other writer's rows, REORG ... APPLY (PURGE), OPTIMIZE.
    Nothing of a batch was lost or duplicated: verify must report no error at any step."""
    spark.sql(f"CREATE TABLE delta.`{table}` ({ORDERS}) USING delta {props}")
    _load_rows(spark, landing, table, [(i, "a") for i in range(1, 11)], 1)
    _theirs(spark, table, [(900_000 + i, "x") for i in range(4)])
    _load_rows(spark, landing, table, [(i, "b") for i in range(11, 21)], 2)
    _theirs(spark, table, [(910_000 + i, "y") for i in range(4)])
    steps = [
        "OPTIMIZE {t} ZORDER BY (order_id)",
        "UPDATE {t} SET customer = 'changed' WHERE order_id = 3",
        "MERGE INTO {t} AS t USING (SELECT 5 AS order_id UNION ALL SELECT 15 UNION ALL SELECT 777777) AS s "
        "ON t.order_id = s.order_id WHEN MATCHED THEN UPDATE SET amount = 9.99 "
        "WHEN NOT MATCHED THEN INSERT (order_id, customer, amount, order_date, ordered_at) "
        "VALUES (s.order_id, 'new', 1.00, DATE'2026-11-01', TIMESTAMP'2026-11-01 00:00:00')",
        "DELETE FROM {t} WHERE order_id IN (900001, 910002)",
        "REORG TABLE {t} APPLY (PURGE)",
        "OPTIMIZE {t}",
    ]
    seen = []
    for step in steps:
        _sql(spark, step, table)
        report = audit_table(table)
        seen.append((step.split()[0], [f"{f.kind}:{f.message[:200]}" for f in report.errors]))
    assert all(not errors for _, errors in seen), seen
    ids = _ids(spark, table)
    assert [i for i in ids if i < 777_777] == list(range(1, 21)), ids


def _checkpoint(spark: Any, table: str, by: str) -> None:
    """A checkpoint of the table's newest version, written by deltalake or by Delta Spark."""
    if by == "delta-rs":
        DeltaTable(table).create_checkpoint()
    else:
        _sql(spark, "ALTER TABLE {t} SET TBLPROPERTIES ('delta.checkpointInterval' = '1')", table)
    v = DeltaTable(table).version()
    names = os.listdir(os.path.join(table, "_delta_log"))
    assert any(n.startswith(f"{v:020d}.checkpoint") for n in names), (v, sorted(names))


# == 6. Restating odd paths read back from a checkpoint of the other engine ================
@pytest.mark.parametrize(
    ("first", "checkpointer"), [("delta-spark", "delta-rs"), ("delta-rs", "delta-spark")]
)
def test_restating_odd_paths_after_a_checkpoint(
    spark: Any, landing: str, table: str, first: str, checkpointer: str
) -> None:
    """The batch's files (odd partition values) are read back from a checkpoint the other
    engine wrote, before each of two restatements: each remove must still match its add for
    both engines (a path re-spelled by a checkpoint would leave the old generation live)."""
    _write_odd(landing, ODD)
    source = orders_source(landing)
    plan = plan_for(source, table)
    got = run_load(spark, spec_for(source, table, plan, engine=first, partition_by=["customer"]))
    assert got.outcome == "committed", got
    for gen in (1, 2):
        _checkpoint(spark, table, checkpointer)
        again = restate(source, table, plan, run=f"restate-{gen}")
        got = run_load(spark, spec_for(source, table, again, restate=True, partition_by=["customer"]))
        assert got.outcome == "committed" and got.generation == gen, got
        _same_for_both(spark, table, landing)
    _checkpoint(spark, table, checkpointer)
    _same_for_both(spark, table, landing)
    report = audit_table(table)
    assert report.ok, _findings(report)


# == 8. A marker set again by another writer, then a log cleanup of our commit =============
@pytest.mark.faults
def test_a_marker_set_again_by_another_writer_then_our_commit_cleaned_from_the_log(
    spark: Any, landing: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our attempt commits batch 2 (generation 0, commit 1) and dies before its record;
    another writer (delta-rs, which does not skip a known txn version) appends with the same
    txn (appId, 0) (commit 2); a checkpoint at commit 2, and a log cleanup removes commits 0
    and 1 (older than the log retention; commit 2 is not). The batch's files are live in the
    checkpoint: the retry must report already_committed, not refuse the batch as foreign.

    Reproduced defect, fixed (WEDGE, with a false claim). Seen: ``ask`` raises ForeignMarkerError
    "... version 0) was set by commit 2 (WRITE), which carries no airflow-eod manifest of the
    batch ... The batch's rows are not in the table and nothing was loaded", while the
    checkpoint holds the batch's 10 rows. ``find_commit`` stops at the first commit file the
    cleanup removed, ``foreign_marker`` finds the other writer's commit still in the log and
    blames it; nothing looks at whether the table holds the batch's own staged files (what
    ``checkpoint_holds`` tells for a commit at or below the checkpoint).

    Fix: the ask answers for the generation whose staged files the checkpoint holds
    (``checkpoint_paths_under``).
    """
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake

    from airflow_eod.core.faults import InjectedFault

    _load_rows(spark, landing, table, [(1, "a")], 1)
    _write_rows(landing, [(i, "b") for i in range(100, 110)], "orders-002.csv")
    source = orders_source(landing)
    plan = plan_for(source, table, run="run-2")
    monkeypatch.setenv("EOD_FAULTPOINTS", "before_record=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, table, plan))
    monkeypatch.delenv("EOD_FAULTPOINTS")
    ours = DeltaTable(table).version()
    schema = DeltaTable(table).schema().to_arrow()
    write_deltalake(
        table,
        pa.Table.from_pylist([], schema=pa.schema(schema)),
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction(plan.key.app_id, 0)]),
    )
    DeltaTable(table).create_checkpoint()
    log_dir = os.path.join(table, "_delta_log")
    for v in range(ours + 1):  # what a log cleanup leaves when commits 0..ours expired
        os.unlink(os.path.join(log_dir, f"{v:020d}.json"))
    assert [i for i in _ids(spark, table) if 100 <= i < 110] == list(range(100, 110))
    status = ask(TableRef.parse(table), plan.key)
    assert status.committed_generation == 0, status
    got = run_load(spark, spec_for(source, table, plan, try_number=2))
    assert got.outcome == "already_committed", got
    assert [i for i in _ids(spark, table) if 100 <= i < 110] == list(range(100, 110))
