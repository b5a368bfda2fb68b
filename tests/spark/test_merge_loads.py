"""Merge loads (write_mode='merge'): upserts by a business key, newest row wins, exactly once."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from airflow_eod.core.ask import ask
from airflow_eod.core.table_ref import TableRef
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import plan_for, spec_for
from tests.support.merge_helpers import MERGE_SETTINGS, cdc_source, check_merge, write_changes

pytestmark = [pytest.mark.merge, pytest.mark.spark]


def _load(spark: Any, landing: str, table: str, run: str, **kw: Any) -> Any:
    source = cdc_source(landing)
    plan = plan_for(source, table, run, pipeline="tests.merge")
    return run_load(spark, spec_for(source, table, plan, **{**MERGE_SETTINGS, **kw}))


def test_updates_and_deletes_replace_rows_instead_of_adding_them(
    spark: Any, tmp_path: Any, table: str
) -> None:
    landing = str(tmp_path / "landing")
    first = [(i, f"n{i}", i * 10, 1, "I") for i in range(1, 21)]
    write_changes(landing, "c-0001.csv", first)
    r1 = _load(spark, landing, table, "run-1")
    assert r1.outcome == "committed" and r1.rows == 20
    # The pilot's case: 5 updates, a delete, 2 new keys, and a stale update (older seq).
    second = [(i, f"u{i}", i * 100, 2, "U") for i in range(1, 6)] + [(7, "n7", 70, 3, "D")]
    second += [(21, "n21", 210, 2, "I"), (22, "n22", 220, 2, "I"), (9, "stale", 0, 0, "U")]
    write_changes(landing, "c-0002.csv", second)
    r2 = _load(spark, landing, table, "run-2")
    assert r2.outcome == "committed" and r2.rows == len(second)
    got = check_merge(table, first + second)
    assert got.ok, got
    # The commit that merged is one commit: removes of the files it rewrote, its adds, the marker.
    status = ask(TableRef.parse(table), r2.batch_key and ask_key(table, r2))
    assert status.committed
    log = os.path.join(table, "_delta_log", f"{r2.table_version:020d}.json")
    kinds = [next(iter(json.loads(line))) for line in open(log)]
    assert "remove" in kinds and "add" in kinds and kinds.count("txn") == 1
    info = json.loads(open(log).readline())["commitInfo"]
    assert info["operation"] == "MERGE"
    # A retry of the merged batch writes nothing.
    again = _load(spark, landing, table, "run-2")
    assert again.outcome == "already_committed"
    assert check_merge(table, first + second).ok


def ask_key(table: str, result: Any) -> Any:
    from airflow_eod.core.batch import BatchKey

    return BatchKey("tests.merge", result.batch_key)
