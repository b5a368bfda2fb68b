"""Merge loads (write_mode='merge') under crashes, races, other writers, backfills in any
order, restatement and partitioning, with real Spark and real Delta tables.

Every case that commits ends with :func:`~tests.support.merge_helpers.check_merge` (the table
against the source's newest change per key, row by row) and with the table holding each
batch once: the ask says committed and the Delta log carries exactly one ``txn`` of the
batch's generation. The deletion-vector cases end refused, with the table as it was.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_eod.core.ask import ask
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import BatchRefusedError
from airflow_eod.core.faults import InjectedFault
from airflow_eod.core.load_flow import LoadRequest, load_batch
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.result import LoadResult
from airflow_eod.core.table_ref import TableRef
from airflow_eod.runners.local import local_run
from airflow_eod.sources import ReadContext
from airflow_eod.spark import merge_job
from airflow_eod.spark.load_job import run_load
from airflow_eod.spark.load_spec import LoadSettings
from tests.support.helpers import lost_races, plan_for, run_child, spec_for
from tests.support.merge_helpers import (
    CDC_DDL,
    MERGE_SETTINGS,
    Change,
    cdc_source,
    check_merge,
    table_rows,
    write_changes,
)

pytestmark = [pytest.mark.spark, pytest.mark.merge]

PIPE = "tests.merge_faults"
DAY = datetime(2026, 11, 10, tzinfo=UTC)
# What merge_job logs when another writer's commit refused its commit and it reads again.
RECOMPUTED = "computing the merge again"
ARROW_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("amount", pa.int64()),
        ("seq", pa.int64()),
        ("op", pa.string()),
    ]
)


# -- helpers -----------------------------------------------------------------------------------
def _txns(table: str, key: BatchKey) -> list[int]:
    """The ``txn`` versions (generations) of ``key`` in every commit of the table's log."""
    found = []
    for path in sorted(glob.glob(os.path.join(table, "_delta_log", "*.json"))):
        for line in open(path):
            txn = json.loads(line).get("txn")
            if txn is not None and txn["appId"] == key.app_id:
                found.append(txn["version"])
    return found


def _assert_once(table: str, key: BatchKey, generation: int = 0) -> None:
    """The table holds the batch: the ask says committed (at ``generation``) and exactly one
    commit carries its marker at that generation."""
    status = ask(TableRef.parse(table), key)
    assert status.committed and status.committed_generation == generation, status
    assert _txns(table, key).count(generation) == 1, _txns(table, key)


def _assert_merged(table: str, changes: list[Change], *, tombstones: bool = True) -> None:
    got = check_merge(table, changes, tombstones=tombstones)
    assert got.ok, got


def _offset_plan(landing: str, table: str, run: str, pipeline: str = PIPE) -> tuple[Any, Plan]:
    source = cdc_source(landing)
    return source, plan_for(source, table, run, pipeline=pipeline)


def _merge(
    spark: Any, landing: str, table: str, run: str, *, try_number: int = 1, pipeline: str = PIPE, **kw: Any
) -> LoadResult:
    """One merge load of the landing directory's next offset batch, planned by run ``run``."""
    source, plan = _offset_plan(landing, table, run, pipeline)
    spec = spec_for(source, table, plan, try_number=try_number, **{**MERGE_SETTINGS, **kw})
    return run_load(spark, spec)


@pytest.fixture(scope="module")
def merged_base(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[Change]]:
    """A merge table of three files (ids 1-20, 21-40, 41-60, one merge batch each), made once
    per module by the base pipeline; each test merges its batch into a copy of it."""
    root = tmp_path_factory.mktemp("merge_base")
    landing, table = str(root / "landing"), str(root / "table")
    base: list[Change] = []
    for n in range(3):
        rows = [(i, f"n{i}", i * 10, 1, "I") for i in range(1 + 20 * n, 21 + 20 * n)]
        write_changes(landing, f"c-{n:04d}.csv", rows)
        assert _merge(spark, landing, table, f"base-{n}", pipeline="tests.merge_base").outcome == "committed"
        base += rows
    return table, base


def _copy_base(merged_base: tuple[str, list[Change]], table: str) -> list[Change]:
    """A copy of the base table at ``table`` (a Delta table's log names its files relative to
    its root, and the plan log beside it comes along); returns the base's changes."""
    shutil.copytree(merged_base[0], table)
    return list(merged_base[1])


def _changes() -> list[Change]:
    """A change batch over ids 1-20 and 41-60 (never 21-40): updates, a delete, two new keys,
    a stale update (older seq than the table's) and a key changed twice (newest wins)."""
    rows: list[Change] = [(i, f"u{i}", i * 100, 2, "U") for i in (2, 3, 5, 44, 47)]
    rows += [(7, "n7", 70, 3, "D"), (61, "n61", 610, 2, "I"), (62, "n62", 620, 2, "I")]
    rows += [(9, "stale", 0, 0, "U"), (50, "first", 1, 2, "U"), (50, "second", 2, 4, "U")]
    return rows


# -- 1. a crash at each boundary, then the retry -------------------------------------------------
@pytest.mark.faults
@pytest.mark.parametrize(
    "point", ["before_write", "after_stage", "before_commit", "before_record", "after_commit"]
)
def test_a_merge_crashed_at_each_boundary_is_merged_once_by_the_retry(
    spark: Any,
    merged_base: Any,
    tmp_path: Any,
    table: str,
    point: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    landing = str(tmp_path / "landing")
    base = _copy_base(merged_base, table)
    write_changes(landing, "c-0100.csv", _changes())
    source, plan = _offset_plan(landing, table, "run-1")
    version = DeltaTable(table).version()
    monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
    with pytest.raises(InjectedFault, match=point):
        run_load(spark, spec_for(source, table, plan, try_number=1, **MERGE_SETTINGS))
    committed = point in ("before_record", "after_commit")
    assert ask(TableRef.parse(table), plan.key).committed == committed
    assert DeltaTable(table).version() == version + committed

    retry_source, retry_plan = _offset_plan(landing, table, "run-1")
    assert retry_plan == plan, "the retry merges the same frozen batch"
    retry = run_load(spark, spec_for(retry_source, table, retry_plan, try_number=2, **MERGE_SETTINGS))
    assert retry.outcome == ("already_committed" if committed else "committed")
    assert DeltaTable(table).version() == version + 1, "one MERGE commit for the batch, crash or not"
    _assert_once(table, plan.key)
    _assert_merged(table, base + _changes())


def _read_until(child: Any, text: str, timeout: float = 600) -> str:
    """The child's output up to (and including) the first line that holds ``text``."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = child.stdout.readline().decode(errors="replace")
        if not line:
            break
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"the child never logged {text!r}: {''.join(seen)[-3000:]}")


@pytest.mark.faults
@pytest.mark.parametrize("how", ["mid_merge", "before_commit"])
def test_a_merge_process_killed_with_sigkill_then_retried_merges_once(
    spark: Any, merged_base: Any, tmp_path: Any, table: str, how: str
) -> None:
    landing = str(tmp_path / "landing")
    base = _copy_base(merged_base, table)
    write_changes(landing, "c-0100.csv", _changes())
    source, plan = _offset_plan(landing, table, "run-1")
    version = DeltaTable(table).version()
    spec = spec_for(source, table, plan, try_number=1, **MERGE_SETTINGS)
    if how == "mid_merge":
        # kill -9 from outside the moment the child starts Spark's fold and staging write:
        # the read files, the join and the Parquet write are under way.
        child = run_child(spec, str(tmp_path))
        _read_until(child, "(round 1)")
        os.kill(child.pid, signal.SIGKILL)
    else:
        child = run_child(spec, str(tmp_path), "before_commit=kill@1")
    out, _ = child.communicate(timeout=300)
    assert child.returncode == -signal.SIGKILL, out.decode()[-2000:]
    assert not ask(TableRef.parse(table), plan.key).committed
    assert DeltaTable(table).version() == version

    retry_source, retry_plan = _offset_plan(landing, table, "run-1")
    retry = run_load(spark, spec_for(retry_source, table, retry_plan, try_number=2, **MERGE_SETTINGS))
    assert retry.outcome == "committed" and DeltaTable(table).version() == version + 1
    _assert_once(table, plan.key)
    _assert_merged(table, base + _changes())
    # The killed attempt's staged files went once the retry committed.
    batch_dir = os.path.join(table, "eod_data", PIPE, plan.batch_key)
    assert len(os.listdir(batch_dir)) == 1, os.listdir(batch_dir)


def _wait_all(procs: list[Any], timeout: float = 900) -> list[str]:
    """Each child's output once all have ended. Their pipes are drained side by side (a
    child that fills its pipe while another is waited on would stall), and a child still
    running at the deadline is killed and its output shown."""
    outs: list[str] = [""] * len(procs)

    def drain(i: int) -> None:
        outs[i] = procs[i].communicate()[0].decode(errors="replace")

    threads = [threading.Thread(target=drain, args=(i,), daemon=True) for i in range(len(procs))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    late = [i for i, p in enumerate(procs) if p.poll() is None]
    for i in late:
        procs[i].kill()
    for t in threads:
        t.join(30)
    # What each late child got through (its rounds, lost races, conflicts), not the JVM's
    # stack traces of being killed: slow, or going round in circles?
    steps = ("merging", "computing the merge again", "lost a race", "committed", "created the table")
    assert not late, f"children {late} still ran after {timeout}s:\n" + "\n".join(
        f"child {i}:\n" + "".join(line for line in outs[i].splitlines(True) if any(w in line for w in steps))
        for i in late
    )
    return outs


# -- 2. two attempts racing ------------------------------------------------------------------------
@pytest.mark.faults
def test_two_attempts_of_one_merge_batch_racing_commit_once(
    merged_base: Any, tmp_path: Any, table: str
) -> None:
    landing = str(tmp_path / "landing")
    base = _copy_base(merged_base, table)
    write_changes(landing, "c-0100.csv", _changes())
    source, plan = _offset_plan(landing, table, "run-1")
    version = DeltaTable(table).version()
    # Both wait between their ask and their commit until the other is there too, so both
    # have read the same snapshot and asked "no" before either commits: the table's fencing
    # picks the winner, not the timing.
    procs = [
        run_child(
            spec_for(source, table, plan, try_number=n, **MERGE_SETTINGS),
            str(tmp_path),
            f"before_commit=meet:{tmp_path}/meet:2",
            f"r{n}",
        )
        for n in (1, 2)
    ]
    outs = _wait_all(procs)
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-1500:] for o in outs)
    results = [json.load(open(tmp_path / f"r{n}-result.json")) for n in (1, 2)]
    assert sorted(r["outcome"] for r in results) == ["already_committed", "committed"]
    loser = [r["outcome"] for r in results].index("already_committed")
    assert lost_races(outs[loser]) >= 1 and lost_races(outs[1 - loser]) == 0, outs[loser][-3000:]
    assert DeltaTable(table).version() == version + 1
    _assert_once(table, plan.key)
    _assert_merged(table, base + _changes())


# -- 3. another writer between the merge's read and its commit ---------------------------------------
def _between_read_and_commit(monkeypatch: pytest.MonkeyPatch, writer: Callable[[], None]) -> list[str]:
    """Run ``writer`` once, when the first merge reaches its commit (after its read, fold and
    staging); returns the batch key of every commit call the merges make, in order."""
    real = merge_job.commit_batch
    calls: list[str] = []

    def hooked(ref: Any, batch: BatchKey, *args: Any, **kw: Any) -> Any:
        calls.append(batch.key)
        if len(calls) == 1:
            writer()
        return real(ref, batch, *args, **kw)

    monkeypatch.setattr(merge_job, "commit_batch", hooked)
    return calls


def _append(table: str, rows: list[Change]) -> None:
    """Another writer's plain append (delta-rs, no airflow-eod)."""
    data = pa.Table.from_pylist(
        [dict(zip(ARROW_SCHEMA.names, r, strict=True)) for r in rows], schema=ARROW_SCHEMA
    )
    write_deltalake(table, data, mode="append")


@pytest.mark.faults
@pytest.mark.parametrize("writer", ["compaction", "append_of_a_batch_key", "unrelated_append", "other_merge"])
def test_another_writer_between_the_read_and_the_commit(
    spark: Any,
    merged_base: Any,
    tmp_path: Any,
    table: str,
    writer: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    landing = str(tmp_path / "landing")
    base = _copy_base(merged_base, table)
    write_changes(landing, "c-0100.csv", _changes())
    others: list[Change] = []
    other_batches: list[BatchKey] = []

    def compaction() -> None:
        # OPTIMIZE by delta-rs: the three files, two of which the merge rewrites, become one.
        metrics = DeltaTable(table).optimize.compact()
        assert metrics["numFilesRemoved"] >= 3 and metrics["numFilesAdded"] == 1, metrics

    def append_of_a_batch_key() -> None:
        # Key 3 is in the batch (seq 2): this newer row must win; key 44's is older (the
        # batch's must win); key 63 is new to both and must simply stay.
        others.extend([(3, "other3", 3, 9, "U"), (44, "other44", 44, 1, "U"), (63, "n63", 630, 1, "I")])
        _append(table, others)

    def unrelated_append() -> None:
        others.extend([(1000, "n1000", 1, 1, "I"), (1001, "n1001", 2, 1, "I")])
        _append(table, others)

    def other_merge() -> None:
        # Another merge pipeline into the same table: keys the batch carries (newer for 2,
        # older for 5), one it does not (10, in a file the batch rewrites) and one new (64).
        others.extend(
            [(2, "o2", 1, 5, "U"), (5, "o5", 1, 1, "U"), (10, "o10", 1, 5, "D"), (64, "o64", 1, 5, "I")]
        )
        write_changes(str(tmp_path / "other"), "o-0001.csv", others)
        other = _merge(spark, str(tmp_path / "other"), table, "other-run", pipeline="tests.merge_other")
        assert other.outcome == "committed" and other.batch_key is not None
        other_batches.append(BatchKey("tests.merge_other", other.batch_key))

    writers = {
        "compaction": compaction,
        "append_of_a_batch_key": append_of_a_batch_key,
        "unrelated_append": unrelated_append,
        "other_merge": other_merge,
    }
    calls = _between_read_and_commit(monkeypatch, writers[writer])
    source, plan = _offset_plan(landing, table, "run-1")
    caplog.set_level(logging.INFO, logger=merge_job.__name__)
    result = run_load(spark, spec_for(source, table, plan, **MERGE_SETTINGS))
    assert result.outcome == "committed"

    rounds = calls.count(plan.batch_key)
    recomputed = [r.getMessage() for r in caplog.records if RECOMPUTED in r.getMessage()]
    if writer == "unrelated_append":
        # No file the merge rewrites changed and the new file cannot hold a batch key: the
        # commit goes ahead on the newer snapshot without reading again.
        assert rounds == 1 and not recomputed, recomputed
    else:
        assert rounds == 2 and len(recomputed) == 1, recomputed
        assert plan.key.label in recomputed[0] and "another writer" in recomputed[0], recomputed[0]
    _assert_once(table, plan.key)
    # The other writer's rows count as the source's too: nothing lost, no key twice, no
    # row older than the newest change of its key.
    _assert_merged(table, base + _changes() + others)
    for other_batch in other_batches:
        _assert_once(table, other_batch)


# -- 4. backfills: intervals merged oldest-first, newest-first and in parallel ----------------------
def _interval_plan(source: Any, table: str, day: int, pipeline: str) -> Plan:
    start = DAY + timedelta(days=day)
    plan = source.plan(
        PlanLog(TableRef.parse(table), pipeline),
        None,
        run_token=f"run-{day}",
        is_committed=lambda k: False,
        interval=(start, start + timedelta(days=1)),
    )
    assert plan is not None
    return plan


# Interval batches of the backfill test: each a merge into the same keys as its neighbours.
# Three in CI (each its own child JVM in the parallel part, on 2 cores): every key window
# still overlaps the next, and the data still holds a delete newest after older changes and
# a key deleted then changed again (asserted below). EOD_MERGE_BACKFILL_DAYS raises it (5
# before CI time was trimmed).
DAYS = int(os.environ.get("EOD_MERGE_BACKFILL_DAYS", "3"))


def _backfill_days(days: int) -> list[list[Change]]:
    """Each day's changes: a window of 12 keys that moves on by 2 a day, so that a key is
    changed on several days; its newest two keys are inserted, some keys are deleted (and
    changed again on a later day, or not), and the window's first key changes twice in the
    day. ``seq`` grows with the day, as a change log's sequence does."""
    out = []
    for d in range(days):
        rows: list[Change] = []
        for k in range(1 + 2 * d, 13 + 2 * d):
            op = "I" if k > 10 + 2 * d else "D" if (7 * k + d) % 5 == 0 else "U"
            rows.append((k, f"d{d}k{k}", 100 * d + k, 10 * d + 1, op))
        rows.append((1 + 2 * d, f"d{d}twice", 1, 10 * d + 2, "U"))
        out.append(rows)
    return out


def _interval_landing(root: Any, days: list[list[Change]]) -> list[Any]:
    sources = []
    for d, changes in enumerate(days):
        folder = str(root / f"day{d}")
        write_changes(folder, "changes.csv", changes)
        sources.append(cdc_source(folder, boundary="interval"))
    return sources


def _sorted_rows(table: str) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["name"], r["amount"], r["seq"], r["op"]) for r in table_rows(table))


@pytest.mark.backfill
@pytest.mark.faults
def test_interval_batches_merged_oldest_first_newest_first_and_in_parallel_end_in_one_table(
    spark: Any, tmp_path: Any
) -> None:
    days = _backfill_days(DAYS)
    changes = [c for day in days for c in day]
    newest = {}
    for c in changes:
        if c[0] not in newest or c[3] > newest[c[0]][3]:
            newest[c[0]] = c
    # The data holds what ordering must get right: a delete that is a key's newest change
    # after older changes of it (its tombstone must beat them, whatever loads first), and a
    # key deleted and changed again on a later day.
    assert any(c[4] == "D" and any(o[0] == k and o[3] < c[3] for o in changes) for k, c in newest.items())
    assert any(
        c[4] == "U" and any(o[0] == k and o[4] == "D" and o[3] < c[3] for o in changes)
        for k, c in newest.items()
    )
    sources = _interval_landing(tmp_path / "landing", days)
    pipeline = "tests.merge_backfill"
    tables = {name: str(tmp_path / name) for name in ("oldest_first", "newest_first", "parallel")}
    for name, order in (("oldest_first", range(DAYS)), ("newest_first", range(DAYS - 1, -1, -1))):
        for d in order:
            plan = _interval_plan(sources[d], tables[name], d, pipeline)
            result = run_load(spark, spec_for(sources[d], tables[name], plan, **MERGE_SETTINGS))
            assert result.outcome == "committed", (name, d)
    # All at once, each its own process. Each waits before its first commit until all are
    # there, so that they overlap: they race to create the table, and each commit that lost to another's
    # computes its merge again on the newer snapshot.
    plans = [_interval_plan(sources[d], tables["parallel"], d, pipeline) for d in range(DAYS)]
    procs = [
        run_child(
            spec_for(sources[d], tables["parallel"], plans[d], **MERGE_SETTINGS),
            str(tmp_path),
            f"before_commit=meet:{tmp_path}/meet:{DAYS}#1",
            f"d{d}",
        )
        for d in range(DAYS)
    ]
    outs = _wait_all(procs)
    assert [p.returncode for p in procs] == [0] * DAYS, "\n".join(o[-1500:] for o in outs)
    results = [json.load(open(tmp_path / f"d{d}-result.json")) for d in range(DAYS)]
    assert [r["outcome"] for r in results] == ["committed"] * DAYS
    assert sum(o.count(RECOMPUTED) for o in outs) >= 1, "the merges never overlapped"

    for name, table in tables.items():
        _assert_merged(table, changes)
        for d in range(DAYS):
            _assert_once(table, _interval_plan(sources[d], table, d, pipeline).key)
        assert len(DeltaTable(table).history()) == DAYS, name
    # I9: merges commute. The three orders end in the very same rows, tombstones included.
    assert _sorted_rows(tables["oldest_first"]) == _sorted_rows(tables["newest_first"])
    assert _sorted_rows(tables["oldest_first"]) == _sorted_rows(tables["parallel"])


@pytest.mark.backfill
def test_without_tombstones_an_older_insert_merged_after_a_delete_brings_the_key_back(
    spark: Any, tmp_path: Any
) -> None:
    """The documented limit of keep_tombstones=False: a delete leaves nothing behind that
    remembers its ordering value, so an older change of the key merged after it (a backfill
    newest-first) is a new row. With tombstones (the default) the same order ends right."""
    days = [
        [(1, "a", 1, 1, "I"), (2, "b", 2, 1, "I")],
        [(1, "a", 1, 2, "D"), (3, "c", 3, 2, "I")],
    ]
    changes = days[0] + days[1]
    sources = _interval_landing(tmp_path / "landing", days)
    ends = {}
    for name, order, keep in (
        ("oldest_first", (0, 1), False),
        ("newest_first", (1, 0), False),
        ("newest_first_tombstones", (1, 0), True),
    ):
        table = str(tmp_path / name)
        for d in order:
            plan = _interval_plan(sources[d], table, d, "tests.merge_no_tombstones")
            settings = {**MERGE_SETTINGS, "keep_tombstones": keep}
            assert run_load(spark, spec_for(sources[d], table, plan, **settings)).outcome == "committed"
        ends[name] = _sorted_rows(table)
    # In change order the delete removes key 1: the newest row per key, without deletes.
    _assert_merged(str(tmp_path / "oldest_first"), changes, tombstones=False)
    assert [r[0] for r in ends["oldest_first"]] == [2, 3]
    # Newest-first, the delete had no row to remove and left nothing; day 0's older insert
    # then found no row of key 1 and inserted it: the deleted key is back.
    assert ends["newest_first"] == [(1, "a", 1, 1, "I"), (2, "b", 2, 1, "I"), (3, "c", 3, 2, "I")]
    assert check_merge(str(tmp_path / "newest_first"), changes, tombstones=False).unexpected == [1]
    # With tombstones the delete's row stays and beats the older insert.
    _assert_merged(str(tmp_path / "newest_first_tombstones"), changes)
    assert ends["newest_first_tombstones"][0] == (1, "a", 1, 2, "D")


# -- 5. restatement of a merged batch ----------------------------------------------------------------
def _flow(spark: Any, table: str, source: Any, day: int, run: str, *, restate: bool = False) -> LoadResult:
    """The whole flow (freeze, restatement, ask, merge) for the interval ``day``, as one run."""
    start = DAY + timedelta(days=day)
    request = LoadRequest(
        TableRef.parse(table),
        "tests.merge_restate",
        run,
        interval=(start, start + timedelta(days=1)),
        restate=restate,
        try_number=1,
    )
    settings = LoadSettings(run_id=run, try_number=1, **MERGE_SETTINGS)
    run_fn = local_run(lambda: spark, TableRef.parse(table), source, settings=settings)
    return load_batch(request, source, ReadContext(spark_factory=lambda: spark), run=run_fn)


def test_restating_a_merged_batch_reapplies_it_under_the_ordering_rule(
    spark: Any, tmp_path: Any, table: str
) -> None:
    day0 = [(k, f"a{k}", k * 10, 1, "I") for k in range(1, 7)]
    day1 = [(2, "b2", 200, 2, "U"), (7, "b7", 700, 2, "I")]
    sources = _interval_landing(tmp_path / "landing", [day0, day1])
    first = _flow(spark, table, sources[0], 0, "run-0")
    assert (first.outcome, first.generation) == ("committed", 0)
    assert _flow(spark, table, sources[1], 1, "run-1").outcome == "committed"
    # Day 0 corrected at its source, with the ordering values it had.
    corrected = [
        (1, "a1-fixed", 11, 1, "I"),  # the same seq: the restated row replaces the first one
        (2, "a2-fixed", 21, 1, "I"),  # day 1 changed key 2 later (seq 2): day 1's row stays
        (4, "a4", 40, 1, "D"),  # gone at the source: a delete row (a tombstone) takes it out
        (5, "a5", 50, 1, "I"),  # unchanged
        (6, "a6", 60, 1, "I"),
        (8, "a8", 80, 1, "I"),  # a row the first generation missed
    ]  # key 3 is not in it: the row the first generation inserted stays (no delete row for it)
    write_changes(str(tmp_path / "landing" / "day0"), "changes.csv", corrected)
    restated = _flow(spark, table, sources[0], 0, "fix-run", restate=True)
    assert (restated.outcome, restated.generation, restated.rows) == ("committed", 1, 6)

    rows = {r[0]: r for r in _sorted_rows(table)}
    assert rows[1] == (1, "a1-fixed", 11, 1, "I")
    assert rows[2] == (2, "b2", 200, 2, "U"), "restating an older batch regressed a newer row"
    assert rows[3] == (3, "a3", 30, 1, "I")
    assert rows[4] == (4, "a4", 40, 1, "D")
    assert rows[8] == (8, "a8", 80, 1, "I")
    # The oracle: newest per key, a tie going to the first change listed (the restated rows).
    _assert_merged(table, corrected + day1 + day0)
    batch = BatchKey.for_interval("tests.merge_restate", DAY, DAY + timedelta(days=1))
    _assert_once(table, batch, generation=1)
    assert _txns(table, batch) == [0, 1]
    status = ask(TableRef.parse(table), batch)
    assert status.manifest is not None and status.manifest.previous_generation == 0
    # One MERGE commit: it removed the files its merge rewrote, never "the batch's files of
    # generation 0" as an append's restatement does (day 1's merge had rewritten those, and
    # key 3, which the corrected batch lacks, would have gone with them).
    assert len(DeltaTable(table).history()) == 3
    assert DeltaTable(table).history(1)[0]["operation"] == "MERGE"
    # A retry of the restating run writes nothing.
    again = _flow(spark, table, sources[0], 0, "fix-run", restate=True)
    assert (again.outcome, again.generation) == ("already_committed", 1)
    assert len(DeltaTable(table).history()) == 3


# -- 6. partitioned merge tables -------------------------------------------------------------------
def test_an_update_that_moves_a_key_to_another_partition_leaves_no_duplicate(
    spark: Any, tmp_path: Any, table: str
) -> None:
    landing = str(tmp_path / "landing")
    regions = ["east", "west", "north side"]
    first = [(k, regions[k % 3], k * 10, 1, "I") for k in range(1, 10)]
    write_changes(landing, "c-0001.csv", first)
    assert _merge(spark, landing, table, "run-1", partition_by=["name"]).outcome == "committed"
    assert DeltaTable(table).metadata().partition_columns == ["name"]
    # Keys 1 and 2 move partitions, key 3 is deleted from another partition than its row's,
    # key 4 stays put, key 10 is new, and key 5's move is stale (older seq): it stays.
    second = [
        (1, "west", 11, 2, "U"),
        (2, "north side", 21, 2, "U"),
        (3, "east", 31, 2, "D"),
        (4, regions[4 % 3], 41, 2, "U"),
        (10, "east", 100, 2, "I"),
        (5, "east", 0, 0, "U"),
    ]
    write_changes(landing, "c-0002.csv", second)
    merged = _merge(spark, landing, table, "run-2")
    assert merged.outcome == "committed" and merged.batch_key is not None
    _assert_merged(table, first + second)
    _assert_once(table, BatchKey(PIPE, merged.batch_key))
    by_partition = {r["id"]: r["name"] for r in table_rows(table)}
    assert (by_partition[1], by_partition[2], by_partition[5]) == ("west", "north side", regions[5 % 3])


def test_a_key_that_is_the_partition_column_merges_within_its_partition(
    spark: Any, tmp_path: Any, table: str
) -> None:
    landing = str(tmp_path / "landing")
    first = [(k, f"n{k}", k * 10, 1, "I") for k in range(1, 7)]
    write_changes(landing, "c-0001.csv", first)
    assert _merge(spark, landing, table, "run-1", partition_by=["id"]).outcome == "committed"
    second = [(2, "u2", 1, 2, "U"), (3, "u3", 1, 2, "U"), (4, "n4", 40, 2, "D"), (7, "n7", 70, 2, "I")]
    second += [(2, "u2-later", 2, 3, "U"), (5, "stale", 0, 0, "U")]
    write_changes(landing, "c-0002.csv", second)
    merged = _merge(spark, landing, table, "run-2")
    assert merged.outcome == "committed" and merged.batch_key is not None
    _assert_merged(table, first + second)
    _assert_once(table, BatchKey(PIPE, merged.batch_key))
    assert DeltaTable(table).metadata().partition_columns == ["id"]


# -- deletion vectors: another writer's DELETE in place ----------------------------------------------
def _dv_table(spark: Any, tmp_path: Any, table: str) -> str:
    """A table Delta Spark created with deletion vectors, holding keys 1-10 in one file (its
    own append); returns the merge pipeline's landing directory."""
    spark.sql(
        f"CREATE TABLE delta.`{table}` ({CDC_DDL}) USING delta "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    rows = [(k, f"n{k}", k * 10, 1, "I") for k in range(1, 11)]
    spark.createDataFrame(rows, CDC_DDL).coalesce(1).write.format("delta").mode("append").save(table)
    assert len(DeltaTable(table).file_uris()) == 1
    return str(tmp_path / "landing")


def _spark_ids(spark: Any, table: str) -> list[int]:
    """The keys Delta Spark reads (deletion vectors applied, unlike a plain Parquet read)."""
    return sorted(r[0] for r in spark.read.format("delta").load(table).select("id").collect())


@pytest.mark.delta_spark
def test_a_merge_refuses_to_rewrite_a_file_with_a_deletion_vector(
    spark: Any, tmp_path: Any, table: str
) -> None:
    """Was a defect: the merge looked for deletion vectors among deltalake's add actions,
    which never report one, so it rewrote the file from its Parquet rows and brought back
    the row another writer had deleted (key 3)."""
    landing = _dv_table(spark, tmp_path, table)
    spark.sql(f"DELETE FROM delta.`{table}` WHERE id = 3")
    version = DeltaTable(table).version()
    write_changes(landing, "c-0002.csv", [(2, "u2", 1, 2, "U")])
    with pytest.raises(BatchRefusedError, match="deletionVectors"):
        _merge(spark, landing, table, "run-2")
    assert DeltaTable(table).version() == version
    assert _spark_ids(spark, table) == [1, 2, *range(4, 11)]


@pytest.mark.delta_spark
def test_a_deletion_vector_added_between_the_read_and_the_commit_refuses_the_commit(
    spark: Any, tmp_path: Any, table: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Was a defect: a DELETE in place keeps the file's path, size and time, so the conflict
    check saw no change and the merge committed its rewrite of the file: key 3 came back."""
    landing = _dv_table(spark, tmp_path, table)
    calls = _between_read_and_commit(
        monkeypatch, lambda: spark.sql(f"DELETE FROM delta.`{table}` WHERE id = 3").collect()
    )
    write_changes(landing, "c-0002.csv", [(2, "u2", 1, 2, "U")])
    caplog.set_level(logging.INFO, logger=merge_job.__name__)
    with pytest.raises(BatchRefusedError, match="deletionVectors"):
        _merge(spark, landing, table, "run-2")
    # The commit saw the other writer's change, and the merge computed again: the new read
    # meets the deletion vector, and refuses.
    assert len(calls) == 1 and any(RECOMPUTED in r.getMessage() for r in caplog.records)
    assert _spark_ids(spark, table) == [1, 2, *range(4, 11)]
