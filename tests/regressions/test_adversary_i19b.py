"""Adversary tests (second round) for issue 19: the audit's deletion-vector rewrites, the
foreign-marker refusal and the unattributed deletes in mixed files, attacked with real Delta
Spark (and delta-rs) writes as the other writer.

Each test asserts the correct behaviour. Eight reproduced defects (their docstrings say what
was seen), all fixed since; the others are attacks that held.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.audit.verify import audit_table
from airflow_eod.core.errors import ForeignMarkerError
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.spark.load_job import run_load
from tests.delta_spark.test_delta_spark_engine import pytestmark as delta_spark_tier
from tests.regressions.test_adversary_i19 import MERGE_DELETING_1003_INSERTING_ONE
from tests.support.delta_spark_helpers import findings as _findings
from tests.support.delta_spark_helpers import log_commit as _commit
from tests.support.delta_spark_helpers import spark_ids as _ids
from tests.support.delta_spark_helpers import sql_on as _sql
from tests.support.helpers import check, orders_source, plan_for, spec_for

pytestmark = delta_spark_tier

ORDERS = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"
DV = "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"


def _create(spark: Any, table: str, props: str = DV) -> None:
    spark.sql(f"CREATE TABLE delta.`{table}` ({ORDERS}) USING delta {props}")


def _load(spark: Any, landing: str, table: str, n: int, files: int = 1, rows: int = 10, **kw: Any) -> Any:
    write_order_files(landing, files, rows, first_id=n * 1000)
    source = orders_source(landing)
    plan = plan_for(source, table, run=f"run-{n}")
    got = run_load(spark, spec_for(source, table, plan, **kw))
    assert got.outcome == "committed", got
    return plan


def _theirs(spark: Any, tmp: Any, table: str, first_id: int, rows: int = 5, **options: str) -> None:
    """Another writer's Delta Spark append of ``rows`` rows (ids from ``first_id``), one file."""
    where = str(tmp / f"theirs-{first_id}")
    write_order_files(where, 1, rows, first_id=first_id, seed=99)
    df = spark.read.csv(where, header=True, schema=ORDERS).coalesce(1)
    writer = df.write.format("delta").mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save(table)


def _last(table: str) -> list[dict[str, Any]]:
    return _commit(table, DeltaTable(table).version())


def _dv_in_place(actions: list[dict[str, Any]]) -> set[str]:
    removed = {a["remove"]["path"] for a in actions if "remove" in a}
    return {a["add"]["path"] for a in actions if "add" in a and "deletionVector" in a["add"]} & removed


# == A. Deletion vectors ===================================================================
def test_dv_update_of_a_batch_row_and_another_writers_row_is_no_false_alarm(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    """One UPDATE (deletion vectors) that changes a batch row and a row of another writer's
    file in the same statement: both files stay live with a deletion vector, the two new
    values go to a new file. Nothing was lost or duplicated: verify must pass.

    Reproduced defect (false alarm). Seen: error row_total_mismatch "the table holds 15 live
    rows, but its 1 committed batches recorded 10 and other writers' files hold 0: 5 rows more".
    check_total puts every non-eod_data file the UPDATE added into ``carrier`` before it
    looks for folded files; the other writer's file, removed and re-added in place with a
    deletion vector, is then neither counted as theirs nor folded."""
    _create(spark, table)
    plan = _load(spark, landing, table, 1)
    _theirs(spark, tmp_path, table, 900_000)
    assert audit_table(table).ok
    _sql(spark, "UPDATE {t} SET customer = 'changed' WHERE order_id IN (1003, 900002)", table)
    assert len(_dv_in_place(_last(table))) == 2, "the premise: both files kept in place with a DV"
    assert _ids(spark, table) == [*range(1000, 1010), *range(900_000, 900_005)]
    report = audit_table(table)
    assert report.ok, _findings(report)
    assert plan.key.key in {f.batch_key for f in report.warnings if f.kind == "batch_file_rewritten"}


def test_dv_loss_is_not_hidden_by_an_update_spanning_another_writers_file(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    """A real loss: Delta Spark DELETEs 5 of the batch's 10 rows (deletion vector) and REORG
    PURGE rewrites the file (dataChange=false), so only the table-wide count can see it. Then
    another writer appends 5 rows and one UPDATE (deletion vectors) changes a batch row and
    one of those rows. 5 batch rows are gone: verify must report an error.

    Reproduced defect (MISSED LOSS). Seen: ``report.ok`` is True (warnings only:
    batch_file_compacted, batch_file_rewritten, foreign_file); before the UPDATE the same
    table gave row_total_mismatch. The 5 rows of the other writer's file that the UPDATE kept
    in place (deletion vector) are swallowed into the batch rows (same cause as the test
    above) and balance the 5 lost batch rows."""
    _create(spark, table)
    _load(spark, landing, table, 1)
    _sql(spark, "DELETE FROM {t} WHERE order_id < 1005", table)
    _sql(spark, "REORG TABLE {t} APPLY (PURGE)", table)
    assert not audit_table(table).ok  # the loss is seen here
    _theirs(spark, tmp_path, table, 900_000)
    _sql(spark, "UPDATE {t} SET customer = 'changed' WHERE order_id IN (1007, 900002)", table)
    assert len(_dv_in_place(_last(table))) == 2, "the premise: both files kept in place with a DV"
    assert _ids(spark, table) == [*range(1005, 1010), *range(900_000, 900_005)]
    report = audit_table(table)
    assert not report.ok, _findings(report)


def test_two_dv_updates_that_end_up_rewriting_the_whole_file_are_no_false_alarm(
    spark: Any, landing: str, table: str
) -> None:
    """A DV UPDATE of one batch row (the file stays live with a deletion vector), then an
    UPDATE of every row of the batch: the file, its deletion vector in the remove action,
    leaves the table and its 9 remaining rows go to a new file. Every row was kept: verify must
    not report an error (a rewrite is a warning).

    Reproduced defect (false alarm). Seen: error batch_file_not_live "1 of its 1 file(s) are
    not live ... removed by commit 3 (UPDATE)". ``_kept_rows`` takes the removed file's input
    rows from its add's numRecords (10) and ignores the deletion vector the remove carries
    (1 row hidden by the first UPDATE), so 10 in != 9 out and the UPDATE counts as a loss."""
    _create(spark, table)
    plan = _load(spark, landing, table, 1)
    _sql(spark, "UPDATE {t} SET customer = 'once' WHERE order_id = 1003", table)
    _sql(spark, "UPDATE {t} SET customer = 'twice' WHERE order_id < 2000", table)
    actions = _last(table)
    assert any("deletionVector" in a.get("remove", {}) for a in actions), actions
    assert _ids(spark, table) == list(range(1000, 1010))
    report = audit_table(table)
    assert report.ok, _findings(report)
    assert plan.key.key in {f.batch_key for f in report.warnings}


# == B. Foreign markers ====================================================================
def test_a_foreign_marker_below_a_checkpoint_is_still_refused(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    """Another writer's Delta Spark write with the batch's app id (txnAppId/txnVersion 0),
    and then a checkpoint (Delta Spark writes one every checkpointInterval commits; here the
    other writer's next append). The commit that set the marker is still in the log. The
    batch's rows were never loaded: the load must not say already_committed (a loss), it must
    be refused with ForeignMarkerError, and verify must report an error for the batch.

    Reproduced defect (foreign marker gets through). Seen: DID NOT RAISE ForeignMarkerError.
    ``foreign_marker`` only looks at ``marker_commit`` (markers set after the newest
    checkpoint); once a checkpoint holds the marker it returns None even though the commit
    that set it (with no manifest) is still in the log, and the marker is taken as the
    batch's. With Delta Spark's default checkpointInterval of 10, one foreign write in ten
    lands on a checkpoint version itself."""
    _load(spark, landing, table, 1)
    _sql(spark, "ALTER TABLE {t} SET TBLPROPERTIES ('delta.checkpointInterval' = '2')", table)
    write_order_files(landing, 1, 10, first_id=2000)
    source = orders_source(landing)
    plan = plan_for(source, table, run="run-2")
    _theirs(spark, tmp_path, table, 900_000, txnAppId=plan.key.app_id, txnVersion="0")
    foreign = DeltaTable(table).version()
    _theirs(spark, tmp_path, table, 910_000)
    _theirs(spark, tmp_path, table, 920_000)
    names = os.listdir(os.path.join(table, "_delta_log"))
    assert any(".checkpoint." in n and int(n[:20]) >= foreign for n in names), names
    assert f"{foreign:020d}.json" in names  # the commit that set it is still there
    with pytest.raises(ForeignMarkerError):
        run_load(spark, spec_for(source, table, plan))
    assert 2000 not in _ids(spark, table)
    report = audit_table(table)
    assert plan.key.key in {f.batch_key for f in report.errors}, _findings(report)


def test_a_foreign_marker_above_the_committed_generation(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    """The batch was loaded (generation 0, rows and record in place); then another writer's
    Delta Spark write uses its app id with txnVersion 5. The batch's rows ARE in the table:
    the ask must not say they are not. verify must report the foreign marker as an error.

    Reproduced defect (wrong refusal). Seen: ``ask`` raises ForeignMarkerError "the table's
    marker of this batch (..., version 5) was set by commit 1 (WRITE) ... The batch's rows are
    not in the table and nothing was loaded", while generation 0 is in the table with its
    record: a sensor or a downstream ask of a loaded batch now fails for good, and the
    error's claim is false."""
    plan = _load(spark, landing, table, 1)
    _theirs(spark, tmp_path, table, 900_000, txnAppId=plan.key.app_id, txnVersion="5")
    try:
        status = ask(TableRef.parse(table), plan.key)
    except ForeignMarkerError as exc:
        assert "not in the table" not in str(exc), str(exc)
    else:
        assert status.committed_generation == 0 and status.record is not None, status
    report = audit_table(table)
    assert plan.key.key in {f.batch_key for f in report.errors}, _findings(report)


def test_our_delta_spark_commit_with_commit_info_disabled_is_not_called_foreign(
    spark: Any, landing: str, table: str
) -> None:
    """A session with spark.databricks.delta.commitInfo.enabled=false (Delta Spark then
    writes no commitInfo, so no userMetadata): the delta-spark engine's own commit carries no
    manifest. The load must not end in ForeignMarkerError ("another writer used this
    pipeline's app id") after committing the batch itself: either it refuses before writing,
    naming the setting, or the batch counts as loaded.

    Held (seen): Delta 4.4 writes commitInfo (with userMetadata) even with the setting false,
    so the load commits and the ask finds the manifest."""
    _load(spark, landing, table, 1)
    key = "spark.databricks.delta.commitInfo.enabled"
    spark.conf.set(key, "false")
    try:
        write_order_files(landing, 1, 10, first_id=2000)
        source = orders_source(landing)
        plan = plan_for(source, table, run="run-2")
        try:
            got = run_load(spark, spec_for(source, table, plan, engine="delta-spark"))
        except ForeignMarkerError as exc:
            pytest.fail(f"our own commit called foreign: {exc}; rows in table: {2000 in _ids(spark, table)}")
        except Exception as exc:  # a refusal before the write is fine
            assert 2000 not in _ids(spark, table), exc
            return
    finally:
        spark.conf.unset(key)
    assert got.outcome == "committed", got
    cmp = check(table, landing)
    assert cmp.exact, cmp.describe()
    assert audit_table(table).ok


@pytest.mark.faults
def test_a_marker_reset_by_another_writer_after_our_crash_before_the_record(
    spark: Any, landing: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Our attempt commits the batch (generation 0) and dies before its record; another
    writer (delta-rs, which does not skip a known txn version) then appends its own rows with
    the same txn (appId, 0). The batch's rows are in the table: the retry must report
    already_committed, not ForeignMarkerError.

    Reproduced defect (false ForeignMarkerError, wedges the pipeline). Seen: the retry
    raises ForeignMarkerError "... version 0) was set by commit 2 (WRITE)" although commit 1
    carries our manifest and the rows. ``find_commit`` only tries ``marker_commit`` (the
    newest commit that set the marker: the other writer's) and never the earlier commit of
    the batch, so ``repair_record`` finds nothing and ``foreign_marker`` blames commit 2."""
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake

    from airflow_eod.core.faults import InjectedFault

    _load(spark, landing, table, 1)
    write_order_files(landing, 1, 10, first_id=2000)
    source = orders_source(landing)
    plan = plan_for(source, table, run="run-2")
    monkeypatch.setenv("EOD_FAULTPOINTS", "before_record=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, table, plan))
    monkeypatch.delenv("EOD_FAULTPOINTS")
    schema = DeltaTable(table).schema().to_arrow()
    empty = pa.Table.from_pylist([], schema=pa.schema(schema))
    write_deltalake(
        table,
        empty,
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction(plan.key.app_id, 0)]),
    )
    got = run_load(spark, spec_for(source, table, plan, try_number=2))
    assert got.outcome == "already_committed", got
    cmp = check(table, landing)
    assert cmp.exact, cmp.describe()


# == C. Deletes in rewritten / mixed files =================================================
def test_merge_deleting_a_batch_row_and_inserting_one_after_optimize(
    spark: Any, landing: str, table: str
) -> None:
    """OPTIMIZE compacts the batch's two files into one (no other writer's rows in it). Then a
    MERGE (no deletion vectors) deletes one batch row and inserts one new row: the file count
    of rows is unchanged, but a batch row is gone. verify must report an error.

    Reproduced defect (MISSED LOSS; not from today's commits: ``_merge_inserts`` caps the
    inserts at output-minus-input, 0 here, so the inserted row counts as a batch row). Seen:
    ``report.ok`` is True, warnings only (batch_file_compacted, foreign_file)."""
    _load(spark, landing, table, 1, files=2)
    _sql(spark, "OPTIMIZE {t}", table)
    assert audit_table(table).ok
    _sql(
        spark,
        MERGE_DELETING_1003_INSERTING_ONE,
        table,
    )
    assert 1003 not in _ids(spark, table) and 777777 in _ids(spark, table)
    report = audit_table(table)
    assert not report.ok, _findings(report)


def test_delete_in_a_mixed_file_and_an_unmixed_batch_file(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    """OPTIMIZE mixes batch 1 with another writer's rows; batch 2 lands in its own file. One
    DELETE removes one of the other writer's rows (mixed file) and one row of batch 2 (its own
    file). The loss of batch 2's row is not ambiguous: verify must report an error naming batch 2."""
    p1 = _load(spark, landing, table, 1)
    _theirs(spark, tmp_path, table, 900_000)
    _sql(spark, "OPTIMIZE {t}", table)
    p2 = _load(spark, landing, table, 2)
    _sql(spark, "DELETE FROM {t} WHERE order_id IN (900002, 2003)", table)
    report = audit_table(table)
    assert p2.key.key in {f.batch_key for f in report.errors}, _findings(report)
    assert p1.key.key not in {f.batch_key for f in report.errors}, _findings(report)


def test_delete_of_a_batch_row_in_a_compacted_file_beside_another_writers_file(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    """OPTIMIZE compacts the batch's two files into one that holds only batch rows; another
    writer appends its own file afterwards. One DELETE (no deletion vectors) removes a batch
    row from the compacted file and a row from the other writer's file: nothing had mixed
    their rows before. verify must report an error (before the mixed-delete change it was
    row_total_mismatch).

    Reproduced defect (MISSED LOSS, a regression of d298105). Seen: only the warning
    rows_deleted_unattributed ("... from files in which an OPTIMIZE or MERGE had mixed batch
    rows with theirs"), no error. Nothing had mixed the files: the DELETE's own removal of
    the other writer's file counts as a "fold", which puts the DELETE among the mixed
    deletes. The compacted file held batch rows only, and a Delta DELETE rewrites only files
    in which it deletes a row, so at least one batch row went."""
    _load(spark, landing, table, 1, files=2)
    _sql(spark, "OPTIMIZE {t}", table)
    _theirs(spark, tmp_path, table, 900_000)
    _sql(spark, "DELETE FROM {t} WHERE order_id IN (1003, 900002)", table)
    assert len(_ids(spark, table)) == 23
    report = audit_table(table)
    assert not report.ok, _findings(report)
