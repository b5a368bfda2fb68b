"""Merge loads on the Delta Spark engine (``engine="delta-spark"``, ``write_mode="merge"``):
Delta's own MERGE, with the batch's marker and manifest in its commit.

Inserts, updates, deletes and stale rows; a table holding several rows of a key, against
the delta-rs engine on the same table; a crash at each boundary in a child driver, then a
retry; two attempts racing (two drivers, and another writer committing inside the MERGE's
transaction); batches applied newest-first and oldest-first; delta-rs and delta-spark
merging one pipeline in turn; the session settings the MERGE uses, put back; deletion
vectors. Every case ends with the checker: the table against the source's newest row per key.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_eod.core.ask import ask
from airflow_eod.core.errors import BatchRefusedError, SchemaMismatchError
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.table_ref import TableRef
from airflow_eod.spark import delta_spark_merge
from airflow_eod.spark.delta_spark_merge import MERGE_SETTINGS as SESSION_SETTINGS
from airflow_eod.spark.load_job import run_load
from tests.conftest import DELTA_SPARK_JARS_ENV
from tests.support.helpers import interval_plan, plan_for, run_child, spec_for
from tests.support.merge_helpers import (
    CDC_COLUMNS,
    MERGE_SETTINGS,
    Change,
    cdc_source,
    check_merge,
    expected_rows,
    table_rows,
    write_changes,
)

pytestmark = [pytest.mark.spark, pytest.mark.delta_spark]

ENGINE = "delta-spark"
PIPE = "tests.ds_merge"
DAY = datetime(2026, 11, 18, tzinfo=UTC)
SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"


# -- helpers -----------------------------------------------------------------------------------
def _spec(landing: str, table: str, run: str, try_number: int = 1, engine: str = ENGINE, **kw: Any) -> Any:
    """The spec of run ``run``'s batch (the landing files not yet planned, frozen)."""
    source = cdc_source(landing)
    plan = plan_for(source, table, run, pipeline=PIPE)
    return spec_for(source, table, plan, try_number, engine=engine, **{**MERGE_SETTINGS, **kw})


def _load(spark: Any, landing: str, table: str, run: str, **kw: Any) -> Any:
    return run_load(spark, _spec(landing, table, run, **kw))


def _commits(table: str) -> list[list[dict[str, Any]]]:
    out = []
    for path in sorted(glob.glob(os.path.join(table, "_delta_log", "*.json"))):
        with open(path) as fh:
            out.append([json.loads(line) for line in fh if line.strip()])
    return out


def _kinds(commit: list[dict[str, Any]]) -> list[str]:
    return [next(iter(a)) for a in commit]


def _info(commit: list[dict[str, Any]]) -> dict[str, Any]:
    return next(a["commitInfo"] for a in commit if "commitInfo" in a)


def _commits_of(table: str, app_id: str) -> list[int]:
    """The versions whose commit carries ``app_id``'s marker."""
    return [
        v
        for v, commit in enumerate(_commits(table))
        if any(a.get("txn", {}).get("appId") == app_id for a in commit)
    ]


def _ok(table: str, changes: list[Change], *, tombstones: bool = True) -> None:
    got = check_merge(table, changes, tombstones=tombstones)
    assert got.ok and got.expected, got


def _child_env() -> dict[str, str]:
    """A child driver with the Delta Spark jars, rebuilding snapshots in as few tasks as the
    tests' session does (tests/support/spark_conf.py says why)."""
    jars = os.environ[DELTA_SPARK_JARS_ENV]
    return {"PYSPARK_SUBMIT_ARGS": f"--jars {jars} --conf {SNAPSHOT_PARTITIONS}=2 pyspark-shell"}


FIRST: list[Change] = [(i, f"n{i}", i * 10, 1, "I") for i in range(1, 21)]
# The pilot's case: 5 updates, a delete, 2 new keys, a stale update (an older seq).
SECOND: list[Change] = [
    *[(i, f"u{i}", i * 100, 2, "U") for i in range(1, 6)],
    (7, "n7", 70, 3, "D"),
    (21, "n21", 210, 2, "I"),
    (22, "n22", 220, 2, "I"),
    (9, "stale", 0, 0, "U"),
]


# -- the rows ------------------------------------------------------------------------------------
def test_updates_deletes_inserts_and_stale_rows_in_one_merge_commit(
    spark: Any, tmp_path: Any, table: str
) -> None:
    landing = str(tmp_path / "landing")
    write_changes(landing, "c-0001.csv", FIRST)
    r1 = _load(spark, landing, table, "run-1")
    assert (r1.outcome, r1.rows) == ("committed", 20)
    _ok(table, FIRST)
    write_changes(landing, "c-0002.csv", SECOND)
    spec = _spec(landing, table, "run-2")
    r2 = run_load(spark, spec)
    assert (r2.outcome, r2.rows) == ("committed", len(SECOND))
    _ok(table, FIRST + SECOND)
    # Delta's MERGE made the commit: the files it rewrote, its adds, exactly one marker (the
    # batch's, at generation 0) and the manifest, all in it.
    commit = _commits(table)[r2.table_version]
    info = _info(commit)
    assert info["operation"] == "MERGE" and "remove" in _kinds(commit) and "add" in _kinds(commit)
    assert [(a["txn"]["appId"], a["txn"]["version"]) for a in commit if "txn" in a] == [
        (spec.plan.key.app_id, 0)
    ]
    manifest = Manifest.from_user_metadata(info["userMetadata"])
    assert manifest is not None
    assert (manifest.batch_key, manifest.engine, manifest.rows) == (spec.plan.batch_key, ENGINE, len(SECOND))
    assert manifest.attempt_id == spec.attempt_id
    assert manifest.extra["merge"]["keys"] == ["id"] and manifest.extra["merge"]["order_by"] == "seq"
    # A retry of the merged batch writes nothing.
    version = DeltaTable(table).version()
    again = _load(spark, landing, table, "run-2", try_number=2)
    assert (again.outcome, again.table_version) == ("already_committed", r2.table_version)
    assert DeltaTable(table).version() == version
    _ok(table, FIRST + SECOND)


def test_without_tombstones_a_winning_delete_removes_the_row_and_is_never_inserted(
    spark: Any, tmp_path: Any, table: str
) -> None:
    landing = str(tmp_path / "landing")
    write_changes(landing, "c-0001.csv", FIRST)
    _load(spark, landing, table, "run-1", keep_tombstones=False)
    # Deletes of a key the table holds, of a key it never held, and one older than the row.
    second = [(3, "n3", 30, 2, "D"), (50, "gone", 0, 2, "D"), (4, "n4", 40, 0, "D"), (5, "u5", 5, 2, "U")]
    write_changes(landing, "c-0002.csv", second)
    r2 = _load(spark, landing, table, "run-2", keep_tombstones=False)
    assert r2.outcome == "committed"
    _ok(table, FIRST + second, tombstones=False)
    ids = {r["id"] for r in table_rows(table)}
    assert 3 not in ids and 50 not in ids and 4 in ids


def test_a_batch_of_only_stale_rows_commits_its_marker_and_changes_no_row(
    spark: Any, tmp_path: Any, table: str
) -> None:
    landing = str(tmp_path / "landing")
    write_changes(landing, "c-0001.csv", [(i, f"n{i}", i, 5, "I") for i in range(1, 11)])
    _load(spark, landing, table, "run-1")
    before = sorted(table_rows(table), key=lambda r: r["id"])
    stale = [(i, "old", 0, 1, "U") for i in range(1, 6)]
    write_changes(landing, "c-0002.csv", stale)
    spec = _spec(landing, table, "run-2")
    r2 = run_load(spark, spec)
    assert r2.outcome == "committed"
    commit = _commits(table)[r2.table_version]
    assert "txn" in _kinds(commit) and "add" not in _kinds(commit) and "remove" not in _kinds(commit)
    assert sorted(table_rows(table), key=lambda r: r["id"]) == before
    assert ask(TableRef.parse(table), spec.plan.key).committed


# Several rows of one key (the table was appended to before): the batch row wins only when it
# is newer than the newest of them, and then replaces them all, as with the delta-rs engine.
APPENDED: list[Change] = [
    (1, "a", 10, 1, "I"),
    (1, "b", 11, 3, "U"),
    (2, "c", 20, 1, "I"),
    (2, "d", 21, 1, "U"),
    (3, "e", 30, 1, "I"),
    (3, "f", 31, 2, "U"),
    (4, "g", 40, 2, "I"),
    (4, "h", 41, 5, "U"),
    (8, "k", 80, 1, "I"),
]
OVER_APPENDED: list[Change] = [
    (1, "x", 1, 2, "U"),  # newer than one row of key 1, older than the other: loses
    (2, "y", 2, 2, "U"),  # newer than both rows of key 2: replaces them with one
    (3, "z", 3, 4, "D"),  # a delete newer than both rows of key 3
    (4, "w", 4, 5, "U"),  # ties the newest row of key 4: loses (not a restatement)
    (5, "n", 5, 1, "I"),  # a new key
    (6, "dd", 6, 1, "D"),  # a delete of a key the table never held
]


def _appended_table(path: str) -> None:
    data = pa.Table.from_pylist(
        [dict(zip(CDC_COLUMNS, c, strict=True)) for c in APPENDED],
        schema=pa.schema(
            [
                ("id", pa.int64()),
                ("name", pa.string()),
                ("amount", pa.int64()),
                ("seq", pa.int64()),
                ("op", pa.string()),
            ]
        ),
    )
    write_deltalake(path, data.slice(0, 5))
    write_deltalake(path, data.slice(5), mode="append")


@pytest.mark.parametrize("tombstones", [True, False])
def test_keys_the_table_holds_several_rows_of_end_as_documented_for_each_engine(
    spark: Any, tmp_path: Any, tombstones: bool
) -> None:
    landing = str(tmp_path / "landing")
    write_changes(landing, "c-0001.csv", OVER_APPENDED)
    results: dict[str, list[tuple[Any, ...]]] = {}
    for engine in ("delta-rs", ENGINE):
        table = str(tmp_path / engine)
        _appended_table(table)
        got = _load(spark, landing, table, "run-1", engine=engine, keep_tombstones=tombstones)
        assert got.outcome == "committed", engine
        results[engine] = sorted(tuple(r[c] for c in CDC_COLUMNS) for r in table_rows(table))
    # The engines agree wherever the batch row wins. Where it loses, or ties, on a key the
    # table holds several rows of, they differ as docs/merge-loads.md says: the delta-rs
    # engine leaves the key's newest row only (a tie by content hash), Delta's MERGE leaves
    # the key's rows as they are.
    rs = results["delta-rs"]
    assert [r for r in rs if r[0] == 1] == [(1, "b", 11, 3, "U")]
    assert [r[3] for r in rs if r[0] == 4] == [5]
    assert [r for r in rs if r[0] not in (1, 4)] == [r for r in results[ENGINE] if r[0] not in (1, 4)]
    want = sorted(
        [(1, "a", 10, 1, "I"), (1, "b", 11, 3, "U"), (2, "y", 2, 2, "U")]
        + ([(3, "z", 3, 4, "D")] if tombstones else [])
        + [(4, "g", 40, 2, "I"), (4, "h", 41, 5, "U"), (5, "n", 5, 1, "I")]
        + ([(6, "dd", 6, 1, "D")] if tombstones else [])
        + [(8, "k", 80, 1, "I")]
    )
    assert results[ENGINE] == want


# -- crashes and races ---------------------------------------------------------------------------
@pytest.mark.faults
# CI runs before_record (the crash between the commit and its record, the one the table
# decides); the other two are `extended` (make test-extended).
@pytest.mark.parametrize(
    "point",
    [
        pytest.param("before_commit", marks=pytest.mark.extended),
        "before_record",
        pytest.param("after_commit", marks=pytest.mark.extended),
    ],
)
def test_a_crash_at_a_boundary_of_the_merge_then_a_retry_merges_once(
    spark: Any, tmp_path: Any, table: str, point: str
) -> None:
    landing = str(tmp_path / "landing")
    write_changes(landing, "c-0001.csv", FIRST)
    _load(spark, landing, table, "run-1")
    write_changes(landing, "c-0002.csv", SECOND)
    spec = _spec(landing, table, "run-2")
    child = run_child(spec, str(tmp_path), f"{point}=kill@1", env=_child_env())
    out = child.communicate(timeout=400)[0].decode()
    assert child.returncode == -signal.SIGKILL, out[-3000:]
    committed = point != "before_commit"
    assert ask(TableRef.parse(table), spec.plan.key).committed == committed
    version = DeltaTable(table).version()
    retry = _load(spark, landing, table, "run-2", try_number=2)
    assert retry.outcome == ("already_committed" if committed else "committed")
    if committed:
        assert DeltaTable(table).version() == version, "the retry wrote nothing"
    assert len(_commits_of(table, spec.plan.key.app_id)) == 1
    _ok(table, FIRST + SECOND)


@pytest.mark.faults
# Two driver JVMs with Delta Spark (about 80 s): CI keeps the racer committing inside the
# merge transaction (test_a_racer_committing_the_batch_inside_the_merge_transaction_wins_alone).
@pytest.mark.extended
def test_two_drivers_merging_the_same_batch_commit_once(spark: Any, tmp_path: Any, table: str) -> None:
    landing = str(tmp_path / "landing")
    write_changes(landing, "c-0001.csv", FIRST)
    _load(spark, landing, table, "run-1")
    write_changes(landing, "c-0002.csv", SECOND)
    # Both wait between their ask and their MERGE until the other is there too.
    kids = [
        run_child(
            _spec(landing, table, "run-2", n),
            str(tmp_path),
            f"before_commit=meet:{tmp_path}/meet:2",
            name,
            _child_env(),
        )
        for n, name in ((1, "a"), (2, "b"))
    ]
    outs = [k.communicate(timeout=500)[0].decode() for k in kids]
    assert [k.returncode for k in kids] == [0, 0], "\n".join(o[-2000:] for o in outs)
    results = [json.loads((tmp_path / f"{n}-result.json").read_text()) for n in "ab"]
    assert sorted(r["outcome"] for r in results) == ["already_committed", "committed"]
    assert len({r["table_version"] for r in results}) == 1
    spec = _spec(landing, table, "run-2")
    assert len(_commits_of(table, spec.plan.key.app_id)) == 1
    _ok(table, FIRST + SECOND)


@pytest.fixture
def gate(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Hold the MERGE inside its Delta transaction (after its snapshot, before its commit):
    the MERGE's source passes a Python gate that waits until ``<gate>/open`` exists.
    Files, because Spark's Python workers are other processes; one partition, so that one
    task is held and the other writer has a free core."""
    folder = tmp_path / "gate"
    folder.mkdir()
    real = delta_spark_merge.merge_source

    def wait(batches: Iterator[Any]) -> Iterator[Any]:
        open(os.path.join(folder, f"pass-{uuid.uuid4().hex}"), "w").close()
        deadline = time.monotonic() + 180
        while not os.path.exists(os.path.join(folder, "open")) and time.monotonic() < deadline:
            time.sleep(0.1)
        yield from batches

    def gated(*args: Any, **kwargs: Any) -> Any:
        source = real(*args, **kwargs).coalesce(1)
        return source.mapInArrow(wait, source.schema)

    monkeypatch.setattr(delta_spark_merge, "merge_source", gated)
    yield folder
    (folder / "open").touch()


def _held(folder: Any, target: Any) -> tuple[threading.Thread, list[Any]]:
    """Run ``target`` in a thread until its MERGE is held by the gate."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(target())
        except BaseException as exc:  # reported by the caller's assertion
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 240
    while not any(n.startswith("pass-") for n in os.listdir(folder)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert any(n.startswith("pass-") for n in os.listdir(folder)), f"the MERGE never started: {out}"
    return thread, out


@pytest.mark.faults
def test_a_racer_committing_the_batch_inside_the_merge_transaction_wins_alone(
    spark: Any, tmp_path: Any, table: str, gate: Any
) -> None:
    """Both attempts asked "no"; the delta-rs attempt commits while the MERGE's transaction
    is open. Delta's check of the appId the MERGE read refuses its commit
    (ConcurrentTransactionException): one commit, and the MERGE reports already_committed."""
    landing = str(tmp_path / "landing")
    write_changes(landing, "c-0001.csv", FIRST)
    _load(spark, landing, table, "run-1")
    write_changes(landing, "c-0002.csv", SECOND)
    spec = _spec(landing, table, "run-2")
    thread, held = _held(gate, lambda: run_load(spark, spec))
    racer = _load(spark, landing, table, "run-2", try_number=2, engine="delta-rs")
    (gate / "open").touch()
    thread.join(timeout=300)
    assert racer.outcome == "committed"
    assert held and getattr(held[0], "outcome", held) == "already_committed", held
    assert held[0].table_version == racer.table_version
    assert _commits_of(table, spec.plan.key.app_id) == [racer.table_version]
    _ok(table, FIRST + SECOND)


@pytest.mark.faults
def test_another_batch_committed_inside_the_merge_transaction_makes_it_merge_again(
    spark: Any, tmp_path: Any, table: str, gate: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Another batch of the pipeline, newer for the same keys, commits (delta-rs engine) while
    the MERGE is held: Delta refuses the MERGE's commit (the files it read changed), the merge
    runs again on the new snapshot, and the older rows never overwrite the newer ones."""
    first, second = str(tmp_path / "a"), str(tmp_path / "b")
    write_changes(first, "c-0001.csv", FIRST)
    source = cdc_source(first, boundary="interval")
    base = interval_plan(source, table, DAY, DAY + timedelta(days=1), pipeline=PIPE)
    run_load(spark, spec_for(source, table, base, engine=ENGINE, **MERGE_SETTINGS))
    older = [(i, f"old{i}", i, 2, "U") for i in range(1, 11)]
    newer = [(i, f"new{i}", i, 3, "U") for i in range(5, 16)]
    write_changes(str(tmp_path / "older"), "c.csv", older)
    write_changes(second, "c.csv", newer)

    def interval(folder: str, day: int, engine: str) -> Any:
        src = cdc_source(folder, boundary="interval")
        start = DAY + timedelta(days=day)
        plan = interval_plan(src, table, start, start + timedelta(days=1), pipeline=PIPE)
        return run_load(spark, spec_for(src, table, plan, engine=engine, **MERGE_SETTINGS))

    caplog.set_level(logging.INFO, logger=delta_spark_merge.__name__)
    thread, held = _held(gate, lambda: interval(str(tmp_path / "older"), 1, ENGINE))
    other = interval(second, 2, "delta-rs")
    (gate / "open").touch()
    thread.join(timeout=300)
    assert other.outcome == "committed"
    assert held and getattr(held[0], "outcome", held) == "committed", held
    assert held[0].table_version > other.table_version
    assert "running the MERGE again" in caplog.text
    _ok(table, FIRST + older + newer)


# -- order -----------------------------------------------------------------------------------------
BATCHES: list[list[Change]] = [
    [(i, f"n{i}", i, 1, "I") for i in range(1, 31)],
    [(i, f"u{i}", i * 2, 2, "U") for i in range(1, 11)]
    + [(i, f"n{i}", i, 2, "D") for i in range(11, 14)]
    + [(i, f"n{i}", i, 2, "I") for i in range(31, 36)],
    [(i, f"v{i}", i * 3, 3, "U") for i in range(5, 16)] + [(1, "u1", 2, 3, "D"), (31, "v31", 3, 3, "U")],
]


def test_batches_applied_newest_first_end_in_the_table_oldest_first_makes(spark: Any, tmp_path: Any) -> None:
    folders = []
    for i, changes in enumerate(BATCHES):
        folders.append(str(tmp_path / f"landing/{i}"))
        write_changes(folders[-1], "c.csv", changes)

    def load(table: str, i: int) -> str:
        source = cdc_source(folders[i], boundary="interval")
        start = DAY + timedelta(days=i)
        plan = interval_plan(source, table, start, start + timedelta(days=1), pipeline=PIPE)
        return str(run_load(spark, spec_for(source, table, plan, engine=ENGINE, **MERGE_SETTINGS)).outcome)

    forward, backward = str(tmp_path / "forward"), str(tmp_path / "backward")
    assert [load(forward, i) for i in (0, 1, 2)] == ["committed"] * 3
    # Backwards, then each batch again: a replay changes nothing.
    assert [load(backward, i) for i in (2, 1, 0, 1, 2)] == ["committed"] * 3 + ["already_committed"] * 2
    every = [c for b in BATCHES for c in b]
    _ok(forward, every)
    _ok(backward, every)
    assert sorted(map(str, table_rows(forward))) == sorted(map(str, table_rows(backward)))


def test_delta_rs_and_delta_spark_merging_one_pipeline_in_turn(spark: Any, tmp_path: Any, table: str) -> None:
    landing = str(tmp_path / "landing")
    engines = ["delta-rs", ENGINE, "delta-rs", ENGINE]
    changes: list[Change] = []
    for n, (engine, batch) in enumerate(zip(engines, [*BATCHES, SECOND], strict=True), start=1):
        write_changes(landing, f"c-{n:04d}.csv", batch)
        got = _load(spark, landing, table, f"run-{n}", engine=engine)
        assert got.outcome == "committed", (engine, got)
        assert (
            Manifest.from_user_metadata(_info(_commits(table)[got.table_version])["userMetadata"]).engine
            == engine
        )
        changes += batch
        _ok(table, changes)
    # Either engine finds any batch committed, whichever engine merged it.
    for n, engine in ((2, "delta-rs"), (3, ENGINE)):
        assert (
            _load(spark, landing, table, f"run-{n}", try_number=2, engine=engine).outcome
            == "already_committed"
        )
    _ok(table, changes)


# -- the session ----------------------------------------------------------------------------------
def test_the_session_settings_are_put_back_after_a_merge_and_after_a_failed_one(
    spark: Any, tmp_path: Any, table: str
) -> None:
    landing = str(tmp_path / "landing")
    write_changes(landing, "c-0001.csv", FIRST)
    _load(spark, landing, table, "run-1")
    write_changes(landing, "c-0002.csv", SECOND)
    _load(spark, landing, table, "run-2")
    assert {k: spark.conf.get(k, None) for k in SESSION_SETTINGS} == dict.fromkeys(SESSION_SETTINGS)
    # A plain append after the merge, in the same session, carries no marker and no manifest.
    other = str(tmp_path / "other")
    spark.range(3).write.format("delta").mode("append").save(other)
    assert "txn" not in _kinds(_commits(other)[-1]) and "userMetadata" not in _info(_commits(other)[-1])
    # A MERGE that Delta refuses (a CHECK constraint the batch breaks) commits nothing and
    # puts the settings back too; a user's own value comes back as it was.
    spark.sql(f"ALTER TABLE delta.`{table}` ADD CONSTRAINT positive CHECK (amount >= 0)")
    spark.conf.set(delta_spark_merge.USER_METADATA, "the user's own")
    try:
        write_changes(landing, "c-0003.csv", [(2, "neg", -1, 9, "U")])
        version = DeltaTable(table).version()
        with pytest.raises(BatchRefusedError, match=r"committed nothing: .*DELTA_VIOLATE_CONSTRAINT") as err:
            _load(spark, landing, table, "run-3")
        assert "positive" in str(err.value) and not err.value.retryable
        assert DeltaTable(table).version() == version
        assert spark.conf.get(delta_spark_merge.USER_METADATA, None) == "the user's own"
        rest = [k for k in SESSION_SETTINGS if k != delta_spark_merge.USER_METADATA]
        assert {k: spark.conf.get(k, None) for k in rest} == dict.fromkeys(rest)
    finally:
        spark.conf.unset(delta_spark_merge.USER_METADATA)
    _ok(table, FIRST + SECOND)


# -- tables -----------------------------------------------------------------------------------------
def _spark_rows(spark: Any, table: str) -> list[tuple[Any, ...]]:
    """The table's rows as Delta Spark reads them (deltalake cannot read deletion vectors)."""
    spark.catalog.clearCache()
    return sorted(tuple(r) for r in spark.read.format("delta").load(table).select(*CDC_COLUMNS).collect())


def test_a_table_with_deletion_vectors_is_merged_with_them(spark: Any, tmp_path: Any, table: str) -> None:
    landing = str(tmp_path / "landing")
    dvs = {"delta.enableDeletionVectors": "true"}
    write_changes(landing, "c-0001.csv", FIRST)
    _load(spark, landing, table, "run-1", table_configuration=dvs)
    write_changes(landing, "c-0002.csv", SECOND)
    r2 = _load(spark, landing, table, "run-2")
    assert r2.outcome == "committed"
    # Delta's MERGE marked the changed rows in a deletion vector instead of rewriting the file.
    commit = _commits(table)[r2.table_version]
    assert any("deletionVector" in a.get("add", {}) for a in commit), commit
    want = sorted(expected_rows(FIRST + SECOND).values())
    assert _spark_rows(spark, table) == want
    # The delta-rs engine refuses to rewrite those files, naming the feature; delta-spark goes on.
    third = [(2, "v2", 2, 5, "U")]
    write_changes(landing, "c-0003.csv", third)
    with pytest.raises(BatchRefusedError, match="deletionVectors"):
        _load(spark, landing, table, "run-3", engine="delta-rs")
    assert _load(spark, landing, table, "run-3", try_number=2).outcome == "committed"
    assert _spark_rows(spark, table) == sorted(expected_rows(FIRST + SECOND + third).values())


def test_an_append_only_table_is_refused_before_the_merge(spark: Any, tmp_path: Any, table: str) -> None:
    landing = str(tmp_path / "landing")
    write_changes(landing, "c-0001.csv", FIRST)
    _load(spark, landing, table, "run-1", table_configuration={"delta.appendOnly": "true"})
    write_changes(landing, "c-0002.csv", SECOND)
    version = DeltaTable(table).version()
    with pytest.raises(BatchRefusedError, match="append-only") as err:
        _load(spark, landing, table, "run-2")
    assert not err.value.retryable and DeltaTable(table).version() == version


@pytest.mark.faults
def test_a_deletion_vector_added_while_the_delta_rs_engine_merges_refuses_its_commit(
    spark: Any, tmp_path: Any, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Delta Spark's DELETE marks a row of a file the delta-rs engine's merge has read, between
    its read and its commit: the file keeps its path, size and time, only a deletion vector
    tells it changed. The commit must see that (it would bring the deleted row back), and
    the merge computed again refuses the file, naming the feature; delta-spark loads it."""
    from airflow_eod.spark import merge_job

    landing = str(tmp_path / "landing")
    write_changes(landing, "c-0001.csv", FIRST)
    _load(spark, landing, table, "run-1", table_configuration={"delta.enableDeletionVectors": "true"})
    staged, release = threading.Event(), threading.Event()
    real = merge_job.stage_dataframe

    def stage_then_wait(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        if not staged.is_set():
            staged.set()
            release.wait(timeout=300)
        return out

    monkeypatch.setattr(merge_job, "stage_dataframe", stage_then_wait)
    second = [(i, f"u{i}", i, 5, "U") for i in range(1, 21)]
    write_changes(landing, "c-0002.csv", second)
    out: list[Any] = []

    def merge() -> None:
        try:
            out.append(_load(spark, landing, table, "run-2", engine="delta-rs"))
        except BaseException as exc:  # asserted below
            out.append(exc)

    thread = threading.Thread(target=merge)
    thread.start()
    assert staged.wait(timeout=300), out
    spark.sql(f"DELETE FROM delta.`{table}` WHERE id = 3")
    assert any("deletionVector" in a.get("add", {}) for a in _commits(table)[-1])
    release.set()
    thread.join(timeout=300)
    assert out and isinstance(out[0], BatchRefusedError), out
    assert "deletionVectors" in str(out[0])
    deleted = [c for c in FIRST if c[0] != 3]
    assert _spark_rows(spark, table) == sorted(deleted)
    monkeypatch.undo()
    assert _load(spark, landing, table, "run-2", try_number=2).outcome == "committed"
    assert _spark_rows(spark, table) == sorted(expected_rows(deleted + second).values())


def _with_channel(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.withColumn("channel", F.concat(F.lit("web-"), F.col("op")))


def test_new_columns_are_refused_or_added_by_the_merge_commit(spark: Any, tmp_path: Any, table: str) -> None:
    landing = str(tmp_path / "landing")
    write_changes(landing, "c-0001.csv", FIRST)
    _load(spark, landing, table, "run-1")
    write_changes(landing, "c-0002.csv", SECOND)
    version = DeltaTable(table).version()
    with pytest.raises(SchemaMismatchError, match="schema_drift='add_columns'"):
        run_load(spark, _spec(landing, table, "run-2"), transform=_with_channel)
    assert DeltaTable(table).version() == version
    got = run_load(spark, _spec(landing, table, "run-2", schema_drift="add_columns"), transform=_with_channel)
    assert got.outcome == "committed" and got.table_version == version + 1
    _ok(table, FIRST + SECOND)
    channel = {r["id"]: r["channel"] for r in table_rows(table)}
    merged = expected_rows(FIRST + SECOND)
    assert channel == {k: (f"web-{c[4]}" if c in SECOND else None) for k, c in merged.items()}


def test_a_generated_column_is_computed_for_updated_and_inserted_rows(
    spark: Any, tmp_path: Any, table: str
) -> None:
    """A table only Delta Spark writes (a generated column): the MERGE fills it."""
    spark.sql(
        f"CREATE TABLE delta.`{table}` (id BIGINT, name STRING, amount BIGINT, seq BIGINT, op STRING, "
        "doubled BIGINT GENERATED ALWAYS AS (amount * 2)) USING delta"
    )
    landing = str(tmp_path / "landing")
    for n, changes in enumerate((FIRST, SECOND), start=1):
        write_changes(landing, f"c-{n:04d}.csv", changes)
        assert _load(spark, landing, table, f"run-{n}").outcome == "committed"
    _ok(table, FIRST + SECOND)
    rows = table_rows(table)
    assert rows and all(r["doubled"] == r["amount"] * 2 for r in rows)
