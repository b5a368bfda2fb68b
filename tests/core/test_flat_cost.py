"""The shape of the cost (issue 7): the ask, the commit and planning open a bounded number of
files whatever the batch count. Not timed: the files and log entries each step opens are
counted, on histories built through the real planner and commit engine (files staged with
pyarrow instead of Spark). Timings live in benchmarks/.
"""

from __future__ import annotations

import builtins
import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.delta import log as delta_log
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import CorruptRecordError
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.planlog import offsets as offset_history
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.planner import plan_offset_batch
from airflow_eod.core.records import compaction
from airflow_eod.core.records.store import CommitRecord, write_record
from airflow_eod.core.table_ref import TableRef
from airflow_eod.sources.landing_files import LandingFilesSource
from tests.support.flat_helpers import CONFIG, PIPELINE, grow, stage_offset_batch


@contextmanager
def _counting() -> Iterator[Counter[str]]:
    """Count the files opened, directories read and files stat'ed (by the Python side; the
    checkpoint's Parquet reads are counted by delta_log's own stats)."""
    seen: Counter[str] = Counter()
    real_open, real_scandir, real_listdir, real_stat = builtins.open, os.scandir, os.listdir, os.stat

    def counted(kind: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kw: Any) -> Any:
            seen[kind] += 1
            return fn(*args, **kw)

        return wrapper

    builtins.open = counted("open", real_open)
    os.scandir = counted("scandir", real_scandir)
    os.listdir = counted("listdir", real_listdir)
    os.stat = counted("stat", real_stat)
    try:
        yield seen
    finally:
        builtins.open, os.scandir, os.listdir, os.stat = real_open, real_scandir, real_listdir, real_stat


def _ask_cost(table: str, key: BatchKey) -> tuple[Counter[str], delta_log.LogReadStats]:
    """What one ask opens in a fresh process (an Airflow task): no earlier reading cached."""
    delta_log.clear_cache()
    with _counting() as seen:
        status = ask(TableRef.parse(table), key)
    assert status.committed
    delta_log.clear_cache()
    reading = open_table(TableRef.parse(table))
    assert reading is not None
    return seen, reading.stats


@pytest.fixture(scope="module")
def histories(tmp_path_factory: Any) -> dict[int, tuple[str, list[Plan]]]:
    """Two tables whose newest versions sit at the same place after a checkpoint: 23 and
    203 batches with a checkpoint every 10 commits."""
    out = {}
    # Without compaction (issue 21): at 203 batches it would move the old batches' entries
    # into segments, which the 23-batch history has none of (a constant cost, pinned in
    # tests/core/test_plan_log_compaction.py and measured by benchmarks/plan_log_objects.py).
    every, compaction.DEFAULT_EVERY = compaction.DEFAULT_EVERY, 0
    try:
        for n in (23, 203):
            root = tmp_path_factory.mktemp(f"flat{n}")
            table, landing = str(root / "table"), str(root / "landing")
            os.makedirs(landing)
            out[n] = (table, grow(table, landing, n))
    finally:
        compaction.DEFAULT_EVERY = every
    return out


def test_the_ask_reads_the_same_files_at_203_batches_as_at_23(histories: dict[int, Any]) -> None:
    costs = {}
    for n, (table, plans) in histories.items():
        oldest, newest = _ask_cost(table, plans[0].key), _ask_cost(table, plans[-1].key)
        costs[n] = (oldest, newest)
        for seen, reading in (oldest, newest):
            assert not reading.listed and not reading.fell_back
            # The checkpoint is read through its index (one file, then one bucket of markers).
            assert reading.index_files_read == 1 and reading.checkpoint_files_read == 0
            assert reading.commits_read <= 10
            # (The third listing is the batch's segment bucket: issue 21's compaction.)
            assert seen["listdir"] <= 3 and seen["scandir"] == 0
    assert costs[203][0][0] == costs[23][0][0], "the oldest batch's ask opened more files at 203 batches"
    assert costs[203][1][0] == costs[23][1][0], "the newest batch's ask opened more files at 203 batches"
    assert costs[203][0][1].commits_read == costs[23][0][1].commits_read


def test_commits_checkpoint_so_the_log_tail_stays_short(histories: dict[int, Any]) -> None:
    table, _ = histories[203]
    names = os.listdir(os.path.join(table, "_delta_log"))
    checkpoints = sorted(int(n[:20]) for n in names if n.endswith(".checkpoint.parquet"))
    assert checkpoints[-1] == 200 and len(checkpoints) >= 20
    delta_log.clear_cache()
    reading = open_table(TableRef.parse(table))
    assert reading is not None and reading.version() == 202 and reading.checkpoint_version == 200
    # The bounded reading agrees with delta-rs's full one.
    full = DeltaTable(table)
    assert full.version() == reading.version()
    assert full.metadata().id == reading.metadata().id
    for plan in histories[203][1][::37]:
        assert full.transaction_version(plan.key.app_id) == reading.transaction_version(plan.key.app_id) == 0
    assert len(full.file_uris()) == 203


def test_planning_the_next_batch_opens_the_same_files_at_203_batches_as_at_23(
    histories: dict[int, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    costs = {}
    for n, (table, _plans) in histories.items():
        landing = os.path.join(os.path.dirname(table), "landing")
        with open(os.path.join(landing, "new.csv"), "w") as fh:
            fh.write("seq\n-1\n")
        source = LandingFilesSource(path=landing, file_format="csv")
        delta_log.clear_cache()
        with _counting() as seen:
            plan = source.plan(
                PlanLog(TableRef.parse(table), PIPELINE),
                run_token="next-run",
                is_committed=lambda k, t=table: ask(TableRef.parse(t), k).committed,
            )
        assert plan is not None and [os.path.basename(f["path"]) for f in plan.inputs] == ["new.csv"]
        commit_batch(
            TableRef.parse(table), plan.key, 0, *stage_offset_batch(table, plan), table_configuration=CONFIG
        )
        costs[n] = seen
    # The landing directory keeps every old file: it is read once, and only the new file is
    # stat'ed; the plan log is read from its index and the plans after it.
    # (os.stat also counts the probes for the newest plan, which start at the newest index.)
    assert costs[203]["stat"] <= costs[23]["stat"] < 60
    assert costs[203]["scandir"] == costs[23]["scandir"] == 1
    assert costs[203]["open"] <= costs[23]["open"] + offset_history.INDEX_EVERY // 10
    assert costs[203]["open"] < 60


def test_the_loaded_index_holds_every_loaded_file_once(histories: dict[int, Any]) -> None:
    table, plans = histories[203]
    indexed = PlanLog(TableRef.parse(table), PIPELINE).loaded_index()
    assert indexed is not None
    through, keys = indexed
    assert through >= offset_history.INDEX_EVERY
    expected = {f["path"] for p in plans[: through + 1] for f in p.inputs}
    assert set(keys) == expected and len(keys) == through + 1


def test_a_jdbc_style_source_sees_only_the_newest_committed_batch(histories: dict[int, Any]) -> None:
    table, plans = histories[203]
    log = PlanLog(TableRef.parse(table), PIPELINE)
    newest_seq = log.newest_offset_seq()
    assert newest_seq is not None and newest_seq >= 202
    newest = log.get_offset_plan(newest_seq)
    assert ask(TableRef.parse(table), newest.key).committed
    seen: list[Any] = []

    def next_offsets(history: offset_history.OffsetHistory) -> None:
        seen.append(history.newest())

    delta_log.clear_cache()
    with _counting() as counted:
        plan_offset_batch(
            PlanLog(TableRef.parse(table), PIPELINE),
            run_token="jdbc-like",
            is_committed=lambda k: ask(TableRef.parse(table), k).committed,
            next_offsets=next_offsets,  # type: ignore[arg-type]
            source=plans[-1].source,
        )
    assert seen and seen[0].batch_key == newest.batch_key
    assert counted["open"] < 40 and counted["scandir"] == 0


def test_a_record_the_table_contradicts_is_reported_as_corrupt(tmp_path: Any) -> None:
    table, landing = str(tmp_path / "table"), str(tmp_path / "landing")
    os.makedirs(landing)
    plans = grow(table, landing, 3)
    reading = open_table(TableRef.parse(table))
    assert reading is not None
    log = PlanLog(TableRef.parse(table), PIPELINE)
    # A record for batch 2 at generation 1, naming batch 1's commit: that commit carries no
    # marker of batch 2, so the record lies (its manifest is of the right shape: a record of
    # the wrong shape is refused before, as a corrupt table file).
    manifest = Manifest(
        pipeline_id=PIPELINE,
        batch_key=plans[2].batch_key,
        generation=1,
        boundary=plans[2].boundary,
        input_fingerprint=plans[2].input_fingerprint,
        rows=0,
        files=0,
        attempt_id="a-liar",
        engine="delta-rs",
    )
    write_record(
        log,
        CommitRecord(plans[2].batch_key, 1, str(reading.metadata().id), 1, asdict(manifest), []),
    )
    with pytest.raises(CorruptRecordError, match=r"carries no marker of the batch.*corrupt commit record"):
        ask(TableRef.parse(table), plans[2].key)
    assert ask(TableRef.parse(table), plans[1].key).committed  # other batches are not affected


def test_a_log_the_bounded_reader_cannot_read_is_read_through_deltalake(
    histories: dict[int, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    table, plans = histories[23]

    def unreadable(path: str, **_: Any) -> None:
        raise delta_log._Unreadable("as if the table had V2 checkpoints")

    monkeypatch.setattr(delta_log, "_read_log", unreadable)
    delta_log.clear_cache()
    reading = open_table(TableRef.parse(table))
    assert reading is not None and reading.stats.fell_back
    assert reading.version() == DeltaTable(table).version()
    # The markers still answer: a fallback that lost them would load every batch again.
    assert reading.transaction_version(plans[5].key.app_id) == 0
    assert ask(TableRef.parse(table), plans[5].key).committed
    delta_log.clear_cache()


def test_a_warm_reading_survives_another_writers_commits_checkpoint_and_log_cleanup(tmp_path: Any) -> None:
    """A process that read the log (its reading is cached), then another writer appends,
    checkpoints and removes old log entries: the next commit must land after the other
    writer's, not in the hole the cleanup left."""
    from deltalake import write_deltalake

    table, landing = str(tmp_path / "table"), str(tmp_path / "landing")
    os.makedirs(landing)
    grow(table, landing, 3)
    warm = open_table(TableRef.parse(table))
    assert warm is not None and warm.version() == 2
    for _ in range(4):
        write_deltalake(table, pa.table({"seq": pa.array([-1], pa.int64())}), mode="append")
    other = DeltaTable(table)
    other.create_checkpoint()
    old = int(time.time()) - 40 * 86400
    for n in range(0, other.version()):
        os.utime(os.path.join(table, "_delta_log", f"{n:020d}.json"), (old, old))
    other.cleanup_metadata()
    assert not os.path.exists(os.path.join(table, "_delta_log", f"{3:020d}.json"))
    plans = grow(table, landing, 4)
    full = DeltaTable(table)
    assert full.version() == 7
    assert sorted(pa.table(full.to_pyarrow_table()).column("seq").to_pylist()) == [-1, -1, -1, -1, 0, 1, 2, 3]
    assert ask(TableRef.parse(table), plans[-1].key).table_version == 7


def test_a_table_recreated_at_the_same_path_is_not_read_from_a_warm_reading(tmp_path: Any) -> None:
    table, landing = str(tmp_path / "table"), str(tmp_path / "landing")
    os.makedirs(landing)
    plans = grow(table, landing, 2)
    before = open_table(TableRef.parse(table))
    assert before is not None and ask(TableRef.parse(table), plans[1].key).committed
    import shutil

    from deltalake import write_deltalake

    shutil.rmtree(table)
    write_deltalake(table, pa.table({"seq": pa.array([7], pa.int64())}))
    write_deltalake(table, pa.table({"seq": pa.array([8], pa.int64())}), mode="append")
    after = open_table(TableRef.parse(table))
    assert after is not None and after.metadata().id != before.metadata().id
    assert after.transaction_version(plans[1].key.app_id) is None
    assert not ask(TableRef.parse(table), plans[1].key).committed


def test_a_checkpoint_that_fails_is_written_by_the_next_commit(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, landing = str(tmp_path / "table"), str(tmp_path / "landing")
    os.makedirs(landing)
    grow(table, landing, 10)  # versions 0..9: no checkpoint yet
    real = DeltaTable.create_checkpoint

    def broken(self: DeltaTable) -> None:
        raise OSError("disk full, as a test")

    monkeypatch.setattr(DeltaTable, "create_checkpoint", broken)
    grow(table, landing, 11)  # version 10 is due a checkpoint, which fails: the batch stands
    assert ask(
        TableRef.parse(table), PlanLog(TableRef.parse(table), PIPELINE).get_offset_plan(10).key
    ).committed
    assert not [n for n in os.listdir(os.path.join(table, "_delta_log")) if "checkpoint" in n]
    monkeypatch.setattr(DeltaTable, "create_checkpoint", real)
    grow(table, landing, 12)
    delta_log.clear_cache()
    reading = open_table(TableRef.parse(table))
    assert reading is not None and reading.checkpoint_version == 11 and reading.version() == 11


def test_a_checkpoints_index_answers_as_the_checkpoint_does_and_is_read_around_when_it_does_not_fit(
    histories: dict[int, Any], tmp_path: Any
) -> None:
    """The committer indexes every checkpoint it writes. The index gives the same markers and
    metadata as the checkpoint; a bucket that fails its checksum, or a checkpoint whose
    files changed under the index (a table re-created at the same path), is read around."""
    import shutil

    table, plans = histories[203]
    copy = str(tmp_path / "copy")
    shutil.copytree(table, copy)
    index_root = os.path.join(copy, "_eod", "checkpoints")
    indexes = sorted(os.listdir(index_root))
    assert len(indexes) == 3 and indexes[-1].startswith(f"{200:020d}.")  # the newest few are kept
    full = DeltaTable(copy)
    delta_log.clear_cache()
    reading = open_table(TableRef.parse(copy))
    assert reading is not None and reading.stats.index_files_read == 1
    assert json.loads(reading.schema_json()) == json.loads(full.schema().to_json())
    assert reading.metadata().id == full.metadata().id
    assert reading.protocol().min_writer_version == full.protocol().min_writer_version
    for plan in plans:
        assert reading.transaction_version(plan.key.app_id) == full.transaction_version(plan.key.app_id) == 0
    assert reading.transaction_version("eod:nobody:nothing") is None

    # A bucket that does not match its checksum: the checkpoint itself answers.
    bucket = os.path.join(index_root, indexes[-1], "b0.json")
    with open(bucket, "w") as fh:
        fh.write(json.dumps({plans[5].key.app_id: 7}))
    delta_log.clear_cache()
    reading = open_table(TableRef.parse(copy))
    assert reading is not None and reading.transaction_version(plans[5].key.app_id) == 0
    assert reading.stats.checkpoint_files_read == 1
    assert ask(TableRef.parse(copy), plans[5].key).committed_generation == 0

    # The checkpoint's files changed (re-written at the same version): its index is not used.
    checkpoint = delta_log.checkpoint_path(TableRef.parse(copy), 200)
    os.utime(checkpoint, ns=(time.time_ns(), time.time_ns()))
    delta_log.clear_cache()
    reading = open_table(TableRef.parse(copy))
    assert reading is not None and reading.stats.index_files_read == 0
    assert reading.stats.checkpoint_files_read == 1
    assert reading.transaction_version(plans[5].key.app_id) == 0


def test_an_index_just_written_is_kept_below_a_predecessors_newer_ones(tmp_path: Any) -> None:
    """A table re-created at the same path (its `_eod/` kept) starts its versions again below
    the old table's indexes: the index just written stays, the oldest others go."""
    from airflow_eod.core.delta.checkpoint_index import write_index

    table = str(tmp_path / "table")
    os.makedirs(os.path.join(table, "_delta_log"))
    for version in (10, 20, 30, 40, 5):
        path = delta_log.checkpoint_path(TableRef.parse(table), version)
        with open(path, "w") as fh:
            fh.write(str(version))
        write_index(
            TableRef.parse(table),
            version,
            [path],
            {"metaData": {"id": "t"}, "protocol": {}},
            {"eod:p:b": version},
        )
    kept = sorted(name.split(".")[0] for name in os.listdir(os.path.join(table, "_eod", "checkpoints")))
    assert kept == [f"{v:020d}" for v in (5, 20, 30, 40)]


@pytest.mark.parametrize("planned", [0, 1, 2, 23, 1000])
def test_the_newest_offset_plan_is_found_in_log_probes_without_a_loaded_index(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, planned: int
) -> None:
    """A JDBC pipeline writes no loaded index: finding its newest plan probed every sequence
    number (75 ms at 10,000 batches). A galloping search probes about 2 log2(N) names."""
    import math

    from airflow_eod.core.planlog.store import OFFSETS, Plan, PlanLog

    log = PlanLog(TableRef.parse(str(tmp_path / "table")), "tests.jdbc_like")
    for seq in range(planned):
        log.put_plan(Plan("tests.jdbc_like", f"o-{seq:08d}-x", OFFSETS, {"high": seq}, [], seq=seq))
    probes: list[str] = []
    real_head = log.storage.head

    def head(key: str) -> Any:
        probes.append(key)
        return real_head(key)

    monkeypatch.setattr(log.storage, "head", head)
    found = log.newest_offset_seq()
    monkeypatch.setattr(log.storage, "head", real_head)
    assert found == (planned - 1 if planned else None)
    assert len(probes) <= 2 * math.log2(planned + 2) + 2, len(probes)


def test_a_reading_of_many_commits_checks_the_way_to_the_log_once_and_reads_each_by_its_size(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20's ask cost: a reading of the log's tail built one storage per commit (each
    checking ``_delta_log`` for a link again), looked at each commit before reading it, and
    read each into a buffer of the 16 MB bound. One storage per reading, the bounded get
    first, and reads sized by the file: counted, not timed."""
    from deltalake import write_deltalake

    from airflow_eod.core.storage import local

    table = str(tmp_path / "table")
    for n in range(15):  # delta-rs checkpoints every 100 commits: a reading of 15 commits
        write_deltalake(table, pa.table({"seq": pa.array([n], pa.int64())}), mode="append")
    log_dir, commit0 = os.path.join(table, "_delta_log"), delta_log.commit_path(TableRef.parse(table), 0)
    looked: Counter[str] = Counter()
    asked: list[int] = []
    real_lstat, real_open = os.lstat, local.open_regular

    def lstat(path: Any, *args: Any, **kw: Any) -> Any:
        looked["log dir" if path == log_dir else "commit 0" if path == commit0 else "other"] += 1
        return real_lstat(path, *args, **kw)

    class Recording:
        def __init__(self, path: str) -> None:
            self._fh = real_open(path)

        def __enter__(self) -> Recording:
            return self

        def __exit__(self, *exc: object) -> None:
            self._fh.close()

        def fileno(self) -> int:
            return self._fh.fileno()

        def read(self, n: int = -1) -> bytes:
            asked.append(n)
            return self._fh.read(n)

    monkeypatch.setattr(os, "lstat", lstat)
    monkeypatch.setattr(local, "open_regular", Recording)
    delta_log.clear_cache()
    reading = open_table(TableRef.parse(table))
    monkeypatch.undo()
    assert reading is not None and reading.version() == 14 and reading.stats.commits_read == 15
    # A fixed few (open_table's check, the reading's storage, its head of the log, its listing
    # for a checkpoint, its signature), whatever the number of commits read.
    assert looked["log dir"] <= 5, looked
    assert looked["commit 0"] == 0, "a commit was looked at (head) before its bounded get"
    largest = max(os.path.getsize(os.path.join(log_dir, n)) for n in os.listdir(log_dir))
    assert asked and max(asked) <= largest + 1, f"a read asked for {max(asked)} bytes"
