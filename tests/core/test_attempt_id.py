"""One attempt, one id: every put-if-absent body carries it, and a write whose outcome the
storage could not tell is settled by reading it back (issue 20, the storage seam)."""

from __future__ import annotations

import contextvars
import json
import os
import threading
from dataclasses import asdict
from typing import Any

import pytest

from airflow_eod.core.attempt import attempt, current_attempt_id, current_try
from airflow_eod.core.batch import BatchKey, fingerprint
from airflow_eod.core.delta.binding import bound_table_id, check_table_identity
from airflow_eod.core.errors import UnsafePathError
from airflow_eod.core.load_flow import FrozenBatch, LoadRequest, load_batch
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.planlog.store import OFFSETS, PLAN_FORMAT, Plan, PlanLog
from airflow_eod.core.records.record_files import RecordStore
from airflow_eod.core.records.store import CommitRecord, write_record
from airflow_eod.core.result import LoadResult
from airflow_eod.core.source import ReadContext
from airflow_eod.core.storage import LocalStorage, UnknownOutcome, put_settled, settle_put
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.spark import load_job
from airflow_eod.spark.load_spec import LoadSettings, LoadSpec
from tests.support.helpers import orders_source
from tests.support.storage_doubles import FailsBeforeLanding, LandsThenLosesTheReply

BODY = b'{"attempt": "a1", "seq": 7}'


def _plan(seq: int = 0) -> Plan:
    inputs: list[dict[str, Any]] = [{"path": f"/in/{seq}", "size": 1, "mtime_ns": 1}]
    key = BatchKey.for_offsets("p", seq, inputs)
    return Plan("p", key.key, OFFSETS, {"n": 1}, inputs, seq=seq, planned_at="2024-01-01T00:00:00+00:00")


def _on_disk(path: str) -> dict[str, Any]:
    with open(path) as fh:
        body: dict[str, Any] = json.load(fh)
    return body


# -- the attempt context ------------------------------------------------------------------
def test_the_attempt_context_holds_one_id_and_outside_any_each_call_gets_a_fresh_one() -> None:
    outside = {current_attempt_id() for _ in range(3)}
    assert len(outside) == 3  # two writes outside an attempt never pass for each other's
    with attempt(2, attempt_id="a1"):
        assert (current_try(), current_attempt_id(), current_attempt_id()) == (2, "a1", "a1")
        with attempt(3):  # a fresh id when none is given, the same for the whole body
            inner = current_attempt_id()
            assert inner not in ("a1", *outside) and current_attempt_id() == inner
            assert len(inner) == 16
        assert current_attempt_id() == "a1"
    assert current_try() is None and current_attempt_id() != "a1"


def test_an_attempt_id_that_cannot_name_a_directory_is_refused() -> None:
    with pytest.raises(UnsafePathError, match="attempt id"):
        with attempt(1, attempt_id="../a1"):
            pass


def test_racing_attempts_in_threads_each_see_their_own_id() -> None:
    seen: dict[str, str] = {}
    barrier = threading.Barrier(2)

    def run(ident: str) -> None:
        with attempt(1, attempt_id=ident):
            barrier.wait()
            seen[ident] = current_attempt_id()

    threads = [threading.Thread(target=run, args=(i,)) for i in ("t1", "t2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"t1": "t1", "t2": "t2"}


# -- settling an unknown outcome -------------------------------------------------------------
def test_a_write_that_landed_before_its_reply_was_lost_is_the_writers(tmp_path: Any) -> None:
    store = LandsThenLosesTheReply(root=str(tmp_path / "bare"))
    with pytest.raises(UnknownOutcome):  # what the backend itself can say: it cannot tell
        store.put_if_absent("log/07.json", BODY, attempt="a1")
    assert store.get("log/07.json") == BODY  # (it landed)
    # The shared function reads back and learns "mine", without putting again.
    store = LandsThenLosesTheReply(root=str(tmp_path / "settled"))
    assert put_settled(store, "log/07.json", BODY, attempt="a1") is True
    assert store.puts == 1
    assert store.get("log/07.json") == BODY


def test_a_write_that_never_landed_is_put_again(tmp_path: Any) -> None:
    store = FailsBeforeLanding(root=str(tmp_path))
    assert put_settled(store, "log/07.json", BODY, attempt="a1") is True
    assert store.puts == 2  # the read-back found nothing, so it put again
    assert store.get("log/07.json") == BODY


def test_a_racers_body_at_the_key_is_not_mine(tmp_path: Any) -> None:
    """Another attempt's write landed while this one's outcome was unknown: not this one's,
    and the racer's object stays."""
    racer = b'{"attempt": "a2", "seq": 7}'
    LocalStorage(root=str(tmp_path)).put_if_absent("log/07.json", racer, attempt="a2")
    store = FailsBeforeLanding(root=str(tmp_path))
    assert put_settled(store, "log/07.json", BODY, attempt="a1") is False
    assert settle_put(store, "log/07.json", BODY, attempt="a1") is False
    assert store.get("log/07.json") == racer


def test_an_outcome_that_stays_unknown_is_not_guessed(tmp_path: Any) -> None:
    store = FailsBeforeLanding(root=str(tmp_path), lose=10)
    with pytest.raises(UnknownOutcome, match="still unknown after 3 puts"):
        put_settled(store, "log/07.json", BODY, attempt="a1")
    assert store.puts == 4 and store.head("log/07.json") is None
    # Without an attempt id the same bytes could be another writer's: the error stands.
    with pytest.raises(UnknownOutcome):
        put_settled(LandsThenLosesTheReply(root=str(tmp_path / "n")), "k.json", b"{}", attempt=None)
    with pytest.raises(ValueError, match="attempt id"):
        settle_put(store, "log/07.json", b"{}", attempt="a1")


# -- every body carries the id -------------------------------------------------------------
def test_plan_log_entries_and_commit_records_carry_the_attempt_id_and_read_back_unchanged(
    tmp_path: Any,
) -> None:
    log = PlanLog(TableRef.parse(str(tmp_path)), "p")
    plan = _plan()
    record = CommitRecord(
        batch_key=plan.batch_key,
        generation=0,
        table_id="t-1",
        table_version=3,
        manifest=asdict(
            Manifest("p", plan.batch_key, 0, plan.boundary, plan.input_fingerprint, 1, 1, "a1", "delta-rs")
        ),
        files=["part-0.parquet"],
        committed_at="2024-01-01T00:00:00+00:00",
    )
    with attempt(1, attempt_id="a1"):
        stored = log.put_plan(plan)
        assert log.claim("run-1", 0) == 0
        write_record(log, record)
    assert stored == plan and log.get_offset_plan(0) == plan
    assert log.claimed_seq("run-1") == 0
    records = RecordStore(plan_log=log)
    body = records.commit_record(plan.batch_key, 0, "t-1")
    assert body == asdict(record) and CommitRecord(**body) == record  # no envelope key shows
    for path in (
        os.path.join(log.root, "offsets", "00000000.json"),
        log._claim_path("run-1"),
        records.commit_record_path(plan.batch_key, 0, "t-1"),
    ):
        on_disk = _on_disk(path)
        assert (on_disk["attempt"], on_disk["format"]) == ("a1", PLAN_FORMAT), path


def test_a_plan_log_write_whose_reply_was_lost_is_known_for_the_writers(tmp_path: Any) -> None:
    log = PlanLog(TableRef.parse(str(tmp_path)), "p")
    log.storage = LandsThenLosesTheReply(root=str(tmp_path))
    with attempt(1, attempt_id="a1"):
        assert log.put_plan(_plan()) == _plan()
        assert log.claim("run-1", 0) == 0
    assert _on_disk(log._claim_path("run-1"))["attempt"] == "a1"


def test_a_plan_log_write_that_never_landed_is_written_again(tmp_path: Any) -> None:
    log = PlanLog(TableRef.parse(str(tmp_path)), "p")
    log.storage = FailsBeforeLanding(root=str(tmp_path))
    with attempt(1, attempt_id="a1"):
        assert log.put_plan(_plan()) == _plan()
    assert _on_disk(os.path.join(log.root, "offsets", "00000000.json"))["attempt"] == "a1"


def test_entries_written_before_the_attempt_id_still_read(tmp_path: Any) -> None:
    """The envelope of the previous release: the body, ``format`` and ``checksum`` only."""
    log = PlanLog(TableRef.parse(str(tmp_path)), "p")
    plan = _plan()

    def write_old(path: str, body: dict[str, Any]) -> None:
        payload = dict(body, format=PLAN_FORMAT)
        payload["checksum"] = fingerprint(payload)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(json.dumps(payload, sort_keys=True))

    write_old(os.path.join(log.root, "offsets", "00000000.json"), asdict(plan))
    write_old(log._claim_path("run-1"), {"run_token": "run-1", "seq": 0})
    assert "attempt" not in _on_disk(log._claim_path("run-1"))
    assert log.get_offset_plan(0) == plan
    assert log.claimed_seq("run-1") == 0
    with attempt(2, attempt_id="a2"):  # a retry of the new release finds the old entries
        assert log.put_plan(_plan()) == plan
        assert log.claim("run-1", 5) == 0


def test_the_table_binding_carries_the_attempt_id(tmp_path: Any) -> None:
    with attempt(1, attempt_id="a1"):
        check_table_identity(TableRef.parse(str(tmp_path)), "table-1")
    assert _on_disk(os.path.join(tmp_path, "_eod", "table.json")) == {"table_id": "table-1", "attempt": "a1"}
    assert bound_table_id(TableRef.parse(str(tmp_path))) == "table-1"
    # A binding of the previous release (the table id alone) still reads.
    with open(os.path.join(tmp_path, "_eod", "table.json"), "w") as fh:
        json.dump({"table_id": "table-1"}, fh)
    assert bound_table_id(TableRef.parse(str(tmp_path))) == "table-1"


# -- one attempt, one id everywhere -----------------------------------------------------------
def test_a_load_has_one_id_in_its_plan_its_spec_and_its_driver(
    landing: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``load_batch`` opens the attempt; the plan it freezes, the spec its runner builds and
    the attempt ``run_load`` opens (in a submitted driver: its own process) share one id."""
    write_order_files(landing, 1, 5)
    source = orders_source(landing)
    in_driver: list[tuple[int | None, str]] = []

    def driver_body(spark: Any, spec: LoadSpec, transform: Any, credentials: Any) -> LoadResult:
        in_driver.append((current_try(), current_attempt_id()))
        raise RuntimeError("stop before Spark")

    monkeypatch.setattr(load_job, "_run_load", driver_body)
    specs: list[LoadSpec] = []

    def run(frozen: FrozenBatch) -> LoadResult:
        spec = LoadSpec.for_batch(TableRef.parse(table), frozen, source, LoadSettings(try_number=2))
        specs.append(spec)
        # A submitted driver starts outside any attempt (an empty context) and reads the spec.
        driver = LoadSpec.from_json(spec.to_json())
        return contextvars.Context().run(load_job.run_load, None, driver)  # type: ignore[arg-type]

    with pytest.raises(RuntimeError, match="stop before Spark"):
        load_batch(
            LoadRequest(TableRef.parse(table), "tests.attempt", "run-1", try_number=2),
            source,
            ReadContext(spark_factory=_no_spark),
            run=run,
        )
    (spec,) = specs
    assert in_driver == [(2, spec.attempt_id)]
    plan_log = PlanLog(TableRef.parse(table), "tests.attempt")
    assert _on_disk(os.path.join(plan_log.root, "offsets", "00000000.json"))["attempt"] == spec.attempt_id
    # A spec built outside any attempt gets an id of its own, as before.
    assert LoadSpec(table=TableRef.parse(table), plan=spec.plan, source=source).attempt_id != spec.attempt_id


def _no_spark() -> Any:
    raise AssertionError("planning landing files must not start Spark")
