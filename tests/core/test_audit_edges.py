"""The audit's and the console script's edges (issue 18, items 4, 13 and 17): `verify` on
another writer's identical appends, `ask` on a pipeline or batch that does not exist, and
`status` on an interval pipeline with a missing day. Real Delta tables, no Spark."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from airflow_eod.cli import main
from airflow_eod.core.audit.verify import audit_table
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.table_ref import TableRef
from tests.support.helpers import stage_data

PIPE = "tests.edges"


def _day(day: int) -> str:
    return f"i-202611{day:02d}T000000Z-202611{day + 1:02d}T000000Z"


def _load(table: str, day: int, rows: int = 3) -> None:
    """Plan and commit the interval batch of November ``day`` (``rows`` rows)."""
    key = _day(day)
    PlanLog(TableRef.parse(table), PIPE).put_plan(Plan(PIPE, key, "interval", {"day": day}, []))
    batch = BatchKey(PIPE, key)
    data = pa.table({"id": pa.array(range(day * 100, day * 100 + rows), pa.int64())})
    ours, status = commit_batch(TableRef.parse(table), batch, 0, *stage_data(table, batch, data))
    assert ours and status.committed_generation == 0


@pytest.mark.guarantee
def test_two_identical_appends_by_another_writer_are_not_an_error(table: str, capsys: Any) -> None:
    """Before: each file was `foreign_file` (allowed) and the pair also the error
    `duplicate_file_content`, so verify exited 1 on a table whose batches are all loaded once."""
    _load(table, 20)
    theirs = pa.table({"id": pa.array([7, 8, 9], pa.int64())})
    write_deltalake(table, theirs, mode="append")
    write_deltalake(table, theirs, mode="append")
    report = audit_table(table)
    assert report.ok, report.errors
    assert sorted(f.kind for f in report.findings) == ["foreign_file", "foreign_file"]
    assert [(b.batch_key, b.live_rows) for b in report.batches] == [(_day(20), 3)]
    assert main(["verify", table]) == 0
    assert "verify: 1 batch, 0 errors, 2 warnings" in capsys.readouterr().out


@pytest.mark.guarantee
def test_a_copy_of_a_batch_file_beside_another_writers_twin_is_still_a_duplicate(table: str) -> None:
    """The other side of the rule above: identical files count as a copy as soon as one of
    them is airflow-eod's (here a batch's file appended again by another writer)."""
    _load(table, 20)
    batch_file = next(
        os.path.join(root, n)[len(table) + 1 :]
        for root, _, names in os.walk(os.path.join(table, "eod_data"))
        for n in names
        if n.endswith(".parquet")
    )
    for name in ("copy-1.parquet", "copy-2.parquet"):
        shutil.copy(os.path.join(table, batch_file), os.path.join(table, name))
    from tests.core.test_verify import _append_files

    _append_files(table, ["copy-1.parquet", "copy-2.parquet"])
    report = audit_table(table)
    dups = [f for f in report.findings if f.kind == "duplicate_file_content"]
    assert len(dups) == 1 and dups[0].paths == sorted([batch_file, "copy-1.parquet", "copy-2.parquet"])
    assert dups[0].batch_key == _day(20) and not report.ok


def test_ask_tells_a_mistyped_pipeline_and_an_unplanned_batch_from_not_yet(table: str, capsys: Any) -> None:
    """Before: all three read `committed: false` with exit 1, like a batch not loaded yet."""
    _load(table, 20)
    PlanLog(TableRef.parse(table), PIPE).put_plan(
        Plan(PIPE, _day(21), "interval", {"day": 21}, [])
    )  # planned only

    def ask(pipeline: str, key: str) -> tuple[int, dict[str, Any], str]:
        code = main(["ask", table, "--pipeline", pipeline, "--batch", key])
        out = capsys.readouterr()
        return code, json.loads(out.out), out.err

    code, body, err = ask(PIPE, _day(20))
    assert (code, body["state"], body["committed"], body["rows"]) == (0, "committed", True, 3) and not err
    code, body, err = ask(PIPE, _day(21))
    assert (code, body["state"], body["committed"]) == (1, "not_committed", False) and not err
    code, body, err = ask("tests.edgse", _day(20))  # a typo
    assert (code, body["state"], body["committed"]) == (3, "no_such_pipeline", False)
    assert "knows no pipeline tests.edgse" in err and body["reason"] in err
    code, body, err = ask("not a pipeline!", _day(20))
    assert (code, body["state"]) == (3, "no_such_pipeline") and "is not valid" in err
    code, body, err = ask(PIPE, _day(22))  # a day never planned
    assert (code, body["state"], body["committed"]) == (4, "no_such_batch", False)
    assert f"never planned a batch {_day(22)}" in err
    for malformed in ("i-2026-11-20", "o-abc", "2026/11/20", ""):
        code, body, err = ask(PIPE, malformed)
        assert (code, body["state"]) == (4, "no_such_batch"), malformed
        assert len(err.strip().splitlines()) == 1


def test_status_shows_the_gaps_between_loaded_intervals(table: str, capsys: Any) -> None:
    """Before: a missing day (the 22nd between the 21st and the 23rd) was not flagged."""
    for day in (20, 21, 23, 26):
        _load(table, day)
    PlanLog(TableRef.parse(table), PIPE).put_plan(
        Plan(PIPE, _day(24), "interval", {"day": 24}, [])
    )  # planned only
    assert main(["status", table]) == 0
    out = capsys.readouterr().out
    assert f"pipeline {PIPE}: 4 committed, 1 planned but not committed, 12 rows, 2 GAPs" in out
    assert (
        f"  GAP  2026-11-22T00:00:00+00:00 to 2026-11-23T00:00:00+00:00: no committed interval "
        f"between {_day(21)} and {_day(23)}"
    ) in out
    assert "GAP  2026-11-24T00:00:00+00:00 to 2026-11-26T00:00:00+00:00" in out
    assert f"(planned, not committed: {_day(24)})" in out
    assert main(["status", table, "--json"]) == 0
    (body,) = json.loads(capsys.readouterr().out)
    assert body["gaps"] == [
        {
            "start": "2026-11-22T00:00:00+00:00",
            "end": "2026-11-23T00:00:00+00:00",
            "after": _day(21),
            "before": _day(23),
            "pending": [],
        },
        {
            "start": "2026-11-24T00:00:00+00:00",
            "end": "2026-11-26T00:00:00+00:00",
            "after": _day(23),
            "before": _day(26),
            "pending": [_day(24)],
        },
    ]


def test_status_shows_no_gap_for_contiguous_or_overlapping_intervals(table: str, capsys: Any) -> None:
    """Contiguous days, and an interval that reaches past the next one's start, leave no gap;
    offset batches have none."""
    for day in (20, 21, 22):
        _load(table, day)
    key = "i-20261122T120000Z-20261123T120000Z"  # half a day past the 22nd
    PlanLog(TableRef.parse(table), PIPE).put_plan(Plan(PIPE, key, "interval", {}, []))
    batch = BatchKey(PIPE, key)
    commit_batch(
        TableRef.parse(table),
        batch,
        0,
        *stage_data(table, batch, pa.table({"id": pa.array([1], pa.int64())})),
    )
    assert main(["status", table, "--json"]) == 0
    (body,) = json.loads(capsys.readouterr().out)
    assert body["gaps"] == [] and len(body["batches"]) == 4
    assert main(["status", table]) == 0
    assert "GAP" not in capsys.readouterr().out
