"""An adversary's attacks on merge loads (write_mode='merge', issue 22): each case tries to
make a merge table hold a duplicate live key, lose a key or row, hold a wrong row, wedge the
pipeline, commit a batch twice, or make ``verify`` misjudge the table. Real Spark, real Delta
tables; each ends with :func:`~tests.support.merge_helpers.check_merge` or the audit.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.audit.verify import AuditReport, audit_table
from airflow_eod.core.planlog.restatement import plan_restatement
from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import plan_for, spec_for
from tests.support.merge_helpers import (
    MERGE_SETTINGS,
    Change,
    cdc_source,
    check_merge,
    table_rows,
    write_changes,
)

pytestmark = [pytest.mark.spark, pytest.mark.merge]

PIPE = "tests.merge_adversary"


def _load(spark: Any, source: Any, table: str, run: str, **kw: Any) -> Any:
    plan = plan_for(source, table, run, pipeline=PIPE)
    return run_load(spark, spec_for(source, table, plan, **kw))


def _merge(spark: Any, landing: str, table: str, run: str, changes: list[Change], **kw: Any) -> Any:
    write_changes(landing, f"{run}.csv", changes)
    result = _load(spark, cdc_source(landing), table, run, **{**MERGE_SETTINGS, **kw})
    assert result.outcome == "committed", result
    return result


def _say(report: AuditReport) -> str:
    return "\n".join(f"{f.severity} {f.kind}: {f.message}" for f in report.findings)


# -- verify ------------------------------------------------------------------------------------------
def test_tombstones_purged_as_the_docs_advise_audit_clean(spark: Any, tmp_path: Any, table: str) -> None:
    """docs/merge-loads.md: with tombstones kept, "purge tombstones yourself once no older
    batch can arrive (a DELETE ... WHERE op = 'D' AND seq < <watermark> by another writer is
    safe)". After that purge the table is what the source says (no row for a deleted key),
    so verify must not call it broken."""
    landing = str(tmp_path / "landing")
    first: list[Change] = [(i, f"n{i}", i, 1, "I") for i in range(1, 11)]
    second: list[Change] = [(3, "n3", 3, 2, "D"), (4, "u4", 40, 2, "U")]
    _merge(spark, landing, table, "m1", first)
    _merge(spark, landing, table, "m2", second)
    assert check_merge(table, first + second).ok
    DeltaTable(table).delete("op = 'D' AND seq < 100")  # the documented purge
    assert check_merge(table, first + second, tombstones=False).ok
    report = audit_table(table)
    assert report.ok, _say(report)


# -- restatement -------------------------------------------------------------------------------------
def test_restating_a_merged_batch_as_an_append_keeps_the_other_keys(
    spark: Any, tmp_path: Any, table: str
) -> None:
    """A merge batch's files hold every row of the files it rewrote, other batches' keys
    included. A restatement of it that is an append (the pipeline's write_mode changed, or
    set back) swaps out "the batch's files": the other keys' rows must not go with them."""
    landing = str(tmp_path / "landing")
    first: list[Change] = [(i, f"n{i}", i, 1, "I") for i in range(1, 11)]
    second: list[Change] = [(5, "u5", 50, 2, "U")]
    _merge(spark, landing, table, "m1", first)
    m2 = _merge(spark, landing, table, "m2", second).batch_key
    write_changes(landing, "m2.csv", [(5, "fixed5", 55, 2, "U")])  # the source's correction
    source, ref = cdc_source(landing), TableRef.parse(table)
    plan = PlanLog(ref, PIPE).get_plan(m2)
    assert plan is not None
    again = plan_restatement(
        PlanLog(ref, PIPE), plan, run_token="fix", committed_generation=0, replan=source.replan
    )
    try:
        run_load(spark, spec_for(source, table, again, restate=True, previous_generation=0))
    except Exception:  # a refusal, naming the way out, is a fine answer too
        pass
    ids = sorted(r["id"] for r in table_rows(table))
    assert set(range(1, 11)) <= set(ids), (
        f"keys lost by the restatement: {sorted(set(range(1, 11)) - set(ids))}"
    )


# -- column types and names the fold must handle -----------------------------------------------------
def _parquet_source(landing: str, schema: str) -> LandingFilesSource:
    return LandingFilesSource(path=landing, file_format="parquet", schema=schema)


def test_a_column_holding_a_map_inside_a_struct_merges(spark: Any, tmp_path: Any, table: str) -> None:
    """The tie-break hashes every column; Spark refuses to hash a map anywhere in a type
    (not only at the top level): such a table must still merge."""
    landing = str(tmp_path / "landing")
    os.makedirs(landing)
    schema = "id BIGINT, attrs STRUCT<m: MAP<STRING, STRING>>, seq BIGINT"
    arrow = pa.schema(
        [
            ("id", pa.int64()),
            ("attrs", pa.struct([("m", pa.map_(pa.string(), pa.string()))])),
            ("seq", pa.int64()),
        ]
    )

    def write(name: str, rows: list[tuple[int, str, int]]) -> None:
        data = [{"id": i, "attrs": {"m": [("v", v)]}, "seq": s} for i, v, s in rows]
        pq.write_table(pa.Table.from_pylist(data, schema=arrow), os.path.join(landing, name))

    settings = {"write_mode": "merge", "merge_keys": ["id"], "order_by": "seq"}
    write("c-0001.parquet", [(1, "a", 1), (2, "b", 1)])
    assert _load(spark, _parquet_source(landing, schema), table, "run-1", **settings).outcome == "committed"
    write("c-0002.parquet", [(2, "b2", 2), (3, "c", 1)])
    assert _load(spark, _parquet_source(landing, schema), table, "run-2", **settings).outcome == "committed"
    rows = {r["id"]: (dict(r["attrs"]["m"])["v"], r["seq"]) for r in table_rows(table)}
    assert rows == {1: ("a", 1), 2: ("b2", 2), 3: ("c", 1)}


def test_a_column_whose_name_has_a_dot_merges(spark: Any, tmp_path: Any, table: str) -> None:
    """Delta allows a top-level column named ``a.b`` (no column mapping needed); the merge
    names columns for Spark, where an unquoted ``a.b`` is field ``b`` of a struct ``a``. Was
    a defect of the merge (its hash and alignment read ``v.x`` as a struct field), then of
    every load: staging's statistics split Parquet column paths on '.' (Column v does not
    exist in schema); core/delta/parquet_stats.py walks the names from the schema now."""
    landing = str(tmp_path / "landing")
    schema = "id BIGINT, `v.x` STRING, seq BIGINT"
    os.makedirs(landing)

    def write(name: str, rows: list[tuple[int, str, int]]) -> None:
        with open(os.path.join(landing, name), "w") as fh:
            fh.write("id,v.x,seq\n" + "".join(f"{i},{v},{s}\n" for i, v, s in rows))

    def src() -> LandingFilesSource:
        return LandingFilesSource(path=landing, file_format="csv", schema=schema)

    settings = {"write_mode": "merge", "merge_keys": ["id"], "order_by": "seq"}
    write("c-0001.csv", [(1, "a", 1), (2, "b", 1)])
    assert _load(spark, src(), table, "run-1", **settings).outcome == "committed"
    write("c-0002.csv", [(2, "b2", 2), (3, "c", 1)])
    assert _load(spark, src(), table, "run-2", **settings).outcome == "committed"
    rows = {r["id"]: (r["v.x"], r["seq"]) for r in table_rows(table)}
    assert rows == {1: ("a", 1), 2: ("b2", 2), 3: ("c", 1)}


# -- empty and stale batches -------------------------------------------------------------------------
def test_an_empty_batch_merges_as_a_batch_with_no_change(spark: Any, tmp_path: Any, table: str) -> None:
    landing = str(tmp_path / "landing")
    empty = _merge(spark, landing, table, "m0", [])  # the first batch: no table yet
    assert empty.rows == 0
    first: list[Change] = [(i, f"n{i}", i, 1, "I") for i in range(1, 6)]
    _merge(spark, landing, table, "m1", first)
    version = DeltaTable(table).version()
    again = _merge(spark, landing, table, "m2", [])
    assert again.rows == 0 and DeltaTable(table).version() == version + 1
    stale = _merge(spark, landing, table, "m3", [(2, "old", 0, 0, "U"), (3, "old", 0, 0, "D")])
    assert stale.outcome == "committed"
    got = check_merge(table, first)
    assert got.ok, got
    report = audit_table(table)
    assert report.ok, _say(report)
    from airflow_eod.core.batch import BatchKey

    assert ask(TableRef.parse(table), BatchKey(PIPE, stale.batch_key)).committed
    # Every commit of the table is one of the four batches.
    log = os.path.join(table, "_delta_log")
    ops = [
        json.loads(open(os.path.join(log, f)).readline())["commitInfo"]["operation"]
        for f in sorted(os.listdir(log))
        if f.endswith(".json")
    ]
    assert len(ops) == 4, ops


# -- reading outside the table root -------------------------------------------------------------------
def _foreign_add(table: str, path: str, size: int, stats: dict[str, Any]) -> None:
    """A commit by another writer (hand-written, as any Delta writer may write one) adding
    the file ``path``, spelled exactly so in the log."""
    version = DeltaTable(table).version() + 1
    actions = [
        {"commitInfo": {"timestamp": 1, "operation": "WRITE", "operationParameters": {"mode": "Append"}}},
        {
            "add": {
                "path": path,
                "partitionValues": {},
                "size": size,
                "modificationTime": 1,
                "dataChange": True,
                "stats": json.dumps(stats),
            }
        },
    ]
    with open(os.path.join(table, "_delta_log", f"{version:020d}.json"), "x") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")


def test_a_live_file_outside_the_table_root_is_not_read_by_a_merge(
    spark: Any, tmp_path: Any, table: str
) -> None:
    """A log entry naming ``../outside/x.parquet`` (a hostile or broken writer) leads out of
    the table's directory: the merge must not read it into the table (the audit refuses such
    paths, core/audit/safe_open.py), nor commit a remove of it."""
    landing = str(tmp_path / "landing")
    first: list[Change] = [(i, f"n{i}", i, 1, "I") for i in range(1, 6)]
    _merge(spark, landing, table, "m1", first)
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = pa.table(
        {
            "id": pa.array([5], pa.int64()),
            "name": ["SECRET"],
            "amount": pa.array([0], pa.int64()),
            "seq": pa.array([9], pa.int64()),
            "op": ["I"],
        }
    )
    pq.write_table(secret, str(outside / "x.parquet"))
    stats = {"numRecords": 1, "minValues": {"id": 5}, "maxValues": {"id": 5}, "nullCount": {"id": 0}}
    _foreign_add(table, "../outside/x.parquet", os.path.getsize(outside / "x.parquet"), stats)
    version = DeltaTable(table).version()
    try:
        _merge(spark, landing, table, "m2", [(5, "u5", 50, 2, "U")])
    except Exception as exc:  # a refusal naming the path is the right answer
        assert "outside" in str(exc) or ".." in str(exc), exc
        assert DeltaTable(table).version() == version
    log = os.path.join(table, "_delta_log", f"{DeltaTable(table).version():020d}.json")
    actions = [json.loads(x) for x in open(log)]
    removed = [a["remove"]["path"] for a in actions if "remove" in a]
    assert "../outside/x.parquet" not in removed, "the merge read and removed a file outside the table"
    added = [a["add"]["path"] for a in actions if "add" in a and not a["add"]["path"].startswith("..")]
    copied = [
        p for p in added if "SECRET" in pq.read_table(os.path.join(table, p)).column("name").to_pylist()
    ]
    assert not copied, f"the merge copied the outside file's row into {copied}"
