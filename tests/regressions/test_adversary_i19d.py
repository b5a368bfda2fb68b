"""Adversary tests (fourth round) for issue 19: odd partition values on disk and in the
log, the table-creating commit, the ask's answer for the batch's own commit below a foreign
marker, and verify's bound on unattributed deletes, attacked with real Delta Spark and
delta-rs writes.

Each test asserts the correct behaviour. Those whose docstring says "Reproduced defect"
failed before the fix it names; the others are attacks that held.
"""

from __future__ import annotations

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
from tests.support.delta_spark_helpers import set_marker as _foreign_marker
from tests.support.delta_spark_helpers import spark_append as _theirs
from tests.support.delta_spark_helpers import spark_ids as _ids
from tests.support.delta_spark_helpers import sql_on as _sql
from tests.support.delta_spark_helpers import write_rows as _write_rows
from tests.support.helpers import check, orders_source, plan_for, restate, spec_for

pytestmark = delta_spark_tier

ORDERS = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"


# == 1. The ask: a restatement that died before its record, then a foreign marker ==========
@pytest.mark.faults
@pytest.mark.parametrize("theirs_at", [0, 5], ids=["marker-below", "marker-above"])
def test_a_restatement_that_died_before_its_record_then_a_foreign_marker(
    spark: Any, landing: str, table: str, monkeypatch: pytest.MonkeyPatch, theirs_at: int
) -> None:
    """Batch 2 committed at generation 0 (record written). Its restatement (generation 1)
    commits and dies before its record (fault point before_record); then another writer
    (delta-rs) appends with the batch's app id at txn version ``theirs_at`` (0: below the
    restatement's generation; 5: above it). Commit of generation 1 is in the log with the
    batch's manifest. The retry of the restatement must report already_committed (the ask:
    generation 1), and the table must hold the batch's rows once.

    Reproduced defect, fixed (WEDGE, with a false claim), both with the foreign marker below (0) and
    above (5) the restatement's generation. Seen: ``ask(table, key, 1)`` gives
    committed_generation 0 and table_version 1 (the generation-0 record), though commit 2
    carries the generation-1 manifest and marker; the retry raises BatchRefusedError "1 of the
    1 file(s) of generation 0 are no longer live (e.g. eod_data/tests.orders/o-00000001-.../
    g0-.../part-00000-...parquet): another writer rewrote them (OPTIMIZE?), so their rows now
    sit in files outside the batch and restating would duplicate them; nothing was committed".
    The rows are there (generation 1, once), but every retry, and every further restatement
    (asked at generation 2 it gets the same generation-0 answer), is refused for good, blaming
    an OPTIMIZE that never ran. Cause: in ``_ask`` a foreign marker below the record's
    generation is taken as the table's word (``record.generation > marker`` picks the record,
    no log search), and above it ``own = (newest.generation, newest)`` when a record exists:
    ``own_commit_below`` (the log / checkpoint search) runs only when there is no record at
    all, so a generation newer than the newest record whose committer died before its record
    is never found beside a foreign marker.

    Fix: where another writer set the marker back (below or at the record's generation) and
    a newer generation is planned, the ask searches the table for that generation's own
    commit (``own_commit``), as it does once the marker expired; above the record, it
    searches before it falls back to the record.
    """
    from airflow_eod.core.faults import InjectedFault

    _load_rows(spark, landing, table, [(1, "a")], 1)
    plan = _load_rows(spark, landing, table, [(i, "b") for i in range(100, 110)], 2)
    source = orders_source(landing)
    again = restate(source, table, plan, run="restate-1")
    monkeypatch.setenv("EOD_FAULTPOINTS", "before_record=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, table, again, restate=True))
    monkeypatch.delenv("EOD_FAULTPOINTS")
    assert _ids(spark, table) == [1, *range(100, 110)]  # generation 1 landed
    _foreign_marker(table, plan.key.app_id, theirs_at)
    status = ask(TableRef.parse(table), plan.key, 1)
    try:
        got: Any = run_load(spark, spec_for(source, table, again, restate=True, try_number=2))
    except Exception as exc:
        got = exc
    assert status.committed_generation == 1, status
    assert getattr(got, "outcome", None) == "already_committed", got
    assert _ids(spark, table) == [1, *range(100, 110)]
    cmp = check(table, landing)
    assert cmp.exact, cmp.describe()
    # verify names what the other writer did (an error, as for every marker it sets), and
    # nothing else: the batch's generation-1 files are its live rows.
    report = audit_table(table)
    assert {f.kind for f in report.errors} == {"marker_set_by_another_writer"}, _findings(report)
    assert "own newest generation" in report.errors[0].message, _findings(report)


def _last_commit(table: str) -> list[dict[str, Any]]:
    v = DeltaTable(table).version()
    with open(os.path.join(table, "_delta_log", f"{v:020d}.json"), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


# == 2. verify: the allowance for a DELETE in mixed files, partition by partition =========
def test_a_delete_of_batch_rows_bounded_by_other_writers_rows_of_another_partition(
    spark: Any, landing: str, table: str
) -> None:
    """A table partitioned by customer. The batch's 10 rows are in 'p1', beside one row of
    another writer; that writer also appended 10 rows to 'p2' in two files (no batch row in
    'p2'). One OPTIMIZE compacts both partitions in one commit: only the 'p1' output mixes
    batch rows with theirs (one row of theirs). A DELETE of 5 batch rows from the 'p1' output:
    at most one of them can have been the other writer's, so at least 4 batch rows are lost
    and verify must report an error.

    Reproduced defect, fixed (MISSED LOSS). Seen: ``report.ok`` is True; warnings only: foreign_file
    (the DELETE's 6-row output in p1), compacted_file, batch_file_compacted, and
    rows_deleted_unattributed "the table holds 16 live rows, 5 fewer than its 1 committed
    batches recorded (10) plus other writers' rows (11); other writers' DELETE or MERGE
    (commit(s) 6) deleted at least as many rows from files in which an OPTIMIZE or MERGE had
    mixed batch rows with theirs". ``check_total`` bounds the shortfall by ``theirs_mixed`` =
    every row ``folded`` (11: the p1 row and the 10 p2 rows the same OPTIMIZE commit removed),
    not by the other writers' rows in the mixed outputs the DELETE touched (1, partition p1):
    ``folded`` is filled for every non-carrier input of the commit, whatever its partition.

    Fix: only the other writers' rows that an OPTIMIZE or DELETE put into a partition that
    also held batch rows count towards the bound.
    """
    spark.sql(f"CREATE TABLE delta.`{table}` ({ORDERS}) USING delta PARTITIONED BY (customer)")
    _load_rows(spark, landing, table, [(i, "p1") for i in range(1, 11)], 1)
    _theirs(spark, table, [(900_000, "p1")])
    _theirs(spark, table, [(910_000 + i, "p2") for i in range(5)])
    _theirs(spark, table, [(920_000 + i, "p2") for i in range(5)])
    assert audit_table(table).ok
    _sql(spark, "OPTIMIZE {t}", table)
    adds = {a["add"]["partitionValues"]["customer"] for a in _last_commit(table) if "add" in a}
    assert adds == {"p1", "p2"}, adds  # the premise: both partitions compacted in one commit
    assert audit_table(table).ok
    _sql(spark, "DELETE FROM {t} WHERE order_id <= 5", table)
    assert [i for i in _ids(spark, table) if i < 900_000] == [6, 7, 8, 9, 10]
    report = audit_table(table)
    assert not report.ok, _findings(report)


def test_a_delete_of_other_writers_rows_after_an_update_moved_them_to_another_partition(
    spark: Any, landing: str, table: str
) -> None:
    """A table partitioned by customer. The batch's 10 rows and another writer's 3 rows are
    in partition 'p2' (separate files). Another writer's UPDATE sets customer = 'p3' on the
    whole partition: Delta rewrites both files into partition 'p3' (an UPDATE of a partition
    column moves rows to another partition). A DELETE then removes only the other writer's
    3 rows. No batch row was lost (the 10 are read): verify must not report an error (at most
    the warning rows_deleted_unattributed, as without the partition move).

    Reproduced defect, fixed (FALSE ALARM). Seen: after the UPDATE verify is ok; after the DELETE
    (Delta Spark reads exactly the batch's 10 rows, customer 'p3', amount 1.50) it reports
    error row_total_mismatch "the table holds 10 live rows, but its 1 committed batches
    recorded 10 and other writers' files hold 3: 3 rows fewer than accounted for", beside the
    warnings foreign_file and batch_file_rewritten. ``_mixed_outputs`` marks an output mixed
    only in a partition of an input that held the other writer's rows ("Delta rewrites never
    move a row to another partition"), but the UPDATE read both files in 'p2' and wrote its
    outputs in 'p3': none is marked mixed, so the DELETE of their 3 rows from a 'p3' output is
    not counted in ``mixed_deletes`` and is taken for a loss of batch rows. Before b1f414e
    every output of a folding commit was mixed (``folds``) and this stayed a warning.

    Fix: only an OPTIMIZE or a DELETE is taken to keep rows in their partition; the outputs
    of an UPDATE or MERGE are all mixed.
    """
    spark.sql(f"CREATE TABLE delta.`{table}` ({ORDERS}) USING delta PARTITIONED BY (customer)")
    _load_rows(spark, landing, table, [(i, "p2") for i in range(1, 11)], 1)
    _theirs(spark, table, [(900_000 + i, "p2") for i in range(3)])
    assert audit_table(table).ok
    _sql(spark, "UPDATE {t} SET customer = 'p3' WHERE customer = 'p2'", table)
    out = {a["add"]["partitionValues"]["customer"] for a in _last_commit(table) if "add" in a}
    assert out == {"p3"}, out  # the premise: the rows moved partition
    report = audit_table(table)
    assert report.ok, _findings(report)
    _sql(spark, "DELETE FROM {t} WHERE order_id >= 900000", table)
    assert _ids(spark, table) == list(range(1, 11))
    spark.catalog.clearCache()
    rows = spark.read.format("delta").load(table).select("order_id", "customer", "amount").collect()
    assert sorted((r.order_id, r.customer, str(r.amount)) for r in rows) == [
        (i, "p3", "1.50") for i in range(1, 11)
    ]
    report = audit_table(table)
    assert report.ok, _findings(report)


# == 3. Paths spelled as Delta Spark spells them: odd values, old spellings, VACUUM =======
# NBSP, a C1 control (NEL), combining marks (NFD) beside the NFC form, an emoji (a surrogate
# pair in Java), an unassigned code point, CJK and ideographic space, a soft hyphen, a BOM,
# and ASCII that a URI path escapes.
STRANGE = [
    "a\u00a0b",
    "n\u0085l",
    "l\u2028s",
    "e\u0301",
    "\u00e9",
    "\U0001f600x",
    "u\u0378",
    "\u65e5\u3000\u672c",
    "s\u00adh",
    "\ufeffbom",
    "a%b #c+d",
    "plain",
]


def _write_values(landing: str, values: list[str], name: str, first: int) -> None:
    _write_rows(landing, [(first + i, v) for i, v in enumerate(values)], name)


def test_odd_partition_values_old_and_new_spellings_restated_then_vacuumed(
    spark: Any, landing: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batch 1 is committed as the engine did before the staged folders were made ASCII
    (``customer=日`` on disk, the add spelling it percent-encoded, as deltalake does),
    partitioned by the STRANGE values; batch 2 with today's layout into the same partitions.
    Batch 1 is restated (its removes must match the old spelling), then Delta Spark's VACUUM
    RETAIN 0 HOURS, OPTIMIZE, a checkpoint and VACUUM again: no live file is deleted, both
    engines read every row once, verify is clean."""
    import airflow_eod.spark.staging as staging

    # Created by Delta Spark: the delta-rs engine's creating commit is attacked in section 4.
    spark.sql(f"CREATE TABLE delta.`{table}` ({ORDERS}) USING delta PARTITIONED BY (customer)")
    _write_values(landing, STRANGE, "orders-001.csv", 1)
    source = orders_source(landing)
    plan1 = plan_for(source, table, run="run-1")
    with monkeypatch.context() as m:
        # As before the staged folders were made ASCII: customer=日 on disk, and the add
        # spelling it percent-encoded.
        m.setattr(staging, "_ascii_partition_dirs", lambda out, label: None)
        got = run_load(spark, spec_for(source, table, plan1, partition_by=["customer"]))
    assert got.outcome == "committed" and got.rows == len(STRANGE), got
    old = [a["add"]["path"] for a in _last_commit(table) if "add" in a]
    assert any("%E6%97%A5" in p for p in old), old  # the premise: the old spelling
    _write_values(landing, STRANGE, "orders-002.csv", 100)
    source = orders_source(landing)
    plan2 = plan_for(source, table, run="run-2")
    got = run_load(spark, spec_for(source, table, plan2))
    assert got.outcome == "committed" and got.rows == len(STRANGE), got
    again = restate(source, table, plan1, run="restate-1")
    got = run_load(spark, spec_for(source, table, again, restate=True))
    assert got.outcome == "committed" and got.generation == 1, got
    want = sorted([*range(1, 1 + len(STRANGE)), *range(100, 100 + len(STRANGE))])
    assert _ids(spark, table) == want
    retention = "spark.databricks.delta.retentionDurationCheck.enabled"
    spark.conf.set(retention, "false")
    try:
        _sql(spark, "VACUUM {t} RETAIN 0 HOURS", table)
        assert not [p for p in DeltaTable(table).file_uris() if not os.path.exists(p)]
        assert _ids(spark, table) == want
        _sql(spark, "OPTIMIZE {t}", table)
        _sql(spark, "ALTER TABLE {t} SET TBLPROPERTIES ('delta.checkpointInterval' = '1')", table)
        _sql(spark, "VACUUM {t} RETAIN 0 HOURS", table)
    finally:
        spark.conf.unset(retention)
    assert not [p for p in DeltaTable(table).file_uris() if not os.path.exists(p)]
    assert _ids(spark, table) == want
    got_rs = sorted(
        r["order_id"] for r in DeltaTable(table).to_pyarrow_table(columns=["order_id"]).to_pylist()
    )
    assert got_rs == want
    cmp = check(table, landing)
    assert cmp.exact, cmp.describe()
    report = audit_table(table)
    assert not report.errors, _findings(report)


# == 4. The table-creating commit of the delta-rs engine ====================================
@pytest.mark.parametrize(
    ("value", "partition_by"),
    [
        pytest.param("line\u2028sep", None, id="u2028-in-stats"),
        pytest.param(
            "n\u0085l",
            ["customer"],
            id="nel-partition",
        ),
    ],
)
def test_the_creating_commit_with_a_line_separator_in_a_value(
    spark: Any, landing: str, table: str, value: str, partition_by: list[str] | None
) -> None:
    """The first batch of a new table (the delta-rs engine creates it) holds a string with a
    Unicode line separator (U+2028, the only value of a column, so its min and max
    statistics) or NEL (U+0085, a partition value). JSON leaves both unescaped; the batch must
    load, and its retry must report already_committed.

    Reproduced defect, fixed, for NEL in a partition value (WEDGE; U+2028 in the statistics
    held), in a commit since undone: the creating commit is deltalake's own again.
    Seen: both tries raise BatchError "batch tests.orders/o-00000000-...: the Delta commit that
    creates the table failed: Unterminated string starting at: line 1 column 200 (char 199)";
    no table is created, and every retry fails the same way (only another batch creating the
    table first lets it through). ``put_creating_commit`` reads deltalake's rendered commit
    with ``rendered.splitlines()``, which splits at U+0085 (and U+2028, U+2029, U+001C-U+001E,
    U+000B, U+000C) as well as at '\n'; JSON leaves U+0085 raw inside the add's
    partitionValues, so one action is cut in two and ``json.loads`` fails. ``split("\n")``
    is what the Delta log's line format means."""
    _write_rows(landing, [(1, value), (2, value)], "orders-001.csv")
    source = orders_source(landing)
    plan = plan_for(source, table)
    kw: dict[str, Any] = {"partition_by": partition_by} if partition_by else {}
    outcomes = []
    for try_number in (1, 2):
        try:
            outcomes.append(
                run_load(spark, spec_for(source, table, plan, try_number=try_number, **kw)).outcome
            )
        except Exception as exc:
            outcomes.append(f"{type(exc).__name__}: {exc}"[:400])
    assert outcomes == ["committed", "already_committed"], outcomes
    assert _ids(spark, table) == [1, 2]
    cmp = check(table, landing)
    assert cmp.exact, cmp.describe()
    report = audit_table(table)
    assert report.ok, _findings(report)
