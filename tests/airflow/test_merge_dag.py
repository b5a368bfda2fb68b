"""The merge example DAG (dags/eod_cdc_merge_example.py) under ``dag.test()``: a crash before
the commit and one after it, each on the first try, and the retries; after each run the
table is compared with the change files' newest row per key."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from tests.conftest import REPO
from tests.support.helpers import load_dag_file, task_tries, xcom_value
from tests.support.merge_helpers import Change, check_merge, write_changes

pytestmark = [
    pytest.mark.merge,
    pytest.mark.faults,
    pytest.mark.airflow,
    pytest.mark.spark,
    pytest.mark.airflow_current_only,
]

TASK = "merge_changes"


def _dag(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, str, str, str]:
    landing, table, quarantine = (str(tmp_path / n) for n in ("landing", "table", "quarantine"))
    monkeypatch.setenv("EOD_CDC_LANDING", landing)
    monkeypatch.setenv("EOD_CDC_TABLE", table)
    monkeypatch.setenv("EOD_CDC_QUARANTINE", quarantine)
    return load_dag_file(os.path.join(REPO, "dags", "eod_cdc_merge_example.py")), landing, table, quarantine


def _run(module: ModuleType, hour: int, faults: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("EOD_FAULTPOINTS", faults)
    try:
        return module.dag.test(logical_date=datetime(2026, 11, 20, hour, tzinfo=UTC))
    finally:
        monkeypatch.delenv("EOD_FAULTPOINTS")


def test_the_merge_example_dag_retries_crashes_before_and_after_the_commit(
    airflow_db: str, spark: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, landing, table, quarantine = _dag(tmp_path, monkeypatch)
    first: list[Change] = [(i, f"n{i}", i * 10, 1, "I") for i in range(1, 31)]
    write_changes(landing, "changes-0001.csv", first)

    # Try 1 dies after staging, before its commit; try 2 merges the batch.
    run = _run(module, 1, "after_stage=raise@1", monkeypatch)
    assert str(run.state) == "success"
    assert task_tries(run.run_id, TASK) == ["failed", "success"]
    result = xcom_value(run.run_id, TASK)
    assert (result["outcome"], result["rows"], result["table_version"]) == ("committed", 30, 0)
    got = check_merge(table, first)
    assert got.ok, got

    # Two files of changes: updates of loaded keys, deletes, inserts, a stale update (an
    # older seq, which must not win), several changes of one key, and a malformed record.
    second: list[Change] = [(i, f"u{i}", i * 100, 2, "U") for i in range(1, 6)]
    second += [(7, "n7", 70, 3, "D"), (31, "n31", 310, 2, "I"), (9, "stale", 0, 0, "U")]
    third: list[Change] = [(1, "u1 again", 111, 4, "U"), (7, "back7", 77, 5, "I"), (12, "n12", 120, 4, "D")]
    write_changes(landing, "changes-0002.csv", second)
    path = write_changes(landing, "changes-0003.csv", third)
    with open(path, "a") as fh:
        fh.write("13,not a number,lots,4,U\n")

    # Try 1 dies after its commit; try 2 finds the batch committed and merges nothing again.
    run2 = _run(module, 2, "after_commit=raise@1", monkeypatch)
    assert str(run2.state) == "success"
    assert task_tries(run2.run_id, TASK) == ["failed", "success"]
    result2 = xcom_value(run2.run_id, TASK)
    assert (result2["outcome"], result2["rows"], result2["table_version"]) == ("already_committed", 9, 1)
    assert DeltaTable(table).version() == 1, "the retry added no table version"
    history = DeltaTable(table).history()
    assert history[0]["operation"] == "MERGE"
    got = check_merge(table, first + second + third)
    assert got.ok, got
    bad = pa.table(DeltaTable(quarantine).to_pyarrow_table()).to_pylist()
    assert [r["raw_record"] for r in bad] == ["13,not a number,lots,4,U"]

    # A run with nothing new merges nothing.
    run3 = _run(module, 3, "", monkeypatch)
    assert xcom_value(run3.run_id, TASK)["outcome"] == "no_new_data"
    assert DeltaTable(table).version() == 1
