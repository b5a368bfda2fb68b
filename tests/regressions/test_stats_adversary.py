"""An adversary's attacks on the per-file statistics of staged files (core/delta/parquet_stats.py)
after they stopped splitting Parquet's dotted column paths: each case tries to make a file's
minValues/maxValues/nullCount land on the wrong column, or hold a wrong value, so that a
reader (delta-rs, Delta Spark) or the merge's own pruning skips a file that holds matching
rows; or to make a load of a legal schema fail. Real Spark, real Delta tables.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_eod.core.errors import BatchRefusedError
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import plan_for, spec_for

pytestmark = [pytest.mark.spark]

PIPE = "tests.stats_adversary"

# A top-level column "a.b" beside a struct "a" with a field "b" (Parquet names both leaves
# "a.b"), names Parquet's list and map layouts use, and a struct inside a struct beside a
# top-level column named like its dotted path.
ODD_DDL = (
    "id BIGINT, `a.b` BIGINT, a STRUCT<b: BIGINT, `c.d`: STRING>, element BIGINT, key_value STRING, "
    "`ünï` BIGINT, `bq``x` BIGINT, s STRUCT<t: STRUCT<u: BIGINT>>, `s.t.u` BIGINT, "
    "l ARRAY<STRUCT<element: BIGINT>>, m MAP<STRING, STRUCT<key: BIGINT>>, seq BIGINT"
)
ODD_SCALARS = ["id", "a.b", "element", "key_value", "ünï", "bq`x", "s.t.u", "seq"]


def _odd_rows(lo: int, hi: int, *, flip: bool) -> pa.Table:
    """Rows ``lo..hi-1``; each top-level column's values rise with the id, the struct fields
    beside them run the other way (``flip``), so that statistics put under the wrong one of
    two leaves Parquet names alike rule the wrong file out."""
    ids = list(range(lo, hi))
    other = [1000 - i if flip else 1000 + i for i in ids]
    struct_a = pa.struct([("b", pa.int64()), ("c.d", pa.string())])
    struct_s = pa.struct([("t", pa.struct([("u", pa.int64())]))])
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "a.b": pa.array(ids, pa.int64()),
            "a": pa.array([{"b": o, "c.d": f"c{o}"} for o in other], struct_a),
            "element": pa.array([i + 10 for i in ids], pa.int64()),
            "key_value": pa.array([f"k{i:04d}" for i in ids]),
            "ünï": pa.array([i + 20 for i in ids], pa.int64()),
            "bq`x": pa.array([i + 30 for i in ids], pa.int64()),
            "s": pa.array([{"t": {"u": o}} for o in other], struct_s),
            "s.t.u": pa.array([i + 40 for i in ids], pa.int64()),
            "l": pa.array([[{"element": o}] for o in other], pa.list_(pa.struct([("element", pa.int64())]))),
            "m": pa.array(
                [[("k", {"key": o})] for o in other], pa.map_(pa.string(), pa.struct([("key", pa.int64())]))
            ),
            "seq": pa.array([1] * len(ids), pa.int64()),
        }
    )


def _load(spark: Any, landing: str, table: str, run: str, **kw: Any) -> Any:
    source = LandingFilesSource(path=landing, file_format="parquet", schema=ODD_DDL)
    plan = plan_for(source, table, run, pipeline=PIPE)
    result = run_load(spark, spec_for(source, table, plan, **kw))
    assert result.outcome == "committed", result
    return result


def _stats(table: str) -> list[dict[str, Any]]:
    log = os.path.join(table, "_delta_log")
    out = []
    for name in sorted(os.listdir(log)):
        if name.endswith(".json"):
            for line in open(os.path.join(log, name)):
                add = json.loads(line).get("add")
                if add and add.get("stats"):
                    out.append(json.loads(add["stats"]))
    return out


def _each_value_reads_back(spark: Any, table: str) -> None:
    """Every value of every top-level scalar column filtered on by delta-rs, and a value in
    each file of the colliding names (``a.b``, ``s.t.u`` and the struct fields Parquet names
    alike) filtered on by Delta Spark, reads back every row that holds it."""
    from functools import reduce

    from pyspark.sql import functions as F

    rows = pa.table(DeltaTable(table).to_pyarrow_table()).to_pylist()
    dt = DeltaTable(table)
    sdf = spark.read.format("delta").load(table)
    queries: list[tuple[str, Any, int]] = []  # (what, Spark filter, rows that hold the value)
    for column in ODD_SCALARS:
        values = sorted({r[column] for r in rows})
        for value in values:
            want = sum(1 for r in rows if r[column] == value)
            got = dt.to_pyarrow_table(filters=[(column, "=", value)]).num_rows
            assert got == want, f"delta-rs: {column} = {value!r} read {got} of {want} rows"
            if column in ("a.b", "s.t.u", "bq`x") and value in (values[0], values[-1]):
                # Delta Spark: a value in each file, of the names Parquet's paths collide on
                quoted = "`" + column.replace("`", "``") + "`"
                queries.append((f"{column} = {value!r}", F.col(quoted) == value, want))
    by_id = sorted(rows, key=lambda r: r["id"])
    for r in (by_id[0], by_id[-1]):
        queries.append((f"struct a.b = {r['a']['b']}", F.col("a")["b"] == r["a"]["b"], 1))
        queries.append((f"struct s.t.u = {r['s']['t']['u']}", F.col("s")["t"]["u"] == r["s"]["t"]["u"], 1))
    # One Spark job: each filtered scan of the union skips files by the statistics on its own.
    scans = [sdf.filter(cond).select(F.lit(i).alias("q")) for i, (_, cond, _) in enumerate(queries)]
    counts = {
        r["q"]: r["count"] for r in reduce(lambda x, y: x.unionAll(y), scans).groupBy("q").count().collect()
    }
    for i, (what, _, want) in enumerate(queries):
        assert counts.get(i, 0) == want, f"Delta Spark: {what} read {counts.get(i, 0)} of {want} rows"


@pytest.mark.delta_spark
def test_odd_names_append_and_read_back_through_the_statistics(spark: Any, tmp_path: Any, table: str) -> None:
    """Two batches whose values do not overlap, so each file's statistics rule the other out:
    each leaf's statistics are its own, and every filtered read (delta-rs, Delta Spark) finds
    every row."""
    landing = str(tmp_path / "landing")
    os.makedirs(landing)
    pq.write_table(_odd_rows(1, 4, flip=False), os.path.join(landing, "b-0001.parquet"))
    _load(spark, landing, table, "run-1")
    pq.write_table(_odd_rows(101, 104, flip=True), os.path.join(landing, "b-0002.parquet"))
    # Spark's legacy layout names a list's levels "bag" and "array": the walk still knows them.
    spark.conf.set("spark.sql.parquet.writeLegacyFormat", "true")
    try:
        _load(spark, landing, table, "run-2")
    finally:
        spark.conf.unset("spark.sql.parquet.writeLegacyFormat")
    layouts = set()
    for f in DeltaTable(table).file_uris():
        meta = pq.read_metadata(f.removeprefix("file://"))
        layouts |= {meta.schema.column(i).path for i in range(meta.num_columns)}
    assert {"l.list.element.element", "l.bag.array.element"} <= layouts, layouts
    stats = _stats(table)
    assert len(stats) >= 2
    for st in stats:
        lo, hi = st["minValues"], st["maxValues"]
        assert lo["a.b"] == lo["id"] and hi["a.b"] == hi["id"], st
        assert lo["s.t.u"] == lo["id"] + 40, st
        assert {lo["a"]["b"], hi["a"]["b"]} <= set(range(890, 1110)), st
        assert "l" not in lo and "m" not in lo, st
    _each_value_reads_back(spark, table)


def test_odd_names_merge_prunes_by_the_key_statistics(spark: Any, tmp_path: Any, table: str) -> None:
    """A merge of the odd-named table (merge keys are plain names): its pruning reads the
    key's statistics from files whose leaves Parquet names alike; a file ruled out by wrong
    ones would leave the key's old row beside the new one."""
    landing = str(tmp_path / "landing")
    os.makedirs(landing)
    settings = {"write_mode": "merge", "merge_keys": ["id"], "order_by": "seq"}
    pq.write_table(_odd_rows(1, 4, flip=False), os.path.join(landing, "b-0001.parquet"))
    _load(spark, landing, table, "run-1", **settings)
    pq.write_table(_odd_rows(101, 104, flip=True), os.path.join(landing, "b-0002.parquet"))
    _load(spark, landing, table, "run-2", **settings)
    again = _odd_rows(2, 3, flip=True).set_column(11, "seq", pa.array([2], pa.int64()))
    pq.write_table(again, os.path.join(landing, "b-0003.parquet"))
    _load(spark, landing, table, "run-3", **settings)
    rows = pa.table(DeltaTable(table).to_pyarrow_table()).to_pylist()
    keys = sorted(r["id"] for r in rows)
    assert keys == [1, 2, 3, 101, 102, 103], keys
    assert [(r["seq"], r["a"]["b"]) for r in rows if r["id"] == 2] == [(2, 998)]


@pytest.mark.delta_spark
def test_a_not_null_struct_column_loads(spark: Any, tmp_path: Any, table: str) -> None:
    """A table (Delta Spark's) with a NOT NULL struct column: the delta-rs engine's NOT NULL
    check read the column's ``nullCount``, which for a struct is its leaves' counts (a dict),
    and every load failed ("'>' not supported between instances of 'dict' and 'int'"). A leaf
    without nulls says the struct has none; a batch with a null struct is still refused."""
    spark.sql(
        f"CREATE TABLE delta.`{table}` (id BIGINT, s STRUCT<b: BIGINT, c: STRING> NOT NULL) USING delta"
    )
    landing = str(tmp_path / "landing")
    os.makedirs(landing)
    struct = pa.struct([("b", pa.int64()), ("c", pa.string())])
    source = LandingFilesSource(
        path=landing, file_format="parquet", schema="id BIGINT, s STRUCT<b: BIGINT, c: STRING>"
    )

    def load(run: str) -> Any:
        return run_load(spark, spec_for(source, table, plan_for(source, table, run, pipeline=PIPE)))

    rows = pa.table({"id": [1, 2], "s": pa.array([{"b": 1, "c": None}, {"b": 2, "c": "x"}], struct)})
    pq.write_table(rows, os.path.join(landing, "b-0001.parquet"))
    assert load("run-1").outcome == "committed"
    null_struct = pa.table({"id": [3], "s": pa.array([None], struct)})
    pq.write_table(null_struct, os.path.join(landing, "b-0002.parquet"))
    with pytest.raises(BatchRefusedError, match="column s is NOT NULL"):
        load("run-2")
    assert sorted(r["id"] for r in DeltaTable(table).to_pyarrow_table().to_pylist()) == [1, 2]


def test_nanosecond_timestamp_maximum_is_ceiled(tmp_path: Any) -> None:
    """A nanosecond timestamp's maximum past a whole microsecond (pandas' Timestamp keeps the
    nanoseconds apart) was floored to the millisecond: a maximum below the file's greatest
    value, which a reader's filter above it would rule the file out by."""
    from airflow_eod.core.delta.parquet_stats import file_stats

    path = str(tmp_path / "f.parquet")
    values = [1_000_000_500, 2_000_000_500]  # 1.0000005 s and 2.0000005 s after the epoch
    pq.write_table(
        pa.table(
            {"t": pa.array(values, pa.timestamp("ns", "UTC")), "n": pa.array(values, pa.timestamp("ns"))}
        ),
        path,
    )
    stats = json.loads(file_stats(path)[1])
    assert stats["maxValues"] == {"t": "1970-01-01T00:00:02.001Z", "n": "1970-01-01T00:00:02.001"}
    assert stats["minValues"] == {"t": "1970-01-01T00:00:01.000Z", "n": "1970-01-01T00:00:01.000"}


@pytest.mark.delta_spark
def test_dates_spark_rebased_to_the_julian_calendar_state_no_range(
    spark: Any, tmp_path: Any, table: str
) -> None:
    """A session with spark.sql.parquet.datetimeRebaseModeInWrite=LEGACY (Hive-era clusters
    set it) stores 1000-01-01 as 1000-01-06 and marks the file: the footer's min/max read as
    stated put the day the file holds out of its range, and Delta Spark's filter on it read
    no row. Such a file states no min/max for its dates and timestamps."""
    from pyspark.sql import functions as F

    landing = str(tmp_path / "landing")
    os.makedirs(landing)
    source = LandingFilesSource(path=landing, file_format="csv", schema="id BIGINT, d DATE, t TIMESTAMP")
    with open(os.path.join(landing, "b-0001.csv"), "w") as fh:
        fh.write("id,d,t\n1,1000-01-01,1000-01-01T00:00:00Z\n")
    spark.conf.set("spark.sql.parquet.datetimeRebaseModeInWrite", "LEGACY")
    try:
        result = run_load(spark, spec_for(source, table, plan_for(source, table, "run-1", pipeline=PIPE)))
    finally:
        spark.conf.unset("spark.sql.parquet.datetimeRebaseModeInWrite")
    assert result.outcome == "committed", result
    (stats,) = _stats(table)
    assert "d" not in stats["minValues"] and "t" not in stats["maxValues"], stats
    assert stats["minValues"]["id"] == 1 and stats["nullCount"]["d"] == 0, stats
    rows = spark.read.format("delta").load(table)
    assert rows.filter(F.col("d") == F.lit("1000-01-01").cast("date")).count() == 1
    assert rows.filter(F.col("t") == F.lit("1000-01-01 00:00:00").cast("timestamp")).count() == 1


def test_the_last_timestamp_loads(spark: Any, tmp_path: Any, table: str) -> None:
    """9999-12-31 23:59:59.999999, the "valid until" of many history tables: its maximum,
    ceiled to the millisecond, is past the last datetime, and every load of a batch holding
    it failed (OverflowError: date value out of range). It states no maximum now."""
    landing = str(tmp_path / "landing")
    os.makedirs(landing)
    source = LandingFilesSource(
        path=landing, file_format="csv", schema="id BIGINT, t TIMESTAMP, n TIMESTAMP_NTZ"
    )
    with open(os.path.join(landing, "b-0001.csv"), "w") as fh:
        fh.write("id,t,n\n1,9999-12-31T23:59:59.999999Z,9999-12-31T23:59:59.999999\n")
    result = run_load(spark, spec_for(source, table, plan_for(source, table, "run-1", pipeline=PIPE)))
    assert result.outcome == "committed", result
    (stats,) = _stats(table)
    assert "t" not in stats["maxValues"] and "n" not in stats["maxValues"], stats
    assert stats["nullCount"] == {"id": 0, "t": 0, "n": 0}, stats
    assert DeltaTable(table).to_pyarrow_table(filters=[("id", "=", 1)]).num_rows == 1


@pytest.mark.delta_spark
def test_odd_names_merge_on_the_delta_spark_engine(spark: Any, tmp_path: Any, table: str) -> None:
    """The Delta Spark engine's MERGE source named the batch's columns unquoted: a column
    ``bq`x`` failed every merge (INVALID_ATTRIBUTE_NAME_SYNTAX), a column ``a.b`` too (Spark
    reads an unquoted ``a.b`` as field ``b`` of a struct ``a``: UNRESOLVED_COLUMN)."""
    landing = str(tmp_path / "landing")
    os.makedirs(landing)
    settings = {"write_mode": "merge", "merge_keys": ["id"], "order_by": "seq", "engine": "delta-spark"}
    pq.write_table(_odd_rows(1, 4, flip=False), os.path.join(landing, "b-0001.parquet"))
    _load(spark, landing, table, "run-1", **settings)
    again = _odd_rows(2, 3, flip=True).set_column(11, "seq", pa.array([2], pa.int64()))
    pq.write_table(again, os.path.join(landing, "b-0002.parquet"))
    _load(spark, landing, table, "run-2", **settings)
    rows = {r["id"]: r for r in DeltaTable(table).to_pyarrow_table().to_pylist()}
    assert sorted(rows) == [1, 2, 3]
    assert (rows[2]["seq"], rows[2]["a.b"], rows[2]["a"]["b"], rows[2]["bq`x"]) == (2, 2, 998, 32)
    assert (rows[3]["seq"], rows[3]["a.b"], rows[3]["a"]["b"]) == (1, 3, 1003)


def test_a_variant_column_is_refused_before_the_engine_creates_a_table_it_would_refuse(
    spark: Any, tmp_path: Any, table: str
) -> None:
    """A batch with a VARIANT column created a table (feature variantType) that the delta-rs
    engine refuses on every later load, whose statistics were keyed by Spark's shredded
    layout (``v.typed_value.a.typed_value``) and which delta-rs could not read (Spark's
    shredded files). The first load is refused instead, and no table is made."""
    landing = str(tmp_path / "landing")
    spark.sql("""SELECT 1L AS id, parse_json('{"a": 1}') AS v""").coalesce(1).write.parquet(landing)
    for name in os.listdir(landing):
        if not name.endswith(".parquet"):
            os.unlink(os.path.join(landing, name))
    source = LandingFilesSource(path=landing, file_format="parquet", schema="id BIGINT, v VARIANT")
    with pytest.raises(BatchRefusedError, match=r"column\(s\) v hold VARIANT values"):
        run_load(spark, spec_for(source, table, plan_for(source, table, "run-1", pipeline=PIPE)))
    assert not os.path.exists(os.path.join(table, "_delta_log", "00000000000000000000.json"))
