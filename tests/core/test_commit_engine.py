"""The delta-rs commit engine and the ask, on real Delta tables (no JVM: files are written
with pyarrow the way Spark stages them)."""

from __future__ import annotations

import json
import multiprocessing
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_eod.core.ask import ask
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.cleanup import remove_uncommitted_attempts
from airflow_eod.core.delta.parquet_stats import file_stats
from airflow_eod.core.errors import SchemaMismatchError, UnsupportedTableError
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.table_layout import attempt_dir
from airflow_eod.core.table_ref import TableRef
from tests.support.helpers import LOST_VERSION_RACE, commit_log, lost_races, stage_data

BATCH = BatchKey("tests.engine", "i-20261120T000000Z-20261121T000000Z")


def rows(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {"id": pa.array(range(start, start + n), pa.int64()), "v": pa.array([f"r{i}" for i in range(n)])}
    )


def test_commit_lands_data_marker_and_manifest_in_one_commit(table: str) -> None:
    staged, manifest = stage_data(table, BATCH, rows(5))
    ours, status = commit_batch(TableRef.parse(table), BATCH, 0, staged, manifest)
    assert ours and status.committed and status.table_version == 0
    assert status.manifest == manifest
    log0 = [json.loads(line) for line in open(os.path.join(table, "_delta_log", "00000000000000000000.json"))]
    kinds = {next(iter(a)) for a in log0}
    assert {"add", "txn", "commitInfo", "metaData", "protocol"} <= kinds
    txn = next(a["txn"] for a in log0 if "txn" in a)
    assert txn["appId"] == BATCH.app_id and txn["version"] == 0 and txn["lastUpdated"] > 0
    dt = DeltaTable(table)
    assert dt.metadata().configuration["delta.setTransactionRetentionDuration"] == "interval 30 days"
    assert pa.table(dt.to_pyarrow_table()).num_rows == 5


def test_a_second_commit_of_the_same_batch_writes_nothing(table: str) -> None:
    commit_batch(TableRef.parse(table), BATCH, 0, *stage_data(table, BATCH, rows(5)))
    staged, manifest = stage_data(table, BATCH, rows(5))
    ours, status = commit_batch(TableRef.parse(table), BATCH, 0, staged, manifest)
    assert not ours and status.committed
    assert DeltaTable(table).version() == 0
    assert remove_uncommitted_attempts(TableRef.parse(table), status) == [staged.attempt_dir]
    assert not os.path.exists(os.path.join(table, staged.attempt_dir))


def test_batches_committed_out_of_order_are_all_kept(table: str) -> None:
    later = BatchKey("tests.engine", "i-20261121T000000Z-20261122T000000Z")
    earlier = BatchKey("tests.engine", "i-20261119T000000Z-20261120T000000Z")
    assert commit_batch(TableRef.parse(table), later, 0, *stage_data(table, later, rows(3, 100)))[0]
    assert commit_batch(TableRef.parse(table), earlier, 0, *stage_data(table, earlier, rows(4, 0)))[0]
    assert ask(TableRef.parse(table), later).committed and ask(TableRef.parse(table), earlier).committed
    got = sorted(pa.table(DeltaTable(table).to_pyarrow_table())["id"].to_pylist())
    assert got == [0, 1, 2, 3, 100, 101, 102]


def _race(args: tuple[str, int]) -> tuple[bool, int]:
    table, i = args
    # Every racer asks first, then pauses before its commit (EOD_FAULTPOINTS, set by the test
    # before the pool started), so all of them commit (or create the table) from the same
    # empty or stale view at about the same moment.
    staged, manifest = stage_data(table, BATCH, rows(10), attempt=f"racer{i}")
    with commit_log() as messages:
        ours = commit_batch(TableRef.parse(table), BATCH, 0, staged, manifest)[0]
    return ours, lost_races("\n".join(messages))


@pytest.mark.faults
def test_racing_processes_commit_a_batch_exactly_once(table: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The table exists first, so the race is on the batch's marker, not on creation.
    other = BatchKey("tests.engine", "seed")
    commit_batch(TableRef.parse(table), other, 0, *stage_data(table, other, rows(1, 1000)))
    monkeypatch.setenv("EOD_FAULTPOINTS", "before_commit=sleep:1")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_race, [(table, i) for i in range(4)])
    assert sorted(ours for ours, _ in results) == [False, False, False, True]
    # The race happened: a loser's commit was fenced off and it asked again (not only a
    # racer that came late and found the batch committed).
    assert [lost for ours, lost in results if ours] == [0]
    assert sum(lost for ours, lost in results if not ours) >= 1, results
    dt = DeltaTable(table)
    assert dt.version() == 1
    assert sorted(pa.table(dt.to_pyarrow_table())["id"].to_pylist()) == [*range(10), 1000]


@pytest.mark.faults
def test_racing_processes_creating_the_table_commit_once(table: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOD_FAULTPOINTS", "before_commit=sleep:1")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_race, [(table, i) for i in range(4)])
    assert sorted(ours for ours, _ in results) == [False, False, False, True]
    assert sum(lost for ours, lost in results if not ours) >= 1, "no loser lost the creation race"
    assert sorted(pa.table(DeltaTable(table).to_pyarrow_table())["id"].to_pylist()) == list(range(10))
    assert DeltaTable(table).version() == 0, "the losers wrote no commit"


def test_schema_drift_is_refused_and_the_table_is_unchanged(table: str) -> None:
    commit_batch(TableRef.parse(table), BATCH, 0, *stage_data(table, BATCH, rows(2)))
    drifted = BatchKey("tests.engine", "drifted")
    data = rows(2).append_column("extra", pa.array([1.0, 2.0]))
    with pytest.raises(SchemaMismatchError, match=r"batch tests.engine/drifted: .*new column extra"):
        commit_batch(TableRef.parse(table), drifted, 0, *stage_data(table, drifted, data))
    assert DeltaTable(table).version() == 0 and not ask(TableRef.parse(table), drifted).committed


def test_tables_with_constraints_are_refused(table: str) -> None:
    write_deltalake(table, rows(2))
    dt = DeltaTable(table)
    dt.alter.add_constraint({"id_positive": "id >= 0"})
    version = DeltaTable(table).version()
    with pytest.raises(UnsupportedTableError, match="CHECK constraints \\(id_positive\\)"):
        commit_batch(TableRef.parse(table), BATCH, 0, *stage_data(table, BATCH, rows(2)))
    assert DeltaTable(table).version() == version


def test_a_directory_that_is_not_a_delta_table_is_refused(table: str) -> None:
    os.makedirs(table)
    open(os.path.join(table, "somebody-elses.csv"), "w").close()
    with pytest.raises(UnsupportedTableError, match="is not a Delta table"):
        commit_batch(TableRef.parse(table), BATCH, 0, *stage_data(table, BATCH, rows(2)))


def test_stats_are_exact_or_absent(tmp_path: Any) -> None:
    import datetime as dt

    path = str(tmp_path / "f.parquet")
    ts = [
        dt.datetime(2026, 1, 1, 0, 0, 0, 1500, tzinfo=dt.UTC),
        dt.datetime(2026, 1, 2, 0, 0, 0, 999, tzinfo=dt.UTC),
    ]
    pq.write_table(
        pa.table(
            {
                "i": pa.array([3, None, 7], pa.int32()),
                "s": pa.array(["b", "a", "x" * 40]),
                "ts": pa.array([*ts, None], pa.timestamp("us", tz="UTC")),
                "st": pa.array([{"a": 1}, {"a": 5}, None], pa.struct([("a", pa.int64())])),
                "l": pa.array([[1], [2], []], pa.list_(pa.int64())),
            }
        ),
        path,
    )
    n, text = file_stats(path)
    stats = json.loads(text)
    assert n == 3 and stats["numRecords"] == 3
    assert stats["minValues"]["i"] == 3 and stats["maxValues"]["i"] == 7 and stats["nullCount"]["i"] == 1
    assert "s" not in stats["minValues"], "a string longer than 32 characters gets no min/max"
    assert stats["minValues"]["ts"] == "2026-01-01T00:00:00.001Z"  # floored to the millisecond
    assert stats["maxValues"]["ts"] == "2026-01-02T00:00:00.001Z"  # ceiled to the millisecond
    assert stats["minValues"]["st"] == {"a": 1} and stats["maxValues"]["st"] == {"a": 5}
    assert "l" not in stats["minValues"] and "l" not in stats["nullCount"]


def _paused_commit(table: str, queue: Any) -> None:
    # EOD_FAULTPOINTS="before_commit=sleep:4" comes from the test, set while it started us.
    staged, manifest = stage_data(table, BATCH, rows(10), attempt="paused")
    with commit_log() as messages:
        ours, status = commit_batch(TableRef.parse(table), BATCH, 0, staged, manifest)
    queue.put((ours, status.committed, status.manifest.attempt_id if status.manifest else None, messages))


@pytest.mark.faults
def test_an_attempt_that_asked_before_a_racer_committed_is_fenced(
    table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loser's ask and commit share a snapshot; the racer's marker makes its commit fail."""
    other = BatchKey("tests.engine", "seed")
    commit_batch(TableRef.parse(table), other, 0, *stage_data(table, other, rows(1, 1000)))
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    paused = ctx.Process(target=_paused_commit, args=(table, queue))
    monkeypatch.setenv("EOD_FAULTPOINTS", "before_commit=sleep:4")
    paused.start()
    monkeypatch.delenv("EOD_FAULTPOINTS")  # the winner, in this process, does not pause
    # Wait until the paused attempt has asked (it has staged its files) and is sleeping.
    deadline = 30.0
    marker = os.path.join(table, attempt_dir(BATCH, 0, "paused"))
    import time

    start = time.monotonic()
    while not os.path.exists(marker) and time.monotonic() - start < deadline:
        time.sleep(0.05)
    time.sleep(1.5)
    staged, manifest = stage_data(table, BATCH, rows(10), attempt="winner")
    assert commit_batch(TableRef.parse(table), BATCH, 0, staged, manifest)[0]
    ours, committed, attempt, messages = queue.get(timeout=60)
    paused.join(60)
    assert (ours, committed, attempt) == (False, True, "winner")
    assert any(LOST_VERSION_RACE in m for m in messages), f"the paused attempt was not fenced: {messages}"
    dt = DeltaTable(table)
    assert dt.version() == 1
    assert sorted(pa.table(dt.to_pyarrow_table())["id"].to_pylist()) == [*range(10), 1000]


def _evolving_commit(table: str, queue: Any, pause: float) -> None:
    # The paused one gets EOD_FAULTPOINTS="before_commit=sleep:<pause>" from the test.
    batch = BatchKey("tests.engine", "widened")
    data = rows(3, 50).append_column("extra", pa.array([1.0, 2.0, 3.0]))
    staged, manifest = stage_data(table, batch, data, attempt=f"p{pause}")
    with commit_log() as messages:
        ours, status = commit_batch(
            TableRef.parse(table), batch, 0, staged, manifest, schema_policy="add_columns"
        )
    queue.put((ours, status.committed, lost_races("\n".join(messages))))


@pytest.mark.faults
def test_racing_schema_widening_commits_land_once(table: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The schema-widening commit is written by airflow-eod itself; a racer that took the
    version first makes it go back to the ask instead of overwriting."""
    commit_batch(TableRef.parse(table), BATCH, 0, *stage_data(table, BATCH, rows(2)))
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_evolving_commit, args=(table, queue, p)) for p in (3.0, 0.0)]
    monkeypatch.setenv("EOD_FAULTPOINTS", "before_commit=sleep:3.0")
    procs[0].start()
    monkeypatch.delenv("EOD_FAULTPOINTS")
    import time

    time.sleep(2.0)  # the first has asked and is paused before its commit
    procs[1].start()
    results = sorted(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
    # The paused one lost the race for the version (and asked again), the other did not.
    assert results == [(False, True, 1), (True, True, 0)]
    dt = DeltaTable(table)
    assert dt.version() == 1
    assert sorted(pa.table(dt.to_pyarrow_table())["id"].to_pylist()) == [0, 1, 50, 51, 52]
    assert [f["name"] for f in json.loads(dt.schema().to_json())["fields"]] == ["id", "v", "extra"]
