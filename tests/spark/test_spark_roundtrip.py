"""Every common Spark type goes through the engine into a partitioned table and comes back
equal when read with deltalake (not Spark)."""

from __future__ import annotations

import datetime as dt
import json
import os
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import spec_for

pytestmark = pytest.mark.spark

ALL_TYPES_DDL = (
    "i INT, l BIGINT, d DOUBLE, dec DECIMAL(12,3), s STRING, b BINARY, flag BOOLEAN, day DATE, "
    "ts TIMESTAMP, ntz TIMESTAMP_NTZ, arr ARRAY<INT>, m MAP<STRING,INT>, st STRUCT<x: INT, y: STRING>, "
    "region STRING"
)
UTC = dt.UTC


def _rows() -> list[tuple[Any, ...]]:
    return [
        (
            1,
            2**40,
            1.5,
            Decimal("123.456"),
            "héllo",
            b"\x00\x01",
            True,
            dt.date(2026, 11, 20),
            dt.datetime(2026, 11, 20, 10, 0, 0, 123456, tzinfo=UTC),
            dt.datetime(2026, 11, 20, 10, 0, 0, 654321),
            [1, 2, None],
            {"a": 1},
            (7, "seven"),
            "eu",
        ),
        (
            2,
            -5,
            -0.25,
            Decimal("-0.001"),
            "",
            b"",
            False,
            dt.date(1999, 12, 31),
            dt.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            dt.datetime(1999, 12, 31, 23, 59, 59),
            [],
            {},
            (None, None),
            "us",
        ),
        (None, None, None, None, None, None, None, None, None, None, None, None, None, "us"),
    ]


def test_every_common_type_round_trips_through_a_partitioned_table(spark: Any, tmp_path: Any) -> None:
    landing = str(tmp_path / "landing")
    table = str(tmp_path / "table")
    df = spark.createDataFrame(_rows(), ALL_TYPES_DDL)
    df.coalesce(1).write.parquet(f"file://{landing}")
    source = LandingFilesSource(path=landing, file_format="parquet", pattern="*.parquet")
    plan = source.plan(
        PlanLog(TableRef.parse(table), "tests.types"), run_token="r", is_committed=lambda k: False
    )
    assert plan is not None
    result = run_load(spark, spec_for(source, table, plan, partition_by=["region"]))
    assert result.outcome == "committed" and result.rows == 3

    dt_ = DeltaTable(table)
    assert dt_.metadata().partition_columns == ["region"]
    got = pa.table(dt_.to_pyarrow_table()).to_pylist()
    got = sorted(got, key=lambda r: (r["i"] is None, r["i"]))
    want = [dict(zip([f.name for f in df.schema.fields], r, strict=True)) for r in _rows()]
    for g, w in zip(got, want, strict=True):
        g["m"] = dict(g["m"]) if g["m"] is not None else None
        g["st"] = (g["st"]["x"], g["st"]["y"]) if g["st"] is not None else None
        assert g == w
    # Stats came from the Parquet footers, and the timestamps really are TIMESTAMP_MICROS.
    for add in _adds(table):
        stats = json.loads(add["stats"])
        assert stats["numRecords"] >= 1 and "i" in stats["nullCount"]
    fields = {f["name"]: f["type"] for f in json.loads(dt_.schema().to_json())["fields"]}
    assert (
        fields["ts"] == "timestamp" and fields["ntz"] == "timestamp_ntz" and fields["dec"] == "decimal(12,3)"
    )


def _adds(table: str) -> list[dict[str, Any]]:
    log_dir = os.path.join(table, "_delta_log")
    adds = []
    for name in sorted(os.listdir(log_dir)):
        if name.endswith(".json"):
            adds += [json.loads(line)["add"] for line in open(os.path.join(log_dir, name)) if '"add"' in line]
    return adds


def test_partition_folders_are_plain_ascii_and_values_read_back(spark: Any, tmp_path: Any) -> None:
    """Odd partition values (non-ASCII, a space, '%', '+', '=', a two-level partition with a
    non-ASCII column name) are staged in folders of plain ASCII, every writer's spelling of
    which is the same, and the table's partition values are the values themselves."""
    from airflow_eod.core.errors import BatchRefusedError

    landing, table = str(tmp_path / "landing"), str(tmp_path / "table")
    values = ["日本", "é", "ü ß", "a%b", "a+b", "k=v", "plain"]
    rows = [(i, v, "ç" if i % 2 else "x") for i, v in enumerate(values)]
    spark.createDataFrame(rows, "i INT, region STRING, `zoné` STRING").coalesce(1).write.parquet(
        f"file://{landing}"
    )
    source = LandingFilesSource(path=landing, file_format="parquet", pattern="*.parquet")
    plan = source.plan(
        PlanLog(TableRef.parse(table), "tests.odd"), run_token="r", is_committed=lambda k: False
    )
    assert plan is not None
    result = run_load(spark, spec_for(source, table, plan, partition_by=["region", "zoné"]))
    assert result.outcome == "committed" and result.rows == len(values)
    paths = [a["path"] for a in _adds(table)]
    assert all(p.isascii() and " " not in p for p in paths), paths
    on_disk = [os.path.relpath(os.path.join(d, n), table) for d, _, ns in os.walk(table) for n in ns]
    assert all(p.isascii() for p in on_disk if p.endswith(".parquet")), on_disk
    got = pa.table(DeltaTable(table).to_pyarrow_table()).to_pylist()
    assert sorted((r["i"], r["region"], r["zoné"]) for r in got) == rows
    parts = {(a["partitionValues"]["region"], a["partitionValues"]["zoné"]) for a in _adds(table)}
    assert parts == {(v, z) for _, v, z in rows}

    # A value whose folder name would be longer than a file name may be once percent-encoded
    # (80 CJK letters: 240 bytes as they are, 720 encoded) is refused, naming the batch.
    long_landing = str(tmp_path / "long")
    spark.createDataFrame([(1, "日" * 80)], "i INT, region STRING").write.parquet(f"file://{long_landing}")
    source = LandingFilesSource(path=long_landing, file_format="parquet", pattern="*.parquet")
    other = str(tmp_path / "other")
    plan = source.plan(
        PlanLog(TableRef.parse(other), "tests.long"), run_token="r", is_committed=lambda k: False
    )
    assert plan is not None
    with pytest.raises(BatchRefusedError, match=r"tests\.long.*percent-encoded.*255") as err:
        run_load(spark, spec_for(source, other, plan, partition_by=["region"]))
    assert not err.value.retryable
    assert not os.path.exists(os.path.join(other, "_delta_log")), "nothing was committed"
