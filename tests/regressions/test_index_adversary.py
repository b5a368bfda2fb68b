"""Adversarial reproductions against the checkpoint index (0e0cebe) and the cleanup-hole
fixes (95e3aca): the index of a checkpoint's markers beside the table, the commit below the
checkpoint that the table's marker "vouches" for, and the ask that reads both.

A test whose docstring says "found" failed on the code it was written against and pins the
fix; the others (named "held") were defended from the start. No Spark: files are
staged with pyarrow, as tests/core/test_flat_cost.py does.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, Schema

from airflow_eod.core import load_commit as commit_mod
from airflow_eod.core.ask import ask
from airflow_eod.core.cleanup import remove_uncommitted_attempts
from airflow_eod.core.delta import log as delta_log
from airflow_eod.core.delta.parquet_stats import file_stats
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.planlog.store import Plan
from airflow_eod.core.staged_files import StagedBatch, StagedFile
from airflow_eod.core.table_ref import TableRef
from tests.support.helpers import land_and_plan, stage_rows

pytestmark = pytest.mark.guarantee


def _tagged_rows(table: str) -> list[tuple[str, int]]:
    t = DeltaTable(table).to_pyarrow_table()
    return sorted(zip(t.column("src").to_pylist(), t.column("seq").to_pylist(), strict=True))


# -- 1. find_commit: a commit below the checkpoint that the marker "vouches" for -------------


def test_a_stale_attempts_commit_in_a_cleanup_hole_is_not_taken_for_the_batchs_commit(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found (wrong ask answer, then lost rows and a wedged table, on the first cut).

    Two attempts of batch K: A2 reads the log at version 0 and stalls before its put. A1
    commits K at version 1 and dies before its commit record. Pipeline B commits version 2,
    which is due a checkpoint; its cleanup (log retention 0 s, standing in for a slow table)
    removes commits 0 and 1. A2's put-if-absent of 1.json now succeeds: a commit in the hole
    that no reader sees. ``checkpoint_holds`` catches that and A2 goes back to the ask, which
    finds K's marker in checkpoint 2 without a record and repairs it: ``find_commit`` walks
    2, 1 and takes A2's hole commit at 1 because the marker "vouches" for generation 0. The
    record (and the ask's answer) now names A2's attempt and files; A1's rows are the ones
    the table holds.

    Root cause: ``find_commit`` assumes the newest commit carrying the marker is the real
    one, but the real one (A1's, at the same version) was removed by the cleanup and A2's
    took its file name. ``remove_uncommitted_attempts`` then keeps A2's directory and deletes
    A1's, whose file is live in the table: the rows are lost and every read of the table
    fails on a missing file.

    Now a commit below the checkpoint counts only with a trace in the table (its first file
    in the checkpoint, live or a tombstone, or removed by a later commit). A1's commit is gone
    from the log, so nothing can name its files: the ask answers "committed" (the marker)
    without a record, and the cleanup, which cannot tell the committed attempt, keeps all.
    """
    cfg = {"delta.checkpointInterval": "2", "delta.logRetentionDuration": "interval 0 seconds"}
    table = str(tmp_path / "table")
    a_land, b_land = str(tmp_path / "land-a"), str(tmp_path / "land-b")
    b0 = land_and_plan(table, b_land, "tests.idx.b", 0)
    commit_batch(
        TableRef.parse(table), b0.key, 0, *stage_rows(table, b0, 0, "b", [0]), table_configuration=cfg
    )
    k = land_and_plan(table, a_land, "tests.idx.a", 0)
    a1 = stage_rows(table, k, 0, "a1", [0])
    a2 = stage_rows(table, k, 0, "a2", [0])

    real_write, real_record = commit_mod.write_commit, commit_mod._record_commit
    fired: list[int] = []

    def died(*args: Any, **kw: Any) -> None:
        raise RuntimeError("A1 was killed between its commit and its record")

    def stalled(table_log: Any, *args: Any, **kw: Any) -> Any:
        if not fired:
            fired.append(table_log.version())
            # Meanwhile: A1 commits K at version 1 and dies; B commits 2, checkpoints, cleans up.
            monkeypatch.setattr(commit_mod, "write_commit", real_write)
            monkeypatch.setattr(commit_mod, "_record_commit", died)
            with pytest.raises(RuntimeError):
                commit_batch(TableRef.parse(table), k.key, 0, *a1, table_configuration=cfg)
            monkeypatch.setattr(commit_mod, "_record_commit", real_record)
            b1 = land_and_plan(table, b_land, "tests.idx.b", 1)
            commit_batch(
                TableRef.parse(table), b1.key, 0, *stage_rows(table, b1, 0, "b", [1]), table_configuration=cfg
            )
            assert not os.path.exists(delta_log.commit_path(TableRef.parse(table), 1)), (
                "the cleanup left version 1"
            )
        return real_write(table_log, *args, **kw)

    monkeypatch.setattr(commit_mod, "write_commit", stalled)
    delta_log.clear_cache()
    ours, status = commit_batch(TableRef.parse(table), k.key, 0, *a2, table_configuration=cfg)
    assert fired == [0]
    delta_log.clear_cache()
    assert _tagged_rows(table) == [("a1", 0), ("b", 0), ("b", 1)]  # A1's rows, once
    answered = status.manifest.attempt_id if status.manifest else None
    # What the load job does next with the answer (load_job.run_load, step 6's cleanup).
    remove_uncommitted_attempts(TableRef.parse(table), status)
    try:
        after: Any = _tagged_rows(table)
    except Exception as exc:  # a live file is gone: every read of the table fails
        after = f"unreadable: {type(exc).__name__}: {str(exc)[:160]}"
    assert not ours and status.committed
    assert answered in (None, a1[1].attempt_id) and after == [("a1", 0), ("b", 0), ("b", 1)], (
        f"the ask answered that attempt {answered} (A2, whose commit no reader sees) landed K at "
        f"version {status.table_version}; A1 ({a1[1].attempt_id}) did. The cleanup that trusted "
        f"the answer removed A1's live file; the table now reads: {after}"
    )


# -- 2. the index against the checkpoint it was made from (defended: these pass) -------------

_CFG = {"delta.checkpointInterval": "3"}


def _load(table: str, landing: str, pipeline: str, n: int, **kw: Any) -> Plan:
    plan = land_and_plan(table, landing, pipeline, n)
    commit_batch(
        TableRef.parse(table),
        plan.key,
        0,
        *stage_rows(table, plan, 0, pipeline, [n]),
        table_configuration=_CFG,
        **kw,
    )
    return plan


def _decoded(table: str) -> delta_log.TableLog:
    """A reading with the index out of the way: what the checkpoint itself says."""
    real = delta_log.read_index
    delta_log.clear_cache()
    try:
        delta_log.read_index = lambda *a, **k: None  # type: ignore[assignment]
        reading = delta_log.read_log(TableRef.parse(table))
    finally:
        delta_log.read_index = real  # type: ignore[assignment]
        delta_log.clear_cache()
    assert reading is not None and reading.stats.index_files_read == 0
    return reading


def _indexed(table: str) -> delta_log.TableLog:
    delta_log.clear_cache()
    reading = delta_log.read_log(TableRef.parse(table))
    assert reading is not None
    return reading


def _same(a: delta_log.TableLog, b: delta_log.TableLog, app_ids: list[str]) -> None:
    assert (a.version(), a.checkpoint_version) == (b.version(), b.checkpoint_version)
    assert a.metadata() == b.metadata()
    assert a.protocol() == b.protocol()
    for app_id in app_ids:
        assert a.transaction_version(app_id) == b.transaction_version(app_id), app_id


def test_held_the_index_carries_widened_schema_new_configuration_and_a_restated_marker(tmp_path: Any) -> None:
    """PASSES (defended). Another writer changes the table's configuration, a batch widens
    the schema (add_columns), a batch is restated to generation 1, then the committer
    checkpoints: the reading through the index gives the same metadata, configuration,
    protocol and markers as a reading of the checkpoint and as deltalake."""
    table, land = str(tmp_path / "table"), str(tmp_path / "land")
    plans = [_load(table, land, "tests.idx.m", n) for n in range(2)]
    DeltaTable(table).alter.set_table_properties({"delta.logRetentionDuration": "interval 2 days"})
    # A batch with one more column, added in its own commit.
    p2 = land_and_plan(table, land, "tests.idx.m", 2)
    staged, manifest = stage_rows(table, p2, 0, "m", [2])
    wide = pa.table({"seq": [2], "src": ["m"], "extra": ["x"]})
    path = os.path.join(table, staged.files[0].path)
    pq.write_table(wide, path)
    rows, stats = file_stats(path)
    st = os.stat(path)
    staged = StagedBatch(
        Schema.from_arrow(wide.schema).to_json(),
        [],
        staged.attempt_dir,
        [StagedFile(staged.files[0].path, st.st_size, int(st.st_mtime * 1000), {}, rows, stats)],
    )
    commit_batch(
        TableRef.parse(table),
        p2.key,
        0,
        staged,
        manifest,
        table_configuration=_CFG,
        schema_policy="add_columns",
    )
    plans.append(p2)
    # Restate batch 0 to generation 1 (same columns as the table now has).
    g1 = stage_rows(table, plans[0], 1, "m", [100])
    data = pa.table({"seq": [100], "src": ["m"], "extra": [None]}, schema=wide.schema)
    path = os.path.join(table, g1[0].files[0].path)
    pq.write_table(data, path)
    rows, stats = file_stats(path)
    st = os.stat(path)
    g1 = (
        StagedBatch(
            Schema.from_arrow(wide.schema).to_json(),
            [],
            g1[0].attempt_dir,
            [StagedFile(g1[0].files[0].path, st.st_size, int(st.st_mtime * 1000), {}, rows, stats)],
        ),
        g1[1],
    )
    commit_batch(TableRef.parse(table), plans[0].key, 1, *g1, table_configuration=_CFG, replace_previous=True)
    # The committer's checkpoint (as commit_batch calls it when one is due).
    from airflow_eod.core.delta.commit_writer import write_checkpoint

    version = DeltaTable(table).version()
    write_checkpoint(TableRef.parse(table), version, DeltaTable(table).metadata().configuration)
    assert os.path.exists(delta_log.checkpoint_path(TableRef.parse(table), version))
    ids = [p.key.app_id for p in plans] + ["eod:nobody:nothing"]
    indexed, decoded = _indexed(table), _decoded(table)
    assert indexed.stats.index_files_read == 1 and indexed.version() == indexed.checkpoint_version
    _same(indexed, decoded, ids)
    full = DeltaTable(table)
    assert indexed.metadata().configuration == full.metadata().configuration
    assert indexed.metadata().configuration["delta.logRetentionDuration"] == "interval 2 days"
    assert [f["name"] for f in json.loads(indexed.schema_json())["fields"]] == [
        "seq",
        "src",
        "extra",
    ]
    assert indexed.transaction_version(plans[0].key.app_id) == 1
    assert ask(TableRef.parse(table), plans[0].key, 1).committed
    assert ("m", 100) in _tagged_rows(table) and ("tests.idx.m", 0) not in _tagged_rows(table)


def test_held_another_writers_checkpoint_at_an_indexed_version_is_read_from_the_checkpoint(
    tmp_path: Any,
) -> None:
    """PASSES (defended). After the committer indexed checkpoint V, another writer
    (deltalake, e.g. a maintenance job) writes checkpoint V again. The index is no longer
    believed (the file's identity changed); the reading decodes the new checkpoint and gives
    the same answers."""
    table, land = str(tmp_path / "table"), str(tmp_path / "land")
    plans = [_load(table, land, "tests.idx.c", n) for n in range(4)]  # checkpoint at 3
    assert _indexed(table).stats.index_files_read == 1
    # deltalake does not re-write an existing checkpoint; another engine does (a temporary
    # file renamed over it). It drops the marker of batch 0, as one whose
    # setTransactionRetentionDuration had passed would be dropped.
    checkpoint = delta_log.checkpoint_path(TableRef.parse(table), 3)
    body = pq.read_table(checkpoint)
    txn = body.column("txn").to_pylist()
    keep = [t is None or t["appId"] != plans[0].key.app_id for t in txn]
    pq.write_table(body.filter(pa.array(keep)), checkpoint + ".tmp")
    os.replace(checkpoint + ".tmp", checkpoint)
    again = _indexed(table)
    assert again.stats.index_files_read == 0 and again.stats.checkpoint_files_read == 1
    _same(again, _decoded(table), [p.key.app_id for p in plans])
    assert again.transaction_version(plans[0].key.app_id) is None
    assert all(ask(TableRef.parse(table), p.key).committed for p in plans)  # batch 0 through its record


def test_held_a_crash_between_the_buckets_and_index_json_is_read_around(tmp_path: Any) -> None:
    """PASSES (defended). The committer died after writing the buckets and before
    index.json (or a power cut truncated it): the reading decodes the checkpoint; a later
    write of the same index (a retry) links over the leftover buckets and is believed."""
    from airflow_eod.core.delta import checkpoint_index

    table, land = str(tmp_path / "table"), str(tmp_path / "land")
    plans = [_load(table, land, "tests.idx.x", n) for n in range(4)]
    root = os.path.join(table, "_eod", "checkpoints")
    (where,) = os.listdir(root)
    os.unlink(os.path.join(root, where, "index.json"))
    reading = _indexed(table)
    assert reading.stats.index_files_read == 0
    _same(reading, _decoded(table), [p.key.app_id for p in plans])
    with open(os.path.join(root, where, "index.json"), "w") as fh:
        fh.write('{"format": 1, "vers')  # truncated
    assert _indexed(table).stats.index_files_read == 0
    os.unlink(os.path.join(root, where, "index.json"))
    files = [delta_log.checkpoint_path(TableRef.parse(table), 3)]
    checkpoint_index.index_after_checkpoint(
        TableRef.parse(table), 3, files, delta_log.read_checkpoint_markers
    )
    reading = _indexed(table)
    assert reading.stats.index_files_read == 1
    _same(reading, _decoded(table), [p.key.app_id for p in plans])


def test_held_an_index_dropped_under_a_reader_falls_back_to_the_checkpoint(tmp_path: Any) -> None:
    """PASSES (defended). A reading holds checkpoint 3's index but has not read a bucket yet;
    other commits write three newer checkpoints, and ``_drop_old`` removes index 3. The
    reading's lookup finds its bucket gone and decodes checkpoint 3 (still in the log)."""
    table, land = str(tmp_path / "table"), str(tmp_path / "land")
    plans = [_load(table, land, "tests.idx.d", n) for n in range(4)]
    reading = _indexed(table)
    delta_log.clear_cache()  # the later commits must not share its (still unread) buckets
    assert reading.stats.index_files_read == 1 and reading.checkpoint_version == 3
    for n in range(4, 13):
        _load(table, land, "tests.idx.d2", n)
    names = sorted(os.listdir(os.path.join(table, "_eod", "checkpoints")))
    assert not any(n.startswith(f"{3:020d}.") for n in names), names
    assert all(reading.transaction_version(p.key.app_id) == 0 for p in plans)
    assert reading.stats.checkpoint_files_read == 1
