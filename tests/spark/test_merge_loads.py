"""Merge loads (write_mode='merge'): upserts by a business key, newest row wins, exactly once."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from airflow_eod.core.ask import ask
from airflow_eod.core.table_ref import TableRef
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import plan_for, spec_for
from tests.support.merge_helpers import MERGE_SETTINGS, cdc_source, check_merge, write_changes

pytestmark = pytest.mark.spark


def _load(spark: Any, landing: str, table: str, run: str, **kw: Any) -> Any:
    source = cdc_source(landing)
    plan = plan_for(source, table, run, pipeline="tests.merge")
    return run_load(spark, spec_for(source, table, plan, **{**MERGE_SETTINGS, **kw}))


def test_updates_and_deletes_replace_rows_instead_of_adding_them(
    spark: Any, tmp_path: Any, table: str
) -> None:
    landing = str(tmp_path / "landing")
    first = [(i, f"n{i}", i * 10, 1, "I") for i in range(1, 21)]
    write_changes(landing, "c-0001.csv", first)
    r1 = _load(spark, landing, table, "run-1")
    assert r1.outcome == "committed" and r1.rows == 20
    # The pilot's case: 5 updates, a delete, 2 new keys, and a stale update (older seq).
    second = [(i, f"u{i}", i * 100, 2, "U") for i in range(1, 6)] + [(7, "n7", 70, 3, "D")]
    second += [(21, "n21", 210, 2, "I"), (22, "n22", 220, 2, "I"), (9, "stale", 0, 0, "U")]
    write_changes(landing, "c-0002.csv", second)
    r2 = _load(spark, landing, table, "run-2")
    assert r2.outcome == "committed" and r2.rows == len(second)
    got = check_merge(table, first + second)
    assert got.ok, got
    # The commit that merged is one commit: removes of the files it rewrote, its adds, the marker.
    status = ask(TableRef.parse(table), r2.batch_key and ask_key(table, r2))
    assert status.committed
    log = os.path.join(table, "_delta_log", f"{r2.table_version:020d}.json")
    kinds = [next(iter(json.loads(line))) for line in open(log)]
    assert "remove" in kinds and "add" in kinds and kinds.count("txn") == 1
    info = json.loads(open(log).readline())["commitInfo"]
    assert info["operation"] == "MERGE"
    # A retry of the merged batch writes nothing.
    again = _load(spark, landing, table, "run-2")
    assert again.outcome == "already_committed"
    assert check_merge(table, first + second).ok


def ask_key(table: str, result: Any) -> Any:
    from airflow_eod.core.batch import BatchKey

    return BatchKey("tests.merge", result.batch_key)


def test_rows_a_merge_keeps_from_a_rewritten_file_keep_their_partition_values(
    spark: Any, tmp_path: Any, table: str
) -> None:
    """A merge rewrites every live file that may hold a batch key and writes back the rows it
    keeps. Found while building the chaos merge pipeline, by its hand-driven checker test
    (``tests/chaos/test_chaos.py``, ``test_the_merge_checker_...``): the partition
    values of those files were read under a name deltalake 1.6 does not use
    (``partition_values``; its add actions say ``partition``), so every kept row was written
    back with a null partition value (into ``part=__HIVE_DEFAULT_PARTITION__``) and the file
    removed without its partition values. Here each key is in a partition of its own, with the
    awkward values the chaos world uses, and a batch of stale changes (older seq, other
    partition) touches every key: the table must be as before, partition values included."""
    from deltalake import DeltaTable

    from airflow_eod.sources.landing_files import LandingFilesSource

    parts = ["a", "b c", "x%y", "é", "k=v", "[1]", "p#q", "日", "50%", "a:b"]
    ddl = "id BIGINT, name STRING, amount BIGINT, seq BIGINT, op STRING, part STRING"
    landing = str(tmp_path / "landing")
    source = LandingFilesSource(path=landing, file_format="csv", schema=ddl)
    settings = {**MERGE_SETTINGS, "partition_by": ["part"]}

    def land(name: str, rows: list[tuple[Any, ...]]) -> None:
        os.makedirs(landing, exist_ok=True)
        with open(os.path.join(landing, name), "w", encoding="utf-8") as fh:
            fh.write("id,name,amount,seq,op,part\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))

    first = [(i, f"n{i}", i, 10, "I", p) for i, p in enumerate(parts, 1)]
    land("c-1.csv", first)
    run = "run-1"
    assert run_load(
        spark, spec_for(source, table, plan_for(source, table, run, "tests.merge"), **settings)
    ).rows
    land("c-2.csv", [(i, f"stale{i}", 0, 5, "U", "a") for i in range(1, len(parts) + 1)])
    second = run_load(
        spark, spec_for(source, table, plan_for(source, table, "run-2", "tests.merge"), **settings)
    )
    assert second.outcome == "committed"
    got = sorted(
        tuple(r.values())
        for r in DeltaTable(table)
        .to_pyarrow_table()
        .select(["id", "name", "amount", "seq", "op", "part"])
        .to_pylist()
    )
    assert got == first
    # The files the second merge rewrote were removed with their partition values.
    log = os.path.join(table, "_delta_log", f"{second.table_version:020d}.json")
    removes = [json.loads(line)["remove"] for line in open(log, encoding="utf-8") if '"remove"' in line]
    assert removes and all(r.get("partitionValues", {}).get("part") in parts for r in removes), removes
