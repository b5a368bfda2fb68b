"""Unit tests (no JVM): batch identity, the plan log's put-if-absent, and planning."""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest

from airflow_eod.core.batch import BatchKey, validate_pipeline_id
from airflow_eod.core.errors import ConfigurationError, InputChangedError, PlanLogError
from airflow_eod.core.planlog.store import OFFSETS, Plan, PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.sources.jdbc_incremental import JdbcIncrementalSource
from airflow_eod.sources.landing_files import LandingFilesSource

UTC = UTC


def test_interval_key_is_derived_from_the_interval_only() -> None:
    start = datetime(2026, 11, 20, tzinfo=UTC)
    a = BatchKey.for_interval("dag.task", start, start + timedelta(days=1))
    b = BatchKey.for_interval(
        "dag.task", start.astimezone(timezone(timedelta(hours=5))), start + timedelta(days=1)
    )
    assert a == b
    assert a.key == "i-20261120T000000Z-20261121T000000Z"
    assert a.app_id == "eod:dag.task:i-20261120T000000Z-20261121T000000Z"
    assert BatchKey.from_app_id(a.app_id) == a
    assert BatchKey.from_app_id("spark-streaming-query") is None


def test_naive_or_inverted_intervals_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="no time zone"):
        BatchKey.for_interval("p", datetime(2026, 1, 1), datetime(2026, 1, 2))
    with pytest.raises(ConfigurationError, match="before its start"):
        BatchKey.for_interval("p", datetime(2026, 1, 2, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC))


def test_offset_key_changes_with_the_offsets() -> None:
    k1 = BatchKey.for_offsets("p", 3, [{"path": "/a", "size": 1}])
    k2 = BatchKey.for_offsets("p", 3, [{"path": "/a", "size": 2}])
    assert k1.key.startswith("o-00000003-") and k1 != k2
    assert BatchKey.for_offsets("p", 3, [{"path": "/a", "size": 1}]) == k1


@pytest.mark.parametrize("bad", ["", "has space", "a:b", "../x", "-lead", "x" * 201])
def test_bad_pipeline_ids_are_refused(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="pipeline id"):
        validate_pipeline_id(bad)


def _plan(seq: int, inputs: list[dict[str, object]]) -> Plan:
    key = BatchKey.for_offsets("p", seq, inputs)
    return Plan("p", key.key, OFFSETS, {"n": len(inputs)}, inputs, seq=seq)


def test_put_plan_is_put_if_absent_under_a_race(tmp_path: object) -> None:
    log = PlanLog(TableRef.parse(str(tmp_path)), "p")
    winners: list[str] = []
    got_own: list[bool] = []
    barrier = threading.Barrier(8)

    def racer(i: int) -> None:
        barrier.wait()
        stored = log.put_plan(_plan(0, [{"path": f"/f{i}"}]))
        winners.append(stored.batch_key)
        got_own.append(stored.inputs == [{"path": f"/f{i}"}])

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(winners)) == 1 and len(winners) == 8
    # The race happened: each racer planned other inputs, so seven lost the slot and were
    # handed the one plan that won, not their own.
    assert sorted(got_own) == [False] * 7 + [True]
    assert log.get_offset_plan(0).batch_key == winners[0]
    assert not [n for n in os.listdir(os.path.join(log.root, "offsets")) if n.startswith(".tmp")]


def test_hand_edited_or_truncated_plan_is_refused(tmp_path: object) -> None:
    log = PlanLog(TableRef.parse(str(tmp_path)), "p")
    plan = log.put_plan(_plan(0, [{"path": "/a", "size": 1, "mtime_ns": 1}]))
    path = os.path.join(log.root, "offsets", "00000000.json")
    body = json.load(open(path))
    body["inputs"][0]["size"] = 999
    with open(path, "w") as fh:
        json.dump(body, fh)
    with pytest.raises(PlanLogError, match="checksum"):
        log.get_plan(plan.batch_key)
    with open(path, "w") as fh:
        fh.write('{"pipeline_id": "p", "batch')
    with pytest.raises(PlanLogError, match="corrupt"):
        log.get_offset_plan(0)


def _touch(path: str, text: str, mtime: int) -> None:
    with open(path, "w") as fh:
        fh.write(text)
    os.utime(path, ns=(mtime, mtime))


def test_offset_planning_tracks_the_set_of_loaded_files(tmp_path: object) -> None:
    landing = os.path.join(str(tmp_path), "land")
    os.makedirs(landing)
    table = os.path.join(str(tmp_path), "t")
    _touch(os.path.join(landing, "b.csv"), "x\n1\n", 2_000_000_000)
    _touch(os.path.join(landing, "c.csv"), "x\n2\n", 3_000_000_000)
    _touch(os.path.join(landing, "_SUCCESS"), "", 1)
    committed: set[str] = set()
    src = LandingFilesSource(path=landing, max_files_per_batch=1)
    log = PlanLog(TableRef.parse(table), "p")

    def plan(run: str) -> Plan | None:
        return src.plan(log, run_token=run, is_committed=lambda k: k.key in committed)

    p0 = plan("r0")
    assert p0 is not None and [os.path.basename(f["path"]) for f in p0.inputs] == ["b.csv"]
    assert plan("r0") == p0, "a retry of the same run gets the same batch"
    assert plan("r1") == p0, "an uncommitted batch is loaded by the next run, not skipped"
    committed.add(p0.batch_key)
    # A late file with an older mtime than anything loaded must still be loaded once.
    _touch(os.path.join(landing, "a-late.csv"), "x\n0\n", 1_000_000_000)
    p1 = plan("r2")
    assert p1 is not None and [os.path.basename(f["path"]) for f in p1.inputs] == ["a-late.csv"]
    committed.add(p1.batch_key)
    p2 = plan("r3")
    assert p2 is not None and [os.path.basename(f["path"]) for f in p2.inputs] == ["c.csv"]
    committed.add(p2.batch_key)
    assert plan("r4") is None
    assert plan("r0") == p0


def test_byte_cap_and_verify(tmp_path: object) -> None:
    landing = os.path.join(str(tmp_path), "land")
    os.makedirs(landing)
    for i in range(3):
        _touch(os.path.join(landing, f"f{i}.csv"), "x" * 100, 1_000_000_000 + i)
    src = LandingFilesSource(path=landing, max_bytes_per_batch=250)
    plan = src.plan(
        PlanLog(TableRef.parse(str(tmp_path / "t")), "p"), run_token="r", is_committed=lambda k: False
    )  # type: ignore[operator]
    assert plan is not None and len(plan.inputs) == 2
    src.verify(plan)
    with open(os.path.join(landing, "f1.csv"), "a") as fh:
        fh.write("more")
    with pytest.raises(InputChangedError, match=r"f1\.csv changed after it was planned") as err:
        src.verify(plan)
    assert plan.batch_key in str(err.value)
    os.unlink(os.path.join(landing, "f0.csv"))
    with pytest.raises(InputChangedError, match="is gone"):
        src.verify(plan)


def test_interval_boundary_needs_an_interval(tmp_path: object) -> None:
    src = LandingFilesSource(path=str(tmp_path), boundary="interval")
    with pytest.raises(ConfigurationError, match="without a logical date"):
        src.plan(
            PlanLog(TableRef.parse(str(tmp_path / "t")), "p"), run_token="r", is_committed=lambda k: False
        )


@pytest.mark.parametrize(
    ("field", "value"),
    [("table", "orders; DROP TABLE orders"), ("key_column", 'id" OR 1=1 --'), ("table", "a.b.c")],
)
def test_identifiers_are_validated(field: str, value: str) -> None:
    kw = {"url": "jdbc:postgresql://127.0.0.1:5432/shop", "table": "orders", "key_column": "id", field: value}
    with pytest.raises(ConfigurationError, match="not a plain SQL identifier"):
        JdbcIncrementalSource(**kw)  # type: ignore[arg-type]


def test_credentials_in_the_url_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="must not carry user or password"):
        JdbcIncrementalSource(url="jdbc:postgresql://h/db?user=a&password=b", table="t", key_column="id")
