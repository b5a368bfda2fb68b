"""Failures the chaos harness found (tests/chaos/), each pinned by a named test.

No Spark: batches are staged with pyarrow the way Spark stages them and committed by the
real commit engine.

Pinned here: chaos seed 21 (restating a committed batch whose landing file is gone must say
"restore the file", not "restate") and chaos seed 100 (a table directory a racer creates
between two checks is no table yet, not "a file").
"""

from __future__ import annotations

import os
from typing import Any

import pytest

# open_table (and the `os` the racer patches) moved from the ask to core/delta/table.py (e6eaaa8).
from airflow_eod.core.delta import table as ask_module
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import InputChangedError
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from tests.support.helpers import orders_source, plan_for, restate, stage_rows

pytestmark = pytest.mark.chaos


def test_restating_a_committed_batch_whose_file_is_gone_says_restore_it_not_restate_it(
    landing: str, table: str
) -> None:
    """Chaos seed 21 (first harness run): a committed offset batch lost one of its landing
    files and was restated. Every try failed with "re-freeze the batch on purpose
    (restate=True ...)", the very thing that was failing, so the runbook looped."""
    write_order_files(landing, 2, 3)
    source = orders_source(landing)
    plan = plan_for(source, table)
    staged, manifest = stage_rows(table, plan, 0, "g0", [1, 2, 3])
    ours, _ = commit_batch(TableRef.parse(table), plan.key, 0, staged, manifest)
    assert ours
    version = open_table(TableRef.parse(table)).version()  # type: ignore[union-attr]
    gone = plan.inputs[0]["path"]
    os.unlink(gone)
    with pytest.raises(InputChangedError) as err:
        restate(source, table, plan)
    text = str(err.value)
    assert gone in text and plan.batch_key in text
    assert "restore the file" in text and "restate=True" not in text
    assert open_table(TableRef.parse(table)).version() == version  # type: ignore[union-attr]
    # The pipeline itself is not stuck: the next batch plans.
    write_order_files(os.path.join(landing, "more"), 1, 2)
    assert plan_for(source, table, run="run-2").seq == 1


def test_a_table_directory_created_by_a_racer_is_no_table_yet_not_a_file(
    table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chaos seed 100: two first loads of a new table in a parallel backfill. One asked
    "is the path a directory?" (no), the other created the table directory, and the first
    then asked "does the path exist?" (yes) and failed with "... is a file, not a Delta table
    directory". The answer now comes from one stat."""
    real_isdir = os.path.isdir

    def racer_creates_it_right_after(path: Any) -> bool:
        answer = real_isdir(path)
        os.makedirs(os.path.join(table, "_delta_log"), exist_ok=True)
        return answer

    monkeypatch.setattr(ask_module.os.path, "isdir", racer_creates_it_right_after)
    assert open_table(TableRef.parse(table)) is None
    assert open_table(TableRef.parse(table)) is None  # and with the directory there from the start
