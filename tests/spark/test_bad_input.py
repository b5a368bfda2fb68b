"""Bad input: each case gets an error that names the batch and the cause, and the table
version does not change (or a documented quarantine takes the bad records)."""

from __future__ import annotations

import json
import os
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
    MalformedInputError,
    PlanLogError,
    RetentionWindowError,
    SchemaMismatchError,
    UnsupportedTableError,
)
from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import check, orders_source, plan_for, spec_for

pytestmark = [pytest.mark.badinput, pytest.mark.spark]
DAY = datetime(2026, 11, 10, tzinfo=UTC)


def _version(table: str) -> int | None:
    t = open_table(TableRef.parse(table))
    return None if t is None else t.version()


def _loaded(spark: Any, landing: str, table: str) -> int:
    """A table that already holds one good batch; returns its version."""
    write_order_files(landing, 1, 10)
    source = orders_source(landing)
    run_load(spark, spec_for(source, table, plan_for(source, table, run="seed")))
    return DeltaTable(table).version()


def _append(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


CSV_HEADER = "order_id,customer,amount,order_date,ordered_at\n"


def test_malformed_csv_rows_fail_the_batch_naming_files_and_counts(
    spark: Any, landing: str, table: str
) -> None:
    version = _loaded(spark, landing, table)
    _append(
        os.path.join(landing, "z-bad1.csv"),
        CSV_HEADER
        + "100,ok,1.00,2026-11-01,2026-11-01T00:00:00Z\n"
        + "not-a-number,x,1.00,2026-11-01,2026-11-01T00:00:00Z\n",
    )
    _append(os.path.join(landing, "z-bad2.csv"), CSV_HEADER + "101,x,1.00,not-a-date,2026-11-01T00:00:00Z\n")
    source = orders_source(landing)
    plan = plan_for(source, table, run="bad")
    with pytest.raises(MalformedInputError) as err:
        run_load(spark, spec_for(source, table, plan))
    text = str(err.value)
    assert text.startswith(f"batch {plan.key.label}: 2 malformed record(s)")
    assert "z-bad1.csv: 1" in text and "z-bad2.csv: 1" in text and "nothing was committed" in text
    assert _version(table) == version and not ask(TableRef.parse(table), plan.key).committed


def test_malformed_json_records_fail_the_batch(spark: Any, landing: str, table: str) -> None:
    _append(
        os.path.join(landing, "a.json"), '{"id": 1, "name": "a"}\n{"id": "oops", "name": "b"}\n{broken json\n'
    )
    source = LandingFilesSource(path=landing, file_format="json", schema="id INT, name STRING")
    plan = plan_for(source, table)
    with pytest.raises(MalformedInputError, match=r"2 malformed record\(s\) .*a\.json: 2"):
        run_load(spark, spec_for(source, table, plan))
    assert _version(table) is None


def test_quarantine_takes_bad_records_and_the_table_takes_the_good_ones_once(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    write_order_files(landing, 1, 20)
    _append(
        os.path.join(landing, "z-bad.csv"),
        CSV_HEADER + "x1,a,1,2026-11-01,2026-11-01T00:00:00Z\nx2,b,2,2026-11-01,2026-11-01T00:00:00Z\n",
    )
    quarantine = str(tmp_path / "quarantine")
    source = orders_source(landing)
    plan = plan_for(source, table)
    result = run_load(spark, spec_for(source, table, plan, quarantine_table_uri=quarantine))
    assert result.outcome == "committed" and result.rows == 20
    again = run_load(spark, spec_for(source, table, plan, try_number=2, quarantine_table_uri=quarantine))
    assert again.outcome == "already_committed"
    bad = pa.table(DeltaTable(quarantine).to_pyarrow_table()).to_pylist()
    assert sorted(r["raw_record"].split(",")[0] for r in bad) == ["x1", "x2"]
    assert all(r["source_file"].endswith("z-bad.csv") for r in bad)
    assert ask(TableRef.parse(quarantine), plan.key).committed and DeltaTable(quarantine).version() == 0
    os.unlink(os.path.join(landing, "z-bad.csv"))
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 20, cmp.describe()


def _parquet(path: str, table: pa.Table) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(table, path)


def test_a_new_source_column_fails_by_default_and_is_added_on_request(
    spark: Any, tmp_path: Any, table: str
) -> None:
    landing = str(tmp_path / "pq")
    _parquet(f"{landing}/a.parquet", pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
    source = LandingFilesSource(path=landing, file_format="parquet")
    run_load(spark, spec_for(source, table, plan_for(source, table, run="r0")))
    version = DeltaTable(table).version()
    _parquet(f"{landing}/b.parquet", pa.table({"id": pa.array([3], pa.int64()), "v": ["c"], "extra": [1.5]}))
    plan = plan_for(source, table, run="r1")
    with pytest.raises(SchemaMismatchError) as err:
        run_load(spark, spec_for(source, table, plan))
    assert str(err.value).startswith(f"batch {plan.key.label}: schema does not match")
    assert 'new column extra ("double")' in str(err.value) and "schema_drift='add_columns'" in str(err.value)
    assert DeltaTable(table).version() == version

    result = run_load(spark, spec_for(source, table, plan, schema_drift="add_columns"))
    assert result.outcome == "committed"
    dt = DeltaTable(table)
    assert [f["name"] for f in json.loads(dt.schema().to_json())["fields"]] == ["id", "v", "extra"]
    rows = sorted(pa.table(dt.to_pyarrow_table()).to_pylist(), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "v": "a", "extra": None},
        {"id": 2, "v": "b", "extra": None},
        {"id": 3, "v": "c", "extra": 1.5},
    ]
    # The widened schema, the data and the marker are one commit; no old file was removed.
    log_line = [
        json.loads(x) for x in open(os.path.join(table, "_delta_log", f"{result.table_version:020d}.json"))
    ]
    kinds = sorted(next(iter(a)) for a in log_line)
    assert kinds == ["add", "commitInfo", "metaData", "txn"]


def test_an_incompatible_type_change_always_fails(spark: Any, tmp_path: Any, table: str) -> None:
    landing = str(tmp_path / "pq")
    _parquet(f"{landing}/a.parquet", pa.table({"id": pa.array([1], pa.int64()), "v": ["a"]}))
    source = LandingFilesSource(path=landing, file_format="parquet")
    run_load(spark, spec_for(source, table, plan_for(source, table, run="r0")))
    version = DeltaTable(table).version()
    _parquet(f"{landing}/b.parquet", pa.table({"id": ["two"], "v": ["b"]}))
    plan = plan_for(source, table, run="r1")
    with pytest.raises(
        SchemaMismatchError, match=r'column id is "string" in the batch but "long" in the table'
    ):
        run_load(spark, spec_for(source, table, plan, schema_drift="add_columns"))
    assert DeltaTable(table).version() == version


def test_a_missing_source_directory_names_the_batch(tmp_path: Any, table: str) -> None:
    source = orders_source(str(tmp_path / "nowhere"), boundary="interval")
    with pytest.raises(
        BatchError,
        match=r"batch tests.orders/i-20261110T000000Z-20261111T000000Z: landing "
        r"directory .*nowhere does not exist \(a missing source\)",
    ):
        source.plan(
            PlanLog(TableRef.parse(table), "tests.orders"),
            None,
            run_token="r",
            is_committed=lambda k: False,
            interval=(DAY, DAY + timedelta(days=1)),
        )
    assert _version(table) is None


def test_an_empty_interval_commits_an_empty_marker(spark: Any, tmp_path: Any, table: str) -> None:
    landing = str(tmp_path / "empty")
    os.makedirs(landing)
    source = orders_source(landing, boundary="interval")
    plan = source.plan(
        PlanLog(TableRef.parse(table), "tests.orders"),
        None,
        run_token="r",
        is_committed=lambda k: False,
        interval=(DAY, DAY + timedelta(days=1)),
    )
    assert plan is not None and plan.inputs == []
    result = run_load(spark, spec_for(source, table, plan))
    assert result.outcome == "committed" and result.rows == 0
    assert (
        ask(TableRef.parse(table), plan.key).committed
        and pa.table(DeltaTable(table).to_pyarrow_table()).num_rows == 0
    )


def test_a_target_that_is_not_a_delta_table_is_refused(spark: Any, landing: str, tmp_path: Any) -> None:
    target = tmp_path / "not_delta"
    target.mkdir()
    (target / "report.csv").write_text("a,b\n")
    write_order_files(landing, 1, 5)
    source = orders_source(landing)
    with pytest.raises(UnsupportedTableError, match="exists but is not a Delta table"):
        plan_for(source, str(target))
    assert sorted(os.listdir(target)) == ["report.csv"], "no plan log, no data files, no Delta log"


def test_a_hand_edited_plan_is_refused_and_nothing_is_committed(spark: Any, landing: str, table: str) -> None:
    version = _loaded(spark, landing, table)
    write_order_files(landing, 1, 5, first_id=500)
    source = orders_source(landing)
    plan = plan_for(source, table, run="next")
    path = os.path.join(table, "_eod", "pipelines", "tests.orders", "offsets", f"{plan.seq:08d}.json")
    body = json.load(open(path))
    body["inputs"] = body["inputs"][:0]
    json.dump(body, open(path, "w"))
    with pytest.raises(PlanLogError, match="fails its checksum"):
        plan_for(source, table, run="next")
    assert DeltaTable(table).version() == version


def test_a_batch_older_than_the_retention_window_is_refused_unless_restated(
    spark: Any, landing: str, table: str
) -> None:
    version = _loaded(spark, landing, table)
    write_order_files(landing, 1, 5, first_id=900)
    source = orders_source(landing)
    plan = plan_for(source, table, run="old")
    old = replace(plan, planned_at=(datetime.now(UTC) - timedelta(days=40)).isoformat())
    with pytest.raises(RetentionWindowError) as err:
        run_load(spark, spec_for(source, table, old))
    text = str(err.value)
    assert (
        text.startswith(f"batch {plan.key.label}:")
        and "(delta.setTransactionRetentionDuration = 30 days, less a 60 minutes clock-skew margin)" in text
    )
    assert "restate" in text and DeltaTable(table).version() == version
    result = run_load(spark, spec_for(source, table, old, restate=True))
    assert result.outcome == "committed"
    cmp = check(table, landing)
    assert cmp.exact, cmp.describe()


@pytest.mark.faults
@pytest.mark.parametrize("point", ["before_write", "after_stage", "before_commit", "after_commit"])
def test_a_crash_between_the_quarantine_and_the_main_commit_loads_each_once(
    spark: Any, landing: str, table: str, tmp_path: Any, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_eod.core.faults import InjectedFault

    write_order_files(landing, 1, 12)
    _append(os.path.join(landing, "z-bad.csv"), CSV_HEADER + "x1,a,1,2026-11-01,2026-11-01T00:00:00Z\n")
    quarantine = str(tmp_path / "quarantine")
    source = orders_source(landing)
    plan = plan_for(source, table)
    monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, table, plan, quarantine_table_uri=quarantine))
    retry = run_load(spark, spec_for(source, table, plan, try_number=2, quarantine_table_uri=quarantine))
    assert retry.rows == 12
    assert (
        DeltaTable(quarantine).version() == 0
        and pa.table(DeltaTable(quarantine).to_pyarrow_table()).num_rows == 1
    )
    assert len(DeltaTable(table).history()) == 1
    os.unlink(os.path.join(landing, "z-bad.csv"))
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 12, cmp.describe()


@pytest.mark.faults
@pytest.mark.parametrize("point", ["before_write", "after_stage", "before_commit", "after_commit"])
def test_a_schema_widening_load_that_crashes_at_a_boundary_lands_once(
    spark: Any, tmp_path: Any, table: str, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_eod.core.faults import InjectedFault
    from airflow_eod.examples.compare import compare_rows, read_delta_rows

    landing = str(tmp_path / "pq")
    _parquet(f"{landing}/a.parquet", pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
    source = LandingFilesSource(path=landing, file_format="parquet")
    run_load(spark, spec_for(source, table, plan_for(source, table, run="r0")))
    _parquet(
        f"{landing}/b.parquet",
        pa.table({"id": pa.array([3, 4], pa.int64()), "v": ["c", "d"], "extra": [1.5, None]}),
    )
    plan = plan_for(source, table, run="r1")
    monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, table, plan, schema_drift="add_columns"))
    retry = run_load(spark, spec_for(source, table, plan, try_number=2, schema_drift="add_columns"))
    assert retry.outcome == ("already_committed" if point == "after_commit" else "committed")
    assert len(DeltaTable(table).history()) == 2, "one load, one widening commit"
    source_rows = [(1, "a", None), (2, "b", None), (3, "c", 1.5), (4, "d", None)]
    cmp = compare_rows(source_rows, read_delta_rows(table, ["id", "v", "extra"]))
    assert cmp.exact, cmp.describe()
