"""Issue 6, the protocol holes: each test reproduces a way a batch was duplicated, lost,
corrupted or wedged on the code before the fix, and pins the fix. Rows are compared with
the source row by row.

Pinned here, one test each (docs/guarantee.md lists them by issue 6 case): restatement after a
partial OPTIMIZE and after its manifest commit aged out; partition values that need encoding;
an idle offset pipeline after its markers expire; a crash between the commit and its record;
re-freezing a changed input; a zombie of the stale generation; a restatement that failed once;
a log holding only a temporary file; planning into a foreign directory; the clock-skew margin;
two intervals over one directory; offset and interval batches mixed; another source's stored
plan; one landing directory through a symlink or another mount; a dropped table's plan log;
partitioning kept without ``partition_by``; a file rewritten in place; offset plans from before
canonical paths; a retried restatement.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import (
    BatchError,
    InputChangedError,
    PlanLogError,
    RetentionWindowError,
    UnsupportedTableError,
)
from airflow_eod.core.faults import InjectedFault
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.compare import compare_rows, read_delta_rows, read_rows_by_log
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import PIPELINE, check, interval_plan, orders_source, plan_for, restate, spec_for

pytestmark = [pytest.mark.guarantee, pytest.mark.spark]
DAY = datetime(2026, 11, 10, tzinfo=UTC)


def _partitions_with_two_files(table: str) -> list[str]:
    adds = pa.table(DeltaTable(table).get_add_actions(flatten=False)).to_pylist()
    counts: dict[str, int] = {}
    for a in adds:
        day = str(a["partition"]["order_date"])
        counts[day] = counts.get(day, 0) + 1
    return sorted(d for d, n in counts.items() if n >= 2)


def _assert_restatement_refused(
    spark: Any, source: Any, table: str, plan: Plan, landing: str, rows: int
) -> None:
    """A restatement of ``plan`` after an OPTIMIZE is refused, commits nothing, and every
    source row is still in the table once."""
    version = DeltaTable(table).version()
    restated = restate(source, table, plan)
    with pytest.raises(BatchError, match=r"no longer live .*OPTIMIZE"):
        run_load(spark, spec_for(source, table, restated, restate=True, partition_by=["order_date"]))
    assert DeltaTable(table).version() == version
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == rows, cmp.describe()


# -- case 2: restating after someone else's OPTIMIZE ------------------------------------
def test_restatement_after_a_partial_optimize_is_refused_and_rows_stay_once(
    spark: Any, landing: str, table: str
) -> None:
    write_order_files(landing, 2, 60)
    source = orders_source(landing, boundary="interval")
    plan = interval_plan(source, table, DAY, DAY + timedelta(days=1))
    run_load(spark, spec_for(source, table, plan, partition_by=["order_date"]))
    day = _partitions_with_two_files(table)[0]
    DeltaTable(table).optimize.compact(partition_filters=[("order_date", "=", day)])
    _assert_restatement_refused(spark, source, table, plan, landing, 120)


def test_restatement_guard_survives_the_manifest_commit_ageing_out_of_the_log(
    spark: Any, landing: str, table: str
) -> None:
    write_order_files(landing, 2, 30)
    source = orders_source(landing, boundary="interval")
    plan = interval_plan(source, table, DAY, DAY + timedelta(days=1))
    run_load(
        spark,
        spec_for(
            source,
            table,
            plan,
            partition_by=["order_date"],
            table_configuration={"delta.logRetentionDuration": "interval 1 seconds"},
        ),
    )
    dt = DeltaTable(table)
    dt.optimize.compact()
    dt = DeltaTable(table)
    dt.create_checkpoint()
    time.sleep(2)
    dt.cleanup_metadata()
    assert not os.path.exists(os.path.join(table, "_delta_log", f"{0:020d}.json")), "commit 0 aged out"
    assert all("airflow_eod" not in str(h.get("userMetadata")) for h in DeltaTable(table).history())
    _assert_restatement_refused(spark, source, table, plan, landing, 60)


def test_restating_a_partition_whose_value_needs_encoding_replaces_its_files(
    spark: Any, tmp_path: Any, table: str
) -> None:
    """delta-rs hands back encoded paths; a remove built from them named another file."""
    landing = str(tmp_path / "pq")
    os.makedirs(landing)
    pq.write_table(pa.table({"id": [1, 2, 3], "p": ["50%", "a:b", "x y"]}), f"{landing}/a.parquet")
    source = LandingFilesSource(path=landing, file_format="parquet", boundary="interval")
    plan = interval_plan(source, table, DAY, DAY + timedelta(days=1))
    run_load(spark, spec_for(source, table, plan, partition_by=["p"]))
    os.unlink(f"{landing}/a.parquet")
    pq.write_table(pa.table({"id": [10, 20, 30], "p": ["50%", "a:b", "x y"]}), f"{landing}/b.parquet")
    result = run_load(spark, spec_for(source, table, restate(source, table, plan), restate=True))
    assert result.generation == 1
    want = [(10, "50%"), (20, "a:b"), (30, "x y")]
    assert compare_rows(want, read_delta_rows(table, ["id", "p"])).exact
    assert compare_rows(want, read_rows_by_log(table, ["id", "p"])).exact


# -- case 6: schema-widening commits write unreadable paths -----------------------------
def test_a_schema_widening_commit_encodes_partition_paths(spark: Any, tmp_path: Any, table: str) -> None:
    landing = str(tmp_path / "pq")
    os.makedirs(landing)
    pq.write_table(pa.table({"id": [1], "p": ["plain"]}), f"{landing}/a.parquet")
    source = LandingFilesSource(path=landing, file_format="parquet")
    run_load(spark, spec_for(source, table, plan_for(source, table, run="r0"), partition_by=["p"]))
    pq.write_table(
        pa.table({"id": [2, 3, 4], "p": ["50%", "a:b", "é #"], "extra": [1.5, None, 2.5]}),
        f"{landing}/b.parquet",
    )
    result = run_load(
        spark, spec_for(source, table, plan_for(source, table, run="r1"), schema_drift="add_columns")
    )
    assert result.outcome == "committed"
    want = [(1, "plain", None), (2, "50%", 1.5), (3, "a:b", None), (4, "é #", 2.5)]
    cols = ["id", "p", "extra"]
    assert compare_rows(want, read_delta_rows(table, cols)).exact, "delta-rs reads it back"
    assert compare_rows(want, read_rows_by_log(table, cols)).exact, "a second reader reads it back"


# -- case 10: an offset pipeline idle longer than the transaction-retention window -------
def test_an_idle_offset_pipeline_moves_on_after_its_markers_expire(
    spark: Any, landing: str, table: str
) -> None:
    write_order_files(landing, 1, 20)
    source = orders_source(landing)
    first = plan_for(source, table, run="r0")
    run_load(
        spark,
        spec_for(
            source,
            table,
            first,
            table_configuration={"delta.setTransactionRetentionDuration": "interval 2 seconds"},
        ),
    )
    time.sleep(3)
    dt = DeltaTable(table)
    assert dt.transaction_version(first.key.app_id) is None, "delta-rs hides the expired marker"
    # Housekeeping removes the loaded file; a new file arrives a month later.
    os.unlink(first.inputs[0]["path"])
    write_order_files(landing, 1, 20, first_id=1000)
    status = ask(TableRef.parse(table), first.key)
    assert status.committed and status.table_version == 0 and status.manifest is not None
    nxt = plan_for(source, table, run="r1")
    assert nxt.key != first.key and nxt.seq == 1
    assert run_load(spark, spec_for(source, table, nxt)).outcome == "committed"
    cmp = check(table, landing)
    assert cmp.table_rows == 40 and not cmp.duplicates and len(cmp.unexpected) == 20, cmp.describe()


@pytest.mark.faults
def test_a_crash_between_the_commit_and_its_record_is_repaired_by_the_next_ask(
    spark: Any, landing: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_order_files(landing, 2, 10)
    source = orders_source(landing)
    plan = plan_for(source, table)
    monkeypatch.setenv("EOD_FAULTPOINTS", "before_record=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, table, plan, try_number=1))
    monkeypatch.delenv("EOD_FAULTPOINTS")
    record = os.path.join(
        table,
        "_eod",
        "pipelines",
        PIPELINE,
        "batches",
        plan.batch_key,
        f"g0.{DeltaTable(table).metadata().id}.json",
    )
    assert not os.path.exists(record)
    retry = run_load(spark, spec_for(source, table, plan, try_number=2))
    assert retry.outcome == "already_committed" and retry.rows == 20 and retry.table_version == 0
    assert json.load(open(record))["table_version"] == 0
    cmp = check(table, landing)
    assert cmp.exact, cmp.describe()


# -- cases 11 and 12: re-freezing a batch the table never committed ----------------------
def test_a_batch_whose_input_changed_can_be_refrozen_and_later_files_load(
    spark: Any, landing: str, table: str
) -> None:
    write_order_files(landing, 2, 10)
    source = orders_source(landing)
    stuck = plan_for(source, table, run="r0")
    victim = stuck.inputs[0]["path"]
    with open(victim, "a") as fh:  # a correction lands after planning
        fh.write("999,late,1.00,2026-11-21,2026-11-21T00:00:00Z\n")
    with pytest.raises(InputChangedError, match="re-freeze"):
        run_load(spark, spec_for(source, table, stuck))
    # Clearing the task does not help: the frozen plan is the same.
    with pytest.raises(InputChangedError):
        run_load(spark, spec_for(source, table, plan_for(source, table, run="r0"), try_number=2))

    refrozen = restate(source, table, stuck, run="fix-run")
    assert refrozen.batch_key == stuck.batch_key and refrozen.generation == 1
    # Two runs re-freezing at once get one plan (put-if-absent on the generation).
    assert restate(source, table, stuck, run="fix-run") == refrozen
    result = run_load(spark, spec_for(source, table, refrozen, restate=True))
    assert (result.outcome, result.generation, result.rows) == ("committed", 1, 21)
    # An attempt of the stale generation 0 (a zombie) now writes nothing.
    assert run_load(spark, spec_for(source, table, stuck, try_number=3)).outcome == "already_committed"
    write_order_files(landing, 1, 5, first_id=5000)
    nxt = plan_for(source, table, run="r1")
    assert nxt.seq == 1 and [os.path.basename(f["path"]) for f in nxt.inputs] == ["orders-005000-0000.csv"]
    run_load(spark, spec_for(source, table, nxt))
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 26, cmp.describe()


def test_a_zombie_of_the_stale_generation_committing_first_is_swapped_out(
    spark: Any, landing: str, table: str
) -> None:
    write_order_files(landing, 1, 10)
    source = orders_source(landing)
    stuck = plan_for(source, table, run="r0")
    refrozen = restate(source, table, stuck, run="fix-run")
    # The old generation lands after the re-freeze was planned (a slow zombie).
    assert run_load(spark, spec_for(source, table, stuck)).outcome == "committed"
    result = run_load(spark, spec_for(source, table, refrozen, restate=True))
    assert result.generation == 1
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 10, cmp.describe()


def test_a_restatement_that_failed_once_can_be_restated_again(spark: Any, landing: str, table: str) -> None:
    write_order_files(landing, 1, 10)
    source = orders_source(landing, boundary="interval")
    plan = interval_plan(source, table, DAY, DAY + timedelta(days=1))
    run_load(spark, spec_for(source, table, plan))
    path = plan.inputs[0]["path"]
    first_try = restate(source, table, plan, run="fix-1")
    with open(path, "a") as fh:
        fh.write("777,x,1.00,2026-11-21,2026-11-21T00:00:00Z\n")
    with pytest.raises(InputChangedError):
        run_load(spark, spec_for(source, table, first_try, restate=True))
    second = restate(source, table, plan, run="fix-2")
    assert second.generation == 2
    result = run_load(spark, spec_for(source, table, second, restate=True))
    assert (result.generation, result.rows) == (2, 11)
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 11, cmp.describe()


# -- case 13: a crash inside the commit that creates the table ---------------------------
def test_a_delta_log_holding_only_a_temporary_file_is_no_table_yet(
    spark: Any, landing: str, table: str
) -> None:
    os.makedirs(os.path.join(table, "_delta_log"))
    with open(os.path.join(table, "_delta_log", "_commit_5f2c.json.tmp"), "w") as fh:
        fh.write('{"commitInfo":{}}\n')
    write_order_files(landing, 1, 10)
    source = orders_source(landing)
    plan = plan_for(source, table)
    assert open_table(TableRef.parse(table)) is None and not ask(TableRef.parse(table), plan.key).committed
    assert run_load(spark, spec_for(source, table, plan)).outcome == "committed"
    cmp = check(table, landing)
    assert cmp.exact, cmp.describe()


# -- case 15: a refused foreign directory is left exactly as it was ----------------------
def test_planning_into_a_foreign_directory_writes_nothing_there(landing: str, tmp_path: Any) -> None:
    target = tmp_path / "not_delta"
    target.mkdir()
    (target / "report.csv").write_text("a,b\n")
    write_order_files(landing, 1, 5)
    with pytest.raises(UnsupportedTableError, match="not a Delta table"):
        orders_source(landing).plan(
            PlanLog(TableRef.parse(str(target)), PIPELINE), run_token="r", is_committed=lambda k: False
        )
    assert sorted(os.listdir(target)) == ["report.csv"]


# -- case 14: the retention check allows for clock skew ---------------------------------
def test_a_batch_inside_the_clock_skew_margin_is_refused(spark: Any, landing: str, table: str) -> None:
    write_order_files(landing, 1, 5)
    source = orders_source(landing)
    run_load(spark, spec_for(source, table, plan_for(source, table, run="seed")))
    write_order_files(landing, 1, 5, first_id=900)
    plan = plan_for(source, table, run="late")
    # 30 days less 30 minutes: inside the window by the planner's clock, but within the
    # one-hour skew margin of a checkpoint writer whose clock runs ahead.
    old = replace(
        plan, planned_at=(datetime.now(UTC) - timedelta(days=30) + timedelta(minutes=30)).isoformat()
    )
    with pytest.raises(RetentionWindowError, match="clock-skew margin"):
        run_load(spark, spec_for(source, table, old))


# -- case 3: a file is loaded by one batch of a pipeline, whatever the intervals ---------
def test_two_intervals_rendering_to_the_same_directory_load_its_files_once(
    spark: Any, landing: str, table: str
) -> None:
    write_order_files(landing, 2, 10)
    source = orders_source(landing, boundary="interval")
    morning = interval_plan(source, table, DAY, DAY + timedelta(hours=12))
    assert run_load(spark, spec_for(source, table, morning)).rows == 20
    write_order_files(landing, 1, 7, first_id=300)
    # Overlapping explicit interval over the same directory: only the new file is its own.
    overlapping = interval_plan(source, table, DAY + timedelta(hours=6), DAY + timedelta(days=1))
    assert [os.path.basename(f["path"]) for f in overlapping.inputs] == ["orders-000300-0000.csv"]
    assert run_load(spark, spec_for(source, table, overlapping)).rows == 7
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 27, cmp.describe()


def test_a_pipeline_does_not_mix_offset_and_interval_batches(landing: str, table: str) -> None:
    write_order_files(landing, 1, 5)
    plan_for(orders_source(landing), table)
    with pytest.raises(Exception, match="already has offsets batches"):
        interval_plan(orders_source(landing, boundary="interval"), table, DAY, DAY + timedelta(days=1))


# -- case 4: a stored plan is never reused for another source ---------------------------
def test_a_stored_plan_of_another_source_is_refused(tmp_path: Any, table: str) -> None:
    dirs = [str(tmp_path / f"land{i}") for i in range(2)]
    for i, d in enumerate(dirs):
        write_order_files(d, 1, 5, first_id=1 + 100 * i)
    interval_plan(orders_source(dirs[0], boundary="interval"), table, DAY, DAY + timedelta(days=1))
    with pytest.raises(PlanLogError, match="planned from"):
        interval_plan(orders_source(dirs[1], boundary="interval"), table, DAY, DAY + timedelta(days=1))


# -- case 5: the same directory reached another way -------------------------------------
def test_the_same_landing_directory_through_a_symlink_loads_nothing_again(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    write_order_files(landing, 2, 10)
    run_load(
        spark, spec_for(orders_source(landing), table, plan_for(orders_source(landing), table, run="r0"))
    )
    link = str(tmp_path / "via_link")
    os.symlink(landing, link)
    via_link = orders_source(link)
    assert (
        via_link.plan(
            PlanLog(TableRef.parse(table), PIPELINE),
            run_token="r1",
            is_committed=lambda k: ask(TableRef.parse(table), k).committed,
        )
        is None
    )
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 20, cmp.describe()


def test_the_same_files_under_another_mount_path_are_refused(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    write_order_files(landing, 2, 10)
    run_load(
        spark, spec_for(orders_source(landing), table, plan_for(orders_source(landing), table, run="r0"))
    )
    remount = str(tmp_path / "mnt" / "landing")
    os.makedirs(os.path.dirname(remount))
    os.system(f"cp -a {landing} {remount}")  # the same files, names, sizes and mtimes elsewhere
    with pytest.raises(Exception, match="frontier belongs to one source"):
        orders_source(remount).plan(
            PlanLog(TableRef.parse(table), PIPELINE),
            run_token="r1",
            is_committed=lambda k: ask(TableRef.parse(table), k).committed,
        )


def test_a_plan_log_left_behind_by_a_dropped_table_is_refused_until_moved_aside(
    spark: Any, landing: str, table: str
) -> None:
    """An offset pipeline's plan log says which batches were loaded; for a table dropped and
    re-created at the same path, its older batches would count as loaded and never come back."""
    import shutil

    source = orders_source(landing)
    for i in range(2):
        write_order_files(landing, 1, 5, first_id=1 + 100 * i)
        run_load(spark, spec_for(source, table, plan_for(source, table, run=f"r{i}")))
    shutil.rmtree(os.path.join(table, "_delta_log"))
    shutil.rmtree(os.path.join(table, "eod_data"))
    with pytest.raises(UnsupportedTableError, match=r"belongs to table .* dropped and re-created"):
        plan_for(source, table, run="r2")
    # The documented way out: move the plan log aside; every batch loads again, once.
    shutil.move(os.path.join(table, "_eod"), os.path.join(os.path.dirname(table), "_eod.old"))
    while (
        nxt := source.plan(
            PlanLog(TableRef.parse(table), PIPELINE),
            run_token=f"again-{time.time()}",
            is_committed=lambda k: ask(TableRef.parse(table), k).committed,
        )
    ) is not None:
        run_load(spark, spec_for(source, table, nxt))
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 10, cmp.describe()


def test_a_later_load_without_partition_by_keeps_the_tables_partitioning(
    spark: Any, tmp_path: Any, table: str
) -> None:
    """``partition_by`` names the partitioning of a table the load creates; a later load (or
    a restatement) that leaves it out staged unpartitioned files whose partition column read
    back as null."""
    landing = str(tmp_path / "pq")
    os.makedirs(landing)
    pq.write_table(pa.table({"id": [1], "p": ["a"]}), f"{landing}/a.parquet")
    first = LandingFilesSource(path=landing, file_format="parquet")
    run_load(spark, spec_for(first, table, plan_for(first, table, run="r0"), partition_by=["p"]))
    pq.write_table(pa.table({"id": [2, 3], "p": ["b", "c"]}), f"{landing}/b.parquet")
    run_load(spark, spec_for(first, table, plan_for(first, table, run="r1")))
    want = [(1, "a"), (2, "b"), (3, "c")]
    assert compare_rows(want, read_delta_rows(table, ["id", "p"])).exact
    assert compare_rows(want, read_rows_by_log(table, ["id", "p"])).exact


def test_a_file_rewritten_in_place_for_a_later_interval_fails_loudly(
    spark: Any, landing: str, table: str
) -> None:
    """A "latest.csv" layout: the same path with new content each day. Skipping it would
    lose the new rows without a word; loading it would load the path twice."""
    path = os.path.join(landing, "latest.csv")
    with open(path, "w") as fh:
        fh.write("order_id,customer,amount,order_date,ordered_at\n1,a,1.00,2026-11-10,2026-11-10T00:00:00Z\n")
    source = orders_source(landing, boundary="interval")
    day1 = interval_plan(source, table, DAY, DAY + timedelta(days=1))
    run_load(spark, spec_for(source, table, day1))
    time.sleep(0.01)
    with open(path, "w") as fh:
        fh.write(
            "order_id,customer,amount,order_date,ordered_at\n"
            "2,b,2.00,2026-11-11,2026-11-11T00:00:00Z\n3,c,3.00,2026-11-11,2026-11-11T00:00:00Z\n"
        )
    day2 = (DAY + timedelta(days=1), DAY + timedelta(days=2))
    with pytest.raises(BatchError, match=r"belongs to batch .* restate batch .* then clear this run"):
        interval_plan(source, table, *day2)
    assert DeltaTable(table).version() == 0
    # The way out the error names: restate the owner, which takes the new content; then
    # day 2 (and later days) leave the file to its owner and load their own files.
    run_load(spark, spec_for(source, table, restate(source, table, day1), restate=True))
    assert interval_plan(source, table, *day2).inputs == []
    with open(os.path.join(landing, "new.csv"), "w") as fh:
        fh.write("order_id,customer,amount,order_date,ordered_at\n4,d,4.00,2026-11-12,2026-11-12T00:00:00Z\n")
    day3 = interval_plan(source, table, DAY + timedelta(days=2), DAY + timedelta(days=3))
    assert [os.path.basename(f["path"]) for f in day3.inputs] == ["new.csv"]
    run_load(spark, spec_for(source, table, day3))
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 3, cmp.describe()


def test_offset_plans_written_before_paths_were_canonical_still_count_as_loaded(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    link = str(tmp_path / "via_link")
    os.symlink(landing, link)
    write_order_files(landing, 2, 5)
    source = orders_source(link)
    first = plan_for(source, table, run="r0")
    run_load(spark, spec_for(source, table, first))
    # Rewrite the stored plan as an older release wrote it: paths as given, no source.
    path = os.path.join(table, "_eod", "pipelines", PIPELINE, "offsets", f"{0:08d}.json")
    body = json.load(open(path))
    body.pop("checksum")
    body.pop("source")
    body["inputs"] = [dict(f, path=f["path"].replace(landing, link)) for f in body["inputs"]]
    body["boundary"]["directory"] = link
    from airflow_eod.core.batch import fingerprint

    body["checksum"] = fingerprint(body)
    with open(path, "w") as fh:
        json.dump(body, fh)
    assert (
        source.plan(PlanLog(TableRef.parse(table), PIPELINE), run_token="r1", is_committed=lambda k: True)
        is None
    )


@pytest.mark.airflow
def test_a_retried_restatement_refreezes_once_after_the_source_is_fixed(
    spark: Any, landing: str, table: str
) -> None:
    """Case 12 through the operator: try 1 of a restating run froze generation 1 and failed
    because the file changed again; after the fix, try 2 of the same run re-freezes (once),
    and try 3 finds that generation committed."""
    from airflow_eod.core.load_flow import LoadRequest, _restated
    from airflow_eod.core.source import ReadContext

    write_order_files(landing, 1, 10)
    source = orders_source(landing, boundary="interval")
    plan = interval_plan(source, table, DAY, DAY + timedelta(days=1))
    run_load(spark, spec_for(source, table, plan))
    request = LoadRequest(TableRef.parse(table), PIPELINE, "restate-run", restate=True)
    log, ctx = PlanLog(TableRef.parse(table), PIPELINE), ReadContext(spark_factory=lambda: spark)
    path = plan.inputs[0]["path"]

    try1 = _restated(request, log, plan, source, ctx)[0]
    assert try1.generation == 1
    with open(path, "a") as fh:  # the file changes under try 1
        fh.write("777,x,1.00,2026-11-21,2026-11-21T00:00:00Z\n")
    with pytest.raises(InputChangedError):
        run_load(spark, spec_for(source, table, try1, restate=True))
    with open(path, "a") as fh:  # the fix
        fh.write("778,y,2.00,2026-11-21,2026-11-21T00:00:00Z\n")
    try2 = _restated(request, log, plan, source, ctx)[0]
    assert try2.generation == 2
    assert run_load(spark, spec_for(source, table, try2, restate=True, try_number=2)).rows == 12
    try3 = _restated(request, log, plan, source, ctx)[0]
    assert try3 == try2, "a retry after the commit does not restate again"
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 12, cmp.describe()
