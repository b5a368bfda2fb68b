"""Helpers the Delta Spark adversary tests share: SQL on a table by path, another writer's
rows and markers, the ids both readers see, the findings of verify in a readable form."""

from __future__ import annotations

import csv
import json
import os
import re
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from airflow_eod.spark.load_job import run_load
from tests.support.helpers import orders_source, plan_for, spec_for

# The Delta Spark release on the classpath (tests/conftest.py): 4 with Spark 4, 3 with 3.5.
_JAR = re.search(r"delta-spark_[\d._]+-(\d+)\.", os.environ.get("EOD_DELTA_SPARK_JARS", ""))
DELTA_MAJOR = int(_JAR.group(1)) if _JAR else 4


def sql_on(spark: Any, text: str, table: str) -> list[Any]:
    """Run Delta Spark SQL on the table at ``table`` (``{t}`` in ``text``)."""
    return list(spark.sql(text.format(t=f"delta.`{table}`")).collect())


def log_commit(table: str, version: int) -> list[dict[str, Any]]:
    """The actions of commit ``version`` of the table's log."""
    with open(os.path.join(table, "_delta_log", f"{version:020d}.json"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def findings(report: Any) -> list[str]:
    """verify's findings, one line each, for an assertion's message."""
    return [f"{f.severity}:{f.kind}:{f.message[:1500]}" for f in report.findings]


def write_rows(landing: str, rows: list[tuple[int, str]], name: str) -> None:
    """One landing file with the rows (order_id, customer)."""
    os.makedirs(landing, exist_ok=True)
    with open(os.path.join(landing, name), "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["order_id", "customer", "amount", "order_date", "ordered_at"])
        for order_id, who in rows:
            w.writerow([order_id, who, "1.50", "2026-11-01", "2026-11-01T10:00:00.000000Z"])


def load_rows(spark: Any, landing: str, table: str, rows: list[tuple[int, str]], n: int, **kw: Any) -> Any:
    """Land ``rows`` as batch ``n``'s file and load it (it must commit); its plan."""
    write_rows(landing, rows, f"orders-{n:03d}.csv")
    source = orders_source(landing)
    plan = plan_for(source, table, run=f"run-{n}")
    got = run_load(spark, spec_for(source, table, plan, **kw))
    assert got.outcome == "committed" and got.rows == len(rows), got
    return plan


def spark_append(spark: Any, table: str, rows: list[tuple[int, str]], **options: str) -> None:
    """Another writer's Delta Spark append of ``rows`` (order_id, customer), one file;
    ``options`` are the writer's (``txnAppId``...)."""
    df = (
        spark.createDataFrame(list(rows), "order_id INT, customer STRING")
        .selectExpr(
            "order_id",
            "customer",
            "CAST(1.00 AS DECIMAL(10,2)) AS amount",
            "DATE'2026-11-01' AS order_date",
            "TIMESTAMP'2026-11-01 00:00:00' AS ordered_at",
        )
        .coalesce(1)
    )
    writer = df.write.format("delta").mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save(table)


def spark_ids(spark: Any, table: str) -> list[int]:
    """The order ids Delta Spark reads, sorted."""
    spark.catalog.clearCache()
    return sorted(r[0] for r in spark.read.format("delta").load(table).select("order_id").collect())


def set_marker(table: str, app_id: str, version: int) -> None:
    """Another writer (delta-rs, which does not skip a known txn version as Delta Spark does)
    appends nothing with the txn (app_id, version)."""
    schema = pa.schema(DeltaTable(table).schema().to_arrow())
    write_deltalake(
        table,
        pa.Table.from_pylist([], schema=schema),
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction(app_id, version)]),
    )
