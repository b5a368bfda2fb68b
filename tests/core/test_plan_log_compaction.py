"""Compaction of the plan log into segments (issue 21, item 4), on the local backend and on S3.

Tables grow through the product's own commit path (one Parquet object per batch staged
through the storage seam, then :func:`~airflow_eod.core.load_commit.commit_batch`), and
each batch also leaves what planning leaves: its plan and a file claim. Every test compares
what the ask, the plan log, the commit records and the audit answer before and after.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_eod.core import faults
from airflow_eod.core.ask import ask
from airflow_eod.core.audit.verify import audit_table
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.delta.log import clear_cache
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.planlog import store as planlog_store
from airflow_eod.core.planlog.segments import BUCKETS, Segments
from airflow_eod.core.planlog.store import INTERVAL, Plan, PlanLog
from airflow_eod.core.records import compaction
from airflow_eod.core.records.compaction import compact
from airflow_eod.core.records.record_files import RecordStore
from airflow_eod.core.staged_files import StagedBatch
from airflow_eod.core.table_ref import TableRef
from tests.support.store_staging import stage_table

PIPELINE = "tests.compaction"


def batch_at(n: int) -> BatchKey:
    """The ``n``-th daily batch from 2026-01-01."""
    from datetime import UTC, datetime, timedelta

    start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=n)
    return BatchKey(PIPELINE, f"i-{start:%Y%m%dT%H%M%SZ}-{start + timedelta(days=1):%Y%m%dT%H%M%SZ}")


def _stage(ref: TableRef, batch: BatchKey, ids: list[int], generation: int) -> tuple[StagedBatch, Manifest]:
    data = pa.table({"id": pa.array(ids, pa.int64()), "batch": [batch.key] * len(ids)})
    staged, attempt = stage_table(ref, batch, generation, data)
    rows = len(ids)
    manifest = Manifest(PIPELINE, batch.key, generation, {"k": batch.key}, "fp", rows, 1, attempt, "delta-rs")
    return staged, manifest


def plan_of(batch: BatchKey, generation: int = 0, inputs: list[dict[str, Any]] | None = None) -> Plan:
    start, end = batch.key[2:].split("-")
    return Plan(
        PIPELINE,
        batch.key,
        INTERVAL,
        {"start": start, "end": end},
        inputs if inputs is not None else [{"path": f"landing/{batch.key}.csv", "size": 10, "mtime_ns": 1}],
        generation=generation,
    )


def load(ref: TableRef, n: int, *, generation: int = 0, restate: bool = False) -> None:
    """Plan, claim the landing file of, and commit the ``n``-th batch, as a load does."""
    batch = batch_at(n)
    plan_log = PlanLog(ref, PIPELINE)
    plan = plan_log.put_plan(plan_of(batch, generation))
    plan_log.claim_file(plan.inputs[0], batch.key)
    commit_batch(ref, batch, generation, *_stage(ref, batch, [n], generation), replace_previous=restate)


def grow(ref: TableRef, batches: int, start: int = 0) -> None:
    for n in range(start, start + batches):
        load(ref, n)


def objects(ref: TableRef) -> tuple[int, int]:
    """(entries, segment objects) stored under the plan log."""
    store, root = ref.storage(), ref.plan_log_key(PIPELINE)
    entries = segments = 0
    if ref.is_local:  # a folder is no object (compaction leaves a local batch's folder empty)
        files = [p for p in Path(ref.path, root).rglob("*") if p.is_file()]
        segments = sum(1 for p in files if "segments" in p.relative_to(Path(ref.path, root)).parts[:1])
        return len(files) - segments, segments
    stack = [root]
    while stack:
        prefix = stack.pop()
        for name in store.list(prefix):
            key = f"{prefix}/{name}"
            if store.head(key) is None:
                stack.append(key)  # a prefix (SeaweedFS lists an emptied one for a while)
            elif key.startswith(f"{root}/segments/"):
                segments += 1
            else:
                entries += 1
    return entries, segments


def answers(ref: TableRef, batches: int) -> dict[str, Any]:
    """Everything a reader of the plan log and the table answers about the batches."""
    clear_cache()
    plan_log = PlanLog(ref, PIPELINE)
    records = RecordStore(plan_log=plan_log)
    out: dict[str, Any] = {}
    table_id = plan_log.bound_table_id()
    assert table_id is not None
    for n in range(batches):
        batch = batch_at(n)
        status = ask(ref, batch)
        plan = plan_log.get_plan(batch.key)
        out[batch.key] = (
            status.committed,
            status.committed_generation,
            status.table_version,
            None if plan is None else asdict(plan),
            plan_log.file_owner(f"landing/{batch.key}.csv"),
            records.newest_commit_record(batch.key, table_id),
            plan_log.newest_generation(batch.key),
        )
    out["names"] = {
        "batches": plan_log.names("batches"),
        "intervals": plan_log.names("intervals"),
        "files": plan_log.names("files"),
        "recorded": records.recorded_batches(),
        "kinds": plan_log.boundary_kinds(),
    }
    report = audit_table(ref)
    assert report.ok, report.to_dict()
    out["audit"] = [(b.batch_key, b.recorded_rows, b.live_rows) for b in report.batches]
    return out


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.objectstore)])
def ref(request: pytest.FixtureRequest, tmp_path: Path) -> TableRef:
    if request.param == "local":
        return TableRef.parse(str(tmp_path / "orders"))
    pytest.importorskip("obstore")
    server = request.getfixturevalue("s3_server")
    return TableRef.parse(f"s3://{server.bucket}/lake/{uuid.uuid4().hex}/orders", server.options())


@pytest.fixture(autouse=True)
def no_auto_compaction(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compaction runs only where a test runs it (or sets its own cadence)."""
    monkeypatch.setattr(compaction, "DEFAULT_EVERY", 0)


def test_compaction_bounds_the_objects_and_changes_no_answer(ref: TableRef) -> None:
    grow(ref, 24)
    before, objs_before = answers(ref, 24), objects(ref)
    assert objs_before == (24 * 3, 0)  # plan, file claim, commit record per batch
    report = compact(ref, PIPELINE, window=4)
    assert report.settled == 20 and report.compacted == 60 and report.deleted == 60 and report.stopped is None
    entries, segments = objects(ref)
    assert entries == 4 * 3 and 0 < segments <= BUCKETS
    assert answers(ref, 24) == before
    # A second run finds nothing more to do; new batches are loaded and compacted in turn.
    assert compact(ref, PIPELINE, window=4).compacted == 0
    grow(ref, 6, start=24)
    report = compact(ref, PIPELINE, window=4)
    assert report.compacted == 18 and report.stopped is None
    entries, segments = objects(ref)
    assert entries == 4 * 3 and segments <= BUCKETS  # one generation per bucket, the older ones gone
    after = answers(ref, 30)
    assert {k: v for k, v in after.items() if k in before and k not in ("names", "audit")} == {
        k: v for k, v in before.items() if k not in ("names", "audit")
    }
    assert len(after["audit"]) == 30 and after["names"]["recorded"] == sorted(
        batch_at(n).key for n in range(30)
    )


def test_uncommitted_plans_and_the_window_stay_as_they_are(ref: TableRef) -> None:
    grow(ref, 6)
    plan_log = PlanLog(ref, PIPELINE)
    waiting = batch_at(0)
    # A plan nobody committed (of an old interval), and a restatement in flight of batch 1.
    orphan = BatchKey(PIPELINE, "i-20250101T000000Z-20250102T000000Z")
    plan_log.put_plan(plan_of(orphan))
    plan_log.put_plan(plan_of(batch_at(1), 1))
    report = compact(ref, PIPELINE, window=2)
    assert report.settled == 3  # batches 0, 2, 3: not 1 (restating), not 4 and 5 (the window)
    store, root = ref.storage(), ref.plan_log_key(PIPELINE)
    assert store.head(f"{root}/intervals/{orphan.key}.json") is not None
    assert store.head(f"{root}/intervals/{batch_at(1).key}.json") is not None
    assert store.head(f"{root}/intervals/{batch_at(5).key}.json") is not None
    assert store.head(f"{root}/intervals/{waiting.key}.json") is None
    assert plan_log.get_plan(waiting.key) == PlanLog(ref, PIPELINE).get_plan(waiting.key) is not None


@pytest.mark.parametrize("point", faults.COMPACTION_POINTS)
def test_a_crash_at_each_boundary_leaves_every_answer_and_the_next_run_finishes(
    ref: TableRef, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    grow(ref, 10)
    before = answers(ref, 10)
    monkeypatch.setenv(faults.ENV_VAR, f"{point}=raise")
    monkeypatch.setenv(faults.TESTING_SWITCH, "1")
    with pytest.raises(faults.InjectedFault):
        compact(ref, PIPELINE, window=2)
    entries, _ = objects(ref)
    if point == "compaction_after_segment":
        assert entries == 30  # the segment is written, its entries are still there too
    assert answers(ref, 10) == before
    monkeypatch.delenv(faults.ENV_VAR)
    compact(ref, PIPELINE, window=2)
    assert objects(ref)[0] == 2 * 3
    assert answers(ref, 10) == before


def test_a_writer_paused_across_a_compaction_gets_the_segments_entry(
    ref: TableRef, monkeypatch: pytest.MonkeyPatch
) -> None:
    grow(ref, 6)
    old = batch_at(0)
    stored = PlanLog(ref, PIPELINE).get_plan(old.key)
    assert stored is not None
    real_put = planlog_store.put_settled
    paused = {"done": False}

    def pause_across_compaction(storage: Any, key: str, data: bytes, *, attempt: str | None) -> bool:
        # The zombie checked the segments (nothing there yet) and pauses before its put;
        # meanwhile the entry is compacted and deleted, so the put itself succeeds.
        if not paused["done"] and key.endswith(f"intervals/{old.key}.json"):
            paused["done"] = True
            assert compact(ref, PIPELINE, window=2).compacted > 0
            assert ref.storage().head(key) is None
        return real_put(storage, key, data, attempt=attempt)

    root = ref.plan_log_key(PIPELINE)
    monkeypatch.setattr(planlog_store, "put_settled", pause_across_compaction)
    other = plan_of(old, inputs=[{"path": "landing/elsewhere.csv", "size": 1, "mtime_ns": 2}])
    # The zombie's put lands (the slot was free), then it finds the key in a segment: the
    # segment's plan wins, and the zombie's own copy is gone.
    assert PlanLog(ref, PIPELINE).put_plan(other) == stored
    assert paused["done"]
    assert ref.storage().head(f"{root}/intervals/{old.key}.json") is None
    assert PlanLog(ref, PIPELINE).get_plan(old.key) == stored
    # A writer after the compaction is turned away by the segments before any put.
    monkeypatch.setattr(planlog_store, "put_settled", real_put)
    assert PlanLog(ref, PIPELINE).put_plan(other) == stored
    assert ref.storage().head(f"{root}/intervals/{old.key}.json") is None


def test_two_racing_compactors_one_wins_and_nothing_is_lost(
    ref: TableRef, monkeypatch: pytest.MonkeyPatch
) -> None:
    grow(ref, 10)
    before = answers(ref, 10)
    real_write = Segments.write
    inner: list[Any] = []

    def overtaken(self: Segments, bucket: str, generation: int, entries: dict[str, str]) -> bool:
        # The first compactor is about to write its first segment: a second one runs whole.
        if not inner:
            inner.append(None)
            inner[0] = compact(ref, PIPELINE, window=2)
        return real_write(self, bucket, generation, entries)

    monkeypatch.setattr(Segments, "write", overtaken)
    first = compact(ref, PIPELINE, window=2)
    assert inner[0].stopped is None and inner[0].compacted == 24
    assert first.stopped is not None and first.deleted == 0
    monkeypatch.setattr(Segments, "write", real_write)
    assert objects(ref)[0] == 6 and answers(ref, 10) == before
    # And two at once, for real, with more batches to settle.
    grow(ref, 6, start=10)
    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda: results.append(compact(ref, PIPELINE, window=2))) for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    compact(ref, PIPELINE, window=2)  # whatever a loser left
    assert objects(ref)[0] == 6
    after = answers(ref, 16)
    assert all(after[k] == v for k, v in before.items() if k not in ("names", "audit"))


def test_restating_a_compacted_batch(ref: TableRef) -> None:
    grow(ref, 8)
    compact(ref, PIPELINE, window=2)
    old = batch_at(0)
    assert ref.storage().head(f"{ref.plan_log_key(PIPELINE)}/intervals/{old.key}.json") is None
    plan_log = PlanLog(ref, PIPELINE)
    assert plan_log.newest_generation(old.key) == 0
    assert plan_log.claim_restatement("run-restate", old.key, 1) == 1
    load(ref, 0, generation=1, restate=True)
    status = ask(ref, old)
    assert status.committed and status.committed_generation == 1
    table_id = plan_log.bound_table_id()
    assert table_id is not None
    record = RecordStore(plan_log=PlanLog(ref, PIPELINE)).newest_commit_record(old.key, table_id)
    assert record is not None and record["generation"] == 1
    assert PlanLog(ref, PIPELINE).newest_generation(old.key) == 1
    report = audit_table(ref)
    assert report.ok, report.to_dict()
    # Settled again, the restated batch compacts too: both generations read from segments.
    grow(ref, 3, start=8)
    compact(ref, PIPELINE, window=2)
    fresh = PlanLog(ref, PIPELINE)
    assert fresh.get_plan(old.key, 1) is not None and fresh.get_plan(old.key) is not None
    assert ask(ref, old).committed_generation == 1
    assert audit_table(ref).ok


def test_the_commit_compacts_every_so_often_and_a_failure_never_fails_the_load(
    ref: TableRef, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(compaction, "DEFAULT_EVERY", 8)
    monkeypatch.setattr(compaction, "DEFAULT_WINDOW", 3)
    grow(ref, 9)  # versions 0..8: the commit of version 8 compacts
    assert objects(ref)[0] == 3 * 3
    assert answers(ref, 9)["audit"] == [(batch_at(n).key, 1, 1) for n in range(9)]

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError("the store said no")

    monkeypatch.setattr(compaction, "compact", broken)
    grow(ref, 8, start=9)  # version 16 compacts, and fails
    assert "compaction after version 16 failed" in caplog.text
    assert ask(ref, batch_at(16)).committed


@pytest.mark.objectstore
def test_planning_asks_a_mark_not_the_segments_which_kinds_a_pipeline_has(s3_server: Any) -> None:
    """The planner asks which kinds of batch (interval, offsets) a pipeline has at every
    planning: once its entries are compacted, a mark per folder answers that in one request
    each, without reading the 64 buckets' segments (whose bytes grow with the history)."""
    ref = TableRef.parse(f"s3://{s3_server.bucket}/lake/{uuid.uuid4().hex}/orders", s3_server.options())
    grow(ref, 8)
    compact(ref, PIPELINE, window=2)
    store = ref.storage()
    store.requests.clear()  # type: ignore[attr-defined]
    assert PlanLog(ref, PIPELINE).boundary_kinds() == {INTERVAL}
    made = dict(store.requests)  # type: ignore[attr-defined]
    assert "GetObject" not in made and sum(made.values()) <= 4, made
