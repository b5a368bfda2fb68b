"""The delta-rs commit engine and the ask, on real Delta tables (no JVM: files are written
with pyarrow the way Spark stages them)."""

from __future__ import annotations

import contextlib
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
from airflow_eod.core.table_ref import TableRef
from tests.support.helpers import LOST_VERSION_RACE, commit_log, lost_races, stage_data
from tests.support.rendezvous import arrivals, arrive, meeting_before_commit, wait_for

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


# How long a racing test may take at all (a wedge guard: expiring fails the test).
WEDGE = 600


def _race(args: tuple[str, str, int]) -> tuple[bool, int, list[str]]:
    table, rendezvous, i = args
    # Every racer asks first, then waits before its commit (or table creation) until all four
    # have asked, so all of them commit from the same empty or stale view: the race is
    # certain, however slowly the machine starts them.
    staged, manifest = stage_data(table, BATCH, rows(10), attempt=f"racer{i}")
    with commit_log() as messages, meeting_before_commit(rendezvous, f"racer{i}", 4) as met:
        ours = commit_batch(TableRef.parse(table), BATCH, 0, staged, manifest)[0]
    return ours, lost_races("\n".join(messages)), met


def _four_racers(table: str, rendezvous: str) -> list[tuple[bool, int, list[str]]]:
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        # A racer waiting at the rendezvous holds its worker, so each of the four takes one.
        results = pool.map_async(_race, [(table, rendezvous, i) for i in range(4)]).get(WEDGE)
    # They overlapped: each of the four reached its commit only after all four had asked.
    assert arrivals(rendezvous) == [f"racer{i}" for i in range(4)]
    assert sorted(m for _, _, m in results) == [[f"racer{i}"] for i in range(4)]
    return results


@pytest.mark.faults
def test_racing_processes_commit_a_batch_exactly_once(table: str, tmp_path: Any) -> None:
    # The table exists first, so the race is on the batch's marker, not on creation.
    other = BatchKey("tests.engine", "seed")
    commit_batch(TableRef.parse(table), other, 0, *stage_data(table, other, rows(1, 1000)))
    results = _four_racers(table, str(tmp_path / "rendezvous"))
    assert sorted(ours for ours, _, _ in results) == [False, False, False, True]
    # The race happened: each loser's commit was fenced off once and it asked again (not a
    # racer that came late and found the batch committed); the winner lost none.
    assert [lost for ours, lost, _ in results if ours] == [0]
    assert [lost for ours, lost, _ in results if not ours] == [1, 1, 1], results
    dt = DeltaTable(table)
    assert dt.version() == 1
    assert sorted(pa.table(dt.to_pyarrow_table())["id"].to_pylist()) == [*range(10), 1000]


@pytest.mark.faults
def test_racing_processes_creating_the_table_commit_once(table: str, tmp_path: Any) -> None:
    results = _four_racers(table, str(tmp_path / "rendezvous"))
    assert sorted(ours for ours, _, _ in results) == [False, False, False, True]
    assert [lost for ours, lost, _ in results if ours] == [0]
    lost = [lost for ours, lost, _ in results if not ours]
    assert lost == [1, 1, 1], f"a loser did not lose the creation race: {results}"
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


def test_stats_of_a_column_whose_name_has_a_dot_are_its_own(tmp_path: Any) -> None:
    """A top-level column ``v.x`` beside a struct ``v`` with a field ``x``: Parquet names both
    leaves ``v.x``; each gets its own statistics, under its own name (was: every load of a
    table with a dotted column name failed in the stats, 'Column v does not exist')."""
    path = str(tmp_path / "f.parquet")
    pq.write_table(
        pa.table(
            {
                "v.x": pa.array([10, 20], pa.int64()),
                "v": pa.array([{"x": 1, "y.z": "a"}, {"x": 2, "y.z": None}]),
                "m": pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64())),
                "w.l": pa.array([[{"a": 1}], []], pa.list_(pa.struct([("a", pa.int64())]))),
            }
        ),
        path,
    )
    stats = json.loads(file_stats(path)[1])
    assert stats["minValues"]["v.x"] == 10 and stats["maxValues"]["v.x"] == 20
    assert stats["minValues"]["v"] == {"x": 1, "y.z": "a"} and stats["maxValues"]["v"] == {"x": 2, "y.z": "a"}
    assert stats["nullCount"]["v"] == {"x": 0, "y.z": 1} and stats["nullCount"]["v.x"] == 0
    assert set(stats["minValues"]) == {"v.x", "v"}, "leaves inside a map or a list get no statistics"


def _paused_commit(table: str, rendezvous: str, queue: Any) -> None:
    # Asks, then holds before its commit until the test has committed the winner.
    staged, manifest = stage_data(table, BATCH, rows(10), attempt="paused")
    with commit_log() as messages, meeting_before_commit(rendezvous, "paused", 2):
        ours, status = commit_batch(TableRef.parse(table), BATCH, 0, staged, manifest)
    queue.put((ours, status.committed, status.manifest.attempt_id if status.manifest else None, messages))


@pytest.mark.faults
def test_an_attempt_that_asked_before_a_racer_committed_is_fenced(table: str, tmp_path: Any) -> None:
    """The loser's ask and commit share a snapshot; the racer's marker makes its commit fail."""
    other = BatchKey("tests.engine", "seed")
    commit_batch(TableRef.parse(table), other, 0, *stage_data(table, other, rows(1, 1000)))
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    rendezvous = str(tmp_path / "rendezvous")
    paused = ctx.Process(target=_paused_commit, args=(table, rendezvous, queue))
    paused.start()
    # The paused attempt has asked and holds before its commit; the winner commits meanwhile.
    assert wait_for(rendezvous, 1) == ["paused"]
    staged, manifest = stage_data(table, BATCH, rows(10), attempt="winner")
    assert commit_batch(TableRef.parse(table), BATCH, 0, staged, manifest)[0]
    arrive(rendezvous, "winner")
    ours, committed, attempt, messages = queue.get(timeout=WEDGE)
    paused.join(WEDGE)
    assert paused.exitcode == 0
    assert (ours, committed, attempt) == (False, True, "winner")
    assert any(LOST_VERSION_RACE in m for m in messages), f"the paused attempt was not fenced: {messages}"
    dt = DeltaTable(table)
    assert dt.version() == 1
    assert sorted(pa.table(dt.to_pyarrow_table())["id"].to_pylist()) == [*range(10), 1000]


def _evolving_commit(table: str, queue: Any, rendezvous: str | None) -> None:
    # With a rendezvous: ask, then hold before the commit until the other one has committed.
    batch = BatchKey("tests.engine", "widened")
    data = rows(3, 50).append_column("extra", pa.array([1.0, 2.0, 3.0]))
    staged, manifest = stage_data(table, batch, data, attempt="paused" if rendezvous else "winner")
    with commit_log() as messages, contextlib.ExitStack() as stack:
        if rendezvous:
            stack.enter_context(meeting_before_commit(rendezvous, "paused", 2))
        ours, status = commit_batch(
            TableRef.parse(table), batch, 0, staged, manifest, schema_policy="add_columns"
        )
    queue.put((ours, status.committed, lost_races("\n".join(messages))))


@pytest.mark.faults
def test_racing_schema_widening_commits_land_once(table: str, tmp_path: Any) -> None:
    """The schema-widening commit is written by airflow-eod itself; a racer that took the
    version first makes it go back to the ask instead of overwriting."""
    commit_batch(TableRef.parse(table), BATCH, 0, *stage_data(table, BATCH, rows(2)))
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    rendezvous = str(tmp_path / "rendezvous")
    paused = ctx.Process(target=_evolving_commit, args=(table, queue, rendezvous))
    winner = ctx.Process(target=_evolving_commit, args=(table, queue, None))
    paused.start()
    assert wait_for(rendezvous, 1) == ["paused"]  # it has asked and holds before its commit
    winner.start()
    first = queue.get(timeout=WEDGE)
    winner.join(WEDGE)
    arrive(rendezvous, "winner")
    second = queue.get(timeout=WEDGE)
    paused.join(WEDGE)
    assert (winner.exitcode, paused.exitcode) == (0, 0)
    # The paused one lost the race for the version (and asked again), the other did not.
    assert (first, second) == ((True, True, 0), (False, True, 1))
    dt = DeltaTable(table)
    assert dt.version() == 1
    assert sorted(pa.table(dt.to_pyarrow_table())["id"].to_pylist()) == [0, 1, 50, 51, 52]
    assert [f["name"] for f in json.loads(dt.schema().to_json())["fields"]] == ["id", "v", "extra"]
