"""Third adversarial review of issue 21 (changes fc00cb1..09af33b): plan-log compaction,
object-store tables, submit mode.

Each test asserts what DESIGN.md (sections 2-4, invariants I1-I11) requires and fails on
09af33b. Core-level where possible (no Spark).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from airflow_eod.core.planlog import store as planlog_store
from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.records import compaction
from airflow_eod.core.records.compaction import compact
from airflow_eod.core.table_ref import TableRef
from tests.core.test_plan_log_compaction import PIPELINE, batch_at, grow, plan_of


class Killed(BaseException):
    """SIGKILL of the writing process (no except clause, no finally that talks to the store)."""


@pytest.fixture(autouse=True)
def no_auto_compaction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compaction, "DEFAULT_EVERY", 0)


# -- 1. a writer killed between its put and its post-check shadows the segment forever --------
def test_a_writer_killed_after_its_put_across_a_compaction_never_changes_a_settled_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PlanLog._put_if_absent checks the segments, puts, and checks the segments again (the
    'writer paused across a compaction' case of test_plan_log_compaction). If the writer is
    killed between the put and the second check, its own body stays stored at the compacted
    key, and every reader prefers the stored copy to the segment's: the settled plan and file
    claim of a committed batch silently change (I3: every attempt sees the same plan; the plan
    log's own promise "any reader, at any time, sees the same answer"), and no later
    compaction removes it (the batch's records are compacted, so it is never settled again)."""
    ref = TableRef.parse(str(tmp_path / "orders"))
    real_put = planlog_store.put_settled

    def kill_next_put_across_a_compaction() -> None:
        def killed_after_put(storage: Any, key: str, data: bytes, *, attempt: str | None) -> bool:
            # The zombie checked the segments (nothing yet) and paused; the entry is compacted
            # and deleted meanwhile, its put lands, and it is killed before it looks again.
            monkeypatch.setattr(planlog_store, "put_settled", real_put)
            assert compact(ref, PIPELINE, window=2).compacted > 0
            real_put(storage, key, data, attempt=attempt)
            raise Killed()

        monkeypatch.setattr(planlog_store, "put_settled", killed_after_put)

    grow(ref, 6)
    # A zombie planner of batch 3 had read "no owner" for batch 0's landing file before the
    # first claim landed.
    landing = f"landing/{batch_at(0).key}.csv"
    stored_claim = PlanLog(ref, PIPELINE).file_owner(landing)
    zombie = PlanLog(ref, PIPELINE)
    real_owner = zombie.file_owner
    calls = iter([None])
    monkeypatch.setattr(zombie, "file_owner", lambda path: next(calls, real_owner(path)))
    kill_next_put_across_a_compaction()
    with pytest.raises(Killed):
        zombie.claim_file({"path": landing, "size": 99, "mtime_ns": 99}, batch_at(3).key)
    # A zombie planner of batch 6 (planned before, its put paused) does the same to a plan.
    grow(ref, 4, start=6)
    old = batch_at(6)
    stored_plan = PlanLog(ref, PIPELINE).get_plan(old.key)
    assert stored_plan is not None and stored_claim is not None
    other = plan_of(old, inputs=[{"path": "landing/elsewhere.csv", "size": 1, "mtime_ns": 2}])
    kill_next_put_across_a_compaction()
    with pytest.raises(Killed):
        PlanLog(ref, PIPELINE).put_plan(other)
    # Later compactions do not repair it.
    grow(ref, 3, start=10)
    compact(ref, PIPELINE, window=2)
    fresh = PlanLog(ref, PIPELINE)
    claim_ok = fresh.file_owner(landing) == stored_claim
    plan_ok = asdict(fresh.get_plan(old.key)) == asdict(stored_plan)
    assert (claim_ok, plan_ok) == (True, True), "a killed zombie replaced a settled (claim, plan)"
    assert fresh.file_owner(landing) == stored_claim, "a killed zombie's file claim replaced the settled one"
    assert asdict(fresh.get_plan(old.key)) == asdict(stored_plan), (
        "a killed zombie's plan replaced the settled one"
    )


# -- 2. a committed manifest's outbox steers the table's credentials at another table ----------
@pytest.mark.objectstore
def test_an_outbox_in_the_tables_content_never_writes_to_a_table_outside_its_roots(s3_server: Any) -> None:
    """TableRef.neighbour gives a quarantine table on the same store the main table's storage
    options (its credentials). deliver_outbox takes the quarantine table's URI from the
    committed manifest (table content, which any writer of the table can commit), not from
    the task's configuration, so a manifest naming another prefix of the bucket (another
    team's table) makes every settle of that batch commit into it with the table's
    credentials (I11: nothing outside the table's roots and the declared quarantine table)."""
    import uuid

    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from airflow_eod.core.ask import ask
    from airflow_eod.core.load_commit import commit_batch
    from airflow_eod.core.quarantine_outbox import Outbox, with_outbox
    from airflow_eod.core.settle import settle_committed
    from tests.core.test_plan_log_compaction import _stage

    base = f"s3://{s3_server.bucket}/adv-i21c/{uuid.uuid4().hex}"
    options = s3_server.options()
    ref = TableRef.parse(f"{base}/orders", options)
    # Another pipeline's quarantine table on the bucket (the quarantine schema every one has).
    victim_uri = f"{base}/other_team/payments_quarantine"
    rejects = pa.table({"source_file": ["f.csv"], "raw_record": ["bad,row"]})
    write_deltalake(victim_uri, rejects, storage_options=options)
    before = DeltaTable(victim_uri, storage_options=options).version()
    batch = batch_at(0)
    staged, manifest = _stage(ref, batch, [1, 2], 0)
    # What another writer of the main table (or a hand edit of a commit) can put there.
    manifest = with_outbox(manifest, Outbox(victim_uri, replace_previous=True))
    commit_batch(ref, batch, 0, staged, manifest)
    status = ask(ref, batch)
    assert status.committed
    try:
        settle_committed(ref, status)  # every retry of the batch's task does this
    except Exception:
        pass  # refusing is fine; writing is not
    after = DeltaTable(victim_uri, storage_options=options)
    assert after.version() == before, (
        f"the settle committed {after.history(1)[0].get('operation')} into {victim_uri}, a table "
        "named only by the main table's manifest, with the main table's credentials"
    )


# -- 3. one bad segment object wedges 1/64 of every future batch -----------------------------
def test_a_bad_segment_does_not_wedge_new_batches_that_hash_to_its_bucket(tmp_path: Path) -> None:
    """Every put of a plan-log entry first reads the newest segment of the entry's bucket
    (PlanLog._put_if_absent). One unreadable segment object (a truncated copy, a storage
    fault, a stray object named like a newer generation) makes planning fail for every
    *new* batch whose key hashes to that bucket, forever (about one in 64 of all future
    batches); the error names the segment, not the batch, and sends the operator to the
    runbook's 'corrupt plan-log entry', whose way out ('move the entry away') here would
    delete up to 1/64 of the settled batches' commit records (the only memory of batches
    whose markers expired: I1). I6/I7: a new batch needs nothing from a settled batch's
    segment; it must plan, or fail naming the batch with a fenced way out."""
    from airflow_eod.core.errors import PlanLogError
    from airflow_eod.core.planlog.segments import bucket_of

    ref = TableRef.parse(str(tmp_path / "orders"))
    grow(ref, 6)
    compact(ref, PIPELINE, window=2)
    store, root = ref.storage(), ref.plan_log_key(PIPELINE)
    bucket = bucket_of(f"intervals/{batch_at(0).key}.json")
    # A stray object named like the bucket's next generation (not valid JSON).
    store.put(f"{root}/segments/{bucket}/99999999.json", b"{truncated")
    # A brand-new batch whose plan lands in that bucket.
    n = next(n for n in range(100, 5000) if bucket_of(f"intervals/{batch_at(n).key}.json") == bucket)
    try:
        PlanLog(ref, PIPELINE).put_plan(plan_of(batch_at(n)))
    except PlanLogError as exc:
        assert batch_at(n).key in str(exc), f"a new batch is wedged by another batch's segment: {exc}"
