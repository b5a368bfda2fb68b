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

pytestmark = [pytest.mark.spark, pytest.mark.merge]


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


def test_a_partitioned_table_keeps_its_partition_values_when_files_are_rewritten(
    spark: Any, tmp_path: Any, table: str
) -> None:
    """The rewritten files' rows get their partition values from the log (they are not in
    the Parquet files), and an update that moves a key to another partition leaves one row."""
    landing = str(tmp_path / "landing")
    first = [(i, f"p{i % 3}", i, 1, "I") for i in range(1, 31)]
    write_changes(landing, "c-0001.csv", first)
    assert _load(spark, landing, table, "run-1", partition_by=["name"]).outcome == "committed"
    second = [(2, "p0", 2000, 5, "U"), (3, "p1", 3000, 5, "U"), (4, "p1", 4000, 5, "D")]
    write_changes(landing, "c-0002.csv", second)
    assert _load(spark, landing, table, "run-2", partition_by=["name"]).outcome == "committed"
    got = check_merge(table, first + second)
    assert got.ok, got
    # Every remove of the merge commit names the partition values of the file it removes.
    from deltalake import DeltaTable

    version = DeltaTable(table).version()
    lines = [json.loads(x) for x in open(os.path.join(table, "_delta_log", f"{version:020d}.json"))]
    removes = [a["remove"] for a in lines if "remove" in a]
    assert removes and all(r["partitionValues"].get("name") in {"p0", "p1", "p2"} for r in removes)


def test_rows_tied_on_the_ordering_value_end_the_same_whichever_batch_comes_first(
    spark: Any, tmp_path: Any
) -> None:
    """Two batches change one key with one ordering value but different content: the tie is
    broken by the rows' content, never by arrival, so the two orders end alike (I9)."""
    changes_a = [(1, "from-a", 10, 7, "U"), (2, "a2", 1, 1, "I")]
    changes_b = [(1, "from-b", 20, 7, "U"), (1, "from-b-older", 0, 6, "U"), (3, "b3", 1, 1, "I")]
    ends = []
    for order in (("a", "b"), ("b", "a")):
        table = str(tmp_path / f"table-{''.join(order)}")
        landing = str(tmp_path / f"landing-{''.join(order)}")
        for n, which in enumerate(order):
            write_changes(landing, f"c-{n:04d}.csv", changes_a if which == "a" else changes_b)
            assert _load(spark, landing, table, f"run-{n}").outcome == "committed"
        from tests.support.merge_helpers import table_rows

        ends.append(sorted((r["id"], r["name"], r["amount"], r["seq"]) for r in table_rows(table)))
    assert ends[0] == ends[1]
    assert next(r for r in ends[0] if r[0] == 1)[1] in {"from-a", "from-b"}


@pytest.mark.badinput
def test_bad_merge_input_is_refused_by_name_and_commits_nothing(
    spark: Any, tmp_path: Any, table: str
) -> None:
    from airflow_eod.core.errors import BatchRefusedError, MalformedInputError, SchemaMismatchError

    landing = str(tmp_path / "landing")
    write_changes(landing, "c-0001.csv", [(1, "a", 1, 1, "I")])
    assert _load(spark, landing, table, "run-1").outcome == "committed"
    write_changes(landing, "c-0002.csv", [(2, "b", 2, 2, "I")])
    # A string column is no delete marker: cast to boolean it would never delete.
    with pytest.raises(BatchRefusedError, match="not a condition"):
        _load(spark, landing, table, "run-2", delete_when="op")
    with pytest.raises(BatchRefusedError, match="cannot be evaluated"):
        _load(spark, landing, table, "run-2", delete_when="no_such_column = 1")
    # A null ordering value: which row is newest cannot be decided.
    nulls = str(tmp_path / "nulls")
    os.makedirs(nulls)
    with open(os.path.join(nulls, "c-0001.csv"), "w") as fh:
        fh.write("id,name,amount,seq,op\n3,c,3,,I\n4,d,4,1,I\n")
    with pytest.raises(MalformedInputError, match=r"1 row.*null in id, seq"):
        _load(spark, nulls, str(tmp_path / "nulls-table"), "run-1")
    assert not os.path.exists(os.path.join(str(tmp_path / "nulls-table"), "_delta_log"))
    # A type that differs from the table's is refused, never cast.
    from airflow_eod.sources.landing_files import LandingFilesSource

    ddl = "id BIGINT, name STRING, amount STRING, seq BIGINT, op STRING"
    other = LandingFilesSource(path=landing, file_format="csv", schema=ddl)
    from tests.support.helpers import plan_for as _plan

    plan = _plan(other, table, "run-4", pipeline="tests.merge.types")
    with pytest.raises(SchemaMismatchError, match="amount"):
        run_load(spark, spec_for(other, table, plan, **MERGE_SETTINGS))
    assert check_merge(table, [(1, "a", 1, 1, "I")]).ok  # nothing else landed


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
