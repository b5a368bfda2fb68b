"""Issue 6, second round: ways to break the fixes that an adversarial review reproduced
against them (duplicates, losses, wrong answers and wedges), each pinned here.

Pinned here, one test each (rounds 2 and 3 of docs/guarantee.md's table): a Delta Spark
commit's files swapped by a delta-rs restatement; an offset pipeline given another source; an
outbox vacuumed before its delivery; a file dropped by a re-freeze and delivered again; a
restatement that died before its record; the quarantine table's refusals before the main commit
(append-only, shared, another table's id); a ``%`` in the table path; a re-freeze that never
committed; a re-freeze and a zombie's files; a plan stored through a symlink by an older
release.
"""

from __future__ import annotations

import glob
import os
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from airflow_eod.core.ask import ask
from airflow_eod.core.errors import BatchError, ConfigurationError, InputChangedError
from airflow_eod.core.faults import InjectedFault
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.compare import read_delta_rows, read_landing_rows
from airflow_eod.examples.sample_data import ORDERS_ARROW_SCHEMA, write_order_files
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import PIPELINE, check, interval_plan, orders_source, plan_for, restate, spec_for

pytestmark = [pytest.mark.guarantee, pytest.mark.spark]
DAY = datetime(2026, 11, 10, tzinfo=UTC)
CSV_HEADER = "order_id,customer,amount,order_date,ordered_at\n"


def _interval_plan(source: Any, table: str, day: int = 0, pipeline: str = PIPELINE) -> Plan:
    start = DAY + timedelta(days=day)
    return interval_plan(source, table, start, start + timedelta(days=1), pipeline)


def _with_reject(landing: str, value: str) -> None:
    with open(os.path.join(landing, "z-bad.csv"), "w") as fh:
        fh.write(CSV_HEADER + f"{value},c,1.00,2026-11-01,2026-11-01T00:00:00Z\n")


def test_restating_a_batch_whose_files_sit_outside_its_directory_swaps_them(
    spark: Any, landing: str, table: str
) -> None:
    """Delta Spark commits a batch's files at the table root; the record lists them and the
    restatement removes them instead of leaving both generations visible."""
    write_order_files(landing, 1, 4)
    source = orders_source(landing, boundary="interval")
    plan = _interval_plan(source, table)
    data = read_landing_rows(landing, "csv", list(ORDERS_ARROW_SCHEMA.names), ORDERS_ARROW_SCHEMA)
    rows = pa.Table.from_pylist(
        [dict(zip(ORDERS_ARROW_SCHEMA.names, r, strict=True)) for r in data], ORDERS_ARROW_SCHEMA
    )
    manifest = Manifest(
        plan.pipeline_id,
        plan.batch_key,
        0,
        plan.boundary,
        plan.input_fingerprint,
        4,
        1,
        "spark",
        "delta-spark",
    )
    write_deltalake(
        table,
        rows,
        mode="append",
        commit_properties=CommitProperties(
            custom_metadata={"userMetadata": manifest.to_user_metadata()},
            app_transactions=[Transaction(plan.key.app_id, 0, int(time.time() * 1000))],
        ),
    )
    status = ask(TableRef.parse(table), plan.key)
    assert status.record is not None and len(status.record.files) == 1
    result = run_load(spark, spec_for(source, table, restate(source, table, plan), restate=True))
    assert result.generation == 1
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 4, cmp.describe()


def test_an_offset_pipeline_refuses_another_source(tmp_path: Any, table: str, spark: Any) -> None:
    """Mapped offset loads with default ids whose expand list was reordered: pipeline m0
    would load the other directory from its own frontier, and every file again."""
    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    write_order_files(eu, 1, 3, first_id=1)
    write_order_files(us, 1, 3, first_id=100)
    for pipeline, landing in (("dag.load.m0", eu), ("dag.load.m1", us)):
        src = orders_source(landing)
        run_load(spark, spec_for(src, table, plan_for(src, table, run="r1", pipeline=pipeline)))
    with pytest.raises(ConfigurationError, match="frontier belongs to one source"):
        plan_for(orders_source(us), table, run="r2", pipeline="dag.load.m0")
    assert sorted(r[0] for r in read_delta_rows(table, ["order_id"])) == [1, 2, 3, 100, 101, 102]


@pytest.mark.badinput
def test_an_outbox_vacuumed_before_its_delivery_is_refused_not_committed(
    spark: Any, tmp_path: Any, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    landing, q = str(tmp_path / "day"), str(tmp_path / "rejects")
    write_order_files(landing, 1, 3)
    _with_reject(landing, "bad1")
    source = orders_source(landing, boundary="interval")
    plan = _interval_plan(source, table)
    monkeypatch.setenv("EOD_FAULTPOINTS", "after_commit=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, table, plan, quarantine_table_uri=q))
    monkeypatch.delenv("EOD_FAULTPOINTS")
    # The quarantine table does not exist yet: make one so VACUUM can run, then age and
    # vacuum the staged outbox away, as a VACUUM with full listing does after 7 days.
    write_deltalake(
        q, pa.table({"source_file": pa.array([], pa.string()), "raw_record": pa.array([], pa.string())})
    )
    staged = glob.glob(f"{q}/eod_data/**/*.parquet", recursive=True)
    old = time.time() - 8 * 86400
    for f in staged:
        os.utime(f, (old, old))
    DeltaTable(q).vacuum(dry_run=False, full=True, enforce_retention_duration=True)
    assert not any(os.path.exists(f) for f in staged)
    version = DeltaTable(q).version()
    with pytest.raises(BatchError, match="gone before their commit"):
        run_load(spark, spec_for(source, table, plan, try_number=2, quarantine_table_uri=q))
    assert DeltaTable(q).version() == version
    DeltaTable(q).to_pyarrow_table()  # still readable: nothing half committed


def test_a_file_dropped_by_a_refreeze_and_delivered_again_is_loaded(
    spark: Any, landing: str, table: str
) -> None:
    write_order_files(landing, 2, 5)
    source = orders_source(landing)
    stuck = plan_for(source, table, run="r0")
    gone = stuck.inputs[1]["path"]
    saved = open(gone).read()
    os.unlink(gone)
    with pytest.raises(InputChangedError, match="planned but is gone"):
        run_load(spark, spec_for(source, table, stuck))
    refrozen = restate(source, table, stuck, run="fix")
    assert [f["path"] for f in refrozen.inputs] == [stuck.inputs[0]["path"]]
    run_load(spark, spec_for(source, table, refrozen, restate=True))
    with open(gone, "w") as fh:  # the producer delivers the file again
        fh.write(saved)
    nxt = plan_for(source, table, run="r1")
    assert [f["path"] for f in nxt.inputs] == [gone]
    run_load(spark, spec_for(source, table, nxt))
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 10, cmp.describe()


@pytest.mark.faults
def test_a_restatement_that_died_before_its_record_answers_after_its_marker_expired(
    spark: Any, landing: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_order_files(landing, 1, 5)
    source = orders_source(landing, boundary="interval")
    plan = _interval_plan(source, table)
    retention = {"delta.setTransactionRetentionDuration": "interval 2 seconds"}
    run_load(spark, spec_for(source, table, plan, table_configuration=retention))
    for name in os.listdir(landing):
        os.unlink(os.path.join(landing, name))
    write_order_files(landing, 1, 3, first_id=100)
    restated = restate(source, table, plan)
    monkeypatch.setenv("EOD_FAULTPOINTS", "before_record=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, table, restated, restate=True, try_number=1))
    monkeypatch.delenv("EOD_FAULTPOINTS")
    time.sleep(3)
    assert DeltaTable(table).transaction_version(plan.key.app_id) is None, "the marker expired"
    status = ask(TableRef.parse(table), plan.key)
    assert (status.committed_generation, status.table_version) == (1, 1)
    assert run_load(spark, spec_for(source, table, restated, restate=True, try_number=2)).outcome == (
        "already_committed"
    )
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 3, cmp.describe()


@pytest.mark.badinput
@pytest.mark.parametrize("quarantine_state", ["append_only", "compacted"])
def test_a_restatement_the_quarantine_table_would_refuse_is_refused_before_the_main_commit(
    spark: Any, tmp_path: Any, table: str, quarantine_state: str
) -> None:
    landing, q = str(tmp_path / "day"), str(tmp_path / "rejects")
    write_order_files(landing, 1, 5)
    _with_reject(landing, "x1")
    if quarantine_state == "append_only":
        write_deltalake(
            q,
            pa.table({"source_file": pa.array([], pa.string()), "raw_record": pa.array([], pa.string())}),
            configuration={"delta.appendOnly": "true"},
        )
    source = orders_source(landing, boundary="interval")
    plan = _interval_plan(source, table)
    run_load(spark, spec_for(source, table, plan, quarantine_table_uri=q))
    if quarantine_state == "compacted":
        other = str(tmp_path / "day2")
        write_order_files(other, 1, 5, first_id=500)
        _with_reject(other, "x2")
        src2 = orders_source(other, boundary="interval")
        run_load(
            spark,
            spec_for(src2, table, _interval_plan(src2, table, 1, "tests.other"), quarantine_table_uri=q),
        )
        DeltaTable(q).optimize.compact()
    versions = (DeltaTable(table).version(), DeltaTable(q).version())
    os.unlink(os.path.join(landing, "z-bad.csv"))
    with pytest.raises(BatchError, match="quarantine table"):
        run_load(
            spark,
            spec_for(source, table, restate(source, table, plan), restate=True, quarantine_table_uri=q),
        )
    assert (DeltaTable(table).version(), DeltaTable(q).version()) == versions
    assert (
        ask(TableRef.parse(table), plan.key).committed_generation
        == ask(TableRef.parse(q), plan.key).committed_generation
        == 0
    )


def test_a_table_path_with_a_percent_sign_is_refused_before_anything_is_written(
    tmp_path: Any, landing: str
) -> None:
    write_order_files(landing, 1, 3)
    target = str(tmp_path / "t%41b")
    with pytest.raises(ConfigurationError, match="holds a '%'"):
        plan_for(orders_source(landing), target)
    assert not os.path.exists(target)


@pytest.mark.badinput
def test_one_quarantine_table_for_two_tables_with_one_pipeline_id_is_refused(
    spark: Any, tmp_path: Any
) -> None:
    q = str(tmp_path / "rejects")
    tables = [str(tmp_path / "orders"), str(tmp_path / "returns")]
    for i, table in enumerate(tables):
        landing = str(tmp_path / f"land{i}")
        write_order_files(landing, 1, 3, first_id=1 + 100 * i)
        _with_reject(landing, f"bad{i}")
        source = orders_source(landing, boundary="interval")
        spec = spec_for(source, table, _interval_plan(source, table), quarantine_table_uri=q)
        if i == 0:
            run_load(spark, spec)
        else:
            with pytest.raises(BatchError, match="serves one main table per pipeline id"):
                run_load(spark, spec)
            assert not os.path.exists(os.path.join(table, "_delta_log"))


# -- round 3 -------------------------------------------------------------------------------
def _move(src: str, dst_dir: str) -> str:
    os.makedirs(dst_dir, exist_ok=True)
    dst = os.path.join(dst_dir, os.path.basename(src))
    os.rename(src, dst)  # a rename keeps size and mtime
    return dst


def test_a_refreeze_that_never_committed_does_not_move_the_frontier(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    write_order_files(landing, 2, 3)
    source = orders_source(landing)
    g0 = plan_for(source, table, run="run-1")
    b = g0.inputs[1]["path"]
    aside = _move(b, str(tmp_path / "aside"))
    refrozen = restate(source, table, g0, run="fix")  # g1 without b; this run then dies
    assert len(refrozen.inputs) == 1
    os.rename(aside, b)
    assert run_load(spark, spec_for(source, table, g0, try_number=2)).generation == 0  # g0 lands, with b
    assert (
        source.plan(PlanLog(TableRef.parse(table), PIPELINE), run_token="run-2", is_committed=lambda k: True)
        is None
    )
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 6, cmp.describe()


def test_a_refreeze_does_not_swap_out_files_a_zombie_landed_meanwhile(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    write_order_files(landing, 2, 3)
    source = orders_source(landing)
    g0 = plan_for(source, table, run="run-1")
    b = g0.inputs[1]["path"]
    aside = _move(b, str(tmp_path / "aside"))
    refrozen = restate(source, table, g0, run="fix")
    os.rename(aside, b)
    run_load(spark, spec_for(source, table, g0))  # the zombie of generation 0 lands, with b
    with pytest.raises(BatchError, match="left out as gone"):
        run_load(spark, spec_for(source, table, refrozen, restate=True))
    again = restate(source, table, g0, run="fix-2")  # the way out: restate the committed batch
    assert {f["path"] for f in again.inputs} == {f["path"] for f in g0.inputs}
    run_load(spark, spec_for(source, table, again, restate=True))
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 6, cmp.describe()


def test_restating_a_plan_stored_through_a_symlink_by_an_older_release_stays_canonical(
    spark: Any, tmp_path: Any, table: str
) -> None:
    real, link = str(tmp_path / "real"), str(tmp_path / "land")
    write_order_files(real, 2, 3)
    os.symlink(real, link)
    source = orders_source(link)
    g0 = plan_for(source, table, run="r0")
    run_load(spark, spec_for(source, table, g0))
    # Rewrite the stored plan as an older release wrote it: paths as given, no source.
    import json

    from airflow_eod.core.batch import fingerprint

    path = os.path.join(table, "_eod", "pipelines", PIPELINE, "offsets", f"{0:08d}.json")
    body = json.load(open(path))
    body.pop("checksum")
    body.pop("source")
    body["inputs"] = [dict(f, path=f["path"].replace(real, link)) for f in body["inputs"]]
    body["boundary"]["directory"] = link
    body["checksum"] = fingerprint(body)
    json.dump(body, open(path, "w"))
    old = PlanLog(TableRef.parse(table), PIPELINE).get_plan(g0.batch_key)
    assert old is not None
    g1 = restate(source, table, old)
    assert all(f["path"].startswith(real) for f in g1.inputs) and g1.boundary["directory"] == real
    run_load(spark, spec_for(source, table, g1, restate=True))
    assert (
        source.plan(PlanLog(TableRef.parse(table), PIPELINE), run_token="r2", is_committed=lambda k: True)
        is None
    )
    write_order_files(real, 1, 2, first_id=900)
    nxt = plan_for(source, table, run="r3")
    assert [os.path.basename(f["path"]) for f in nxt.inputs] == ["orders-000900-0000.csv"]


@pytest.mark.badinput
def test_a_quarantine_table_of_another_table_id_is_refused_before_the_main_commit(
    spark: Any, tmp_path: Any, table: str
) -> None:
    import shutil

    q = str(tmp_path / "rejects")
    for day in (0, 1):
        landing = str(tmp_path / f"day{day}")
        write_order_files(landing, 1, 3, first_id=1 + 100 * day)
        _with_reject(landing, f"bad{day}")
        source = orders_source(landing, boundary="interval")
        spec = spec_for(source, table, _interval_plan(source, table, day), quarantine_table_uri=q)
        if day == 0:
            run_load(spark, spec)
            shutil.rmtree(os.path.join(q, "_delta_log"))  # the quarantine table is dropped, _eod stays
            version = DeltaTable(table).version()
        else:
            with pytest.raises(Exception, match="belongs to table"):
                run_load(spark, spec)
            assert DeltaTable(table).version() == version
