"""Tables created by Delta Spark with the table features it turns on today, loaded by
airflow-eod with each engine (issue 19, item 3, the feature bullet).

For every feature and engine, airflow-eod either writes the table correctly (Delta Spark
reads the loaded rows back, row by row, ``verify`` passes, and the feature's own rule still
holds afterwards) or refuses at once: before anything is read or staged, with an error that
names the feature and that no retry can fix, the table unchanged. docs/reference.md
("Tables with Delta table features") is the same table; a test holds the two together.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

from airflow_eod.core.audit.verify import audit_table
from airflow_eod.core.errors import BatchRefusedError, UnsupportedTableError
from airflow_eod.core.table_layout import DATA_DIR
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.compare import Comparison, compare_rows, read_landing_rows
from airflow_eod.examples.sample_data import ORDERS_ARROW_SCHEMA, ORDERS_COLUMNS, write_order_files
from airflow_eod.spark.load_job import run_load
from tests.delta_spark.test_delta_spark_engine import pytestmark as delta_spark_tier
from tests.support.delta_spark_helpers import DELTA_MAJOR
from tests.support.helpers import orders_source, plan_for, restate, spec_for

pytestmark = delta_spark_tier

ORDERS = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"
ENGINES = ["delta-rs", "delta-spark"]


# -- reading the table back ------------------------------------------------------------
def spark_rows_check(spark: Any, table: str, landing: str) -> Comparison:
    """The row-by-row checker, with Delta Spark as the table's reader (deltalake cannot read
    the data of tables with deletion vectors, V2 checkpoints, type widening, ...)."""
    spark.catalog.clearCache()
    df = spark.read.format("delta").load(table).select(*ORDERS_COLUMNS)
    # pyspark 3.5 has no toArrow(); its toPandas() reads the same Arrow batches.
    got = df.toArrow() if hasattr(df, "toArrow") else pa.Table.from_batches(df._collect_as_arrow())
    rows = [tuple(r[c] for c in ORDERS_COLUMNS) for r in got.to_pylist()]
    return compare_rows(read_landing_rows(landing, "csv", ORDERS_COLUMNS, ORDERS_ARROW_SCHEMA), rows)


def detail(spark: Any, table: str) -> dict[str, Any]:
    row = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").collect()[0]
    return dict(row.asDict())


def table_features(spark: Any, table: str) -> set[str]:
    return set(detail(spark, table)["tableFeatures"] or [])


def commits(table: str) -> list[list[dict[str, Any]]]:
    log_dir = os.path.join(table, "_delta_log")
    names = sorted(n for n in os.listdir(log_dir) if re.fullmatch(r"\d{20}\.json", n))
    out = []
    for n in names:
        with open(os.path.join(log_dir, n)) as fh:
            out.append([json.loads(line) for line in fh if line.strip()])
    return out


def refused_by_spark(spark: Any, sql: str) -> str:
    """Delta Spark refuses ``sql``: its error text."""
    with pytest.raises(Exception) as info:  # a Py4J/Spark error of Delta's own
        spark.sql(sql).collect()
    return str(info.value)


# -- what each feature still promises after airflow-eod's loads --------------------------
def _deletion_vectors_hold(spark: Any, t: str) -> None:
    assert detail(spark, t)["properties"].get("delta.enableDeletionVectors") == "true"
    before = spark.read.format("delta").load(t).count()
    spark.sql(f"DELETE FROM delta.`{t}` WHERE order_id = 1")
    last = commits(t)[-1]
    assert any("deletionVector" in a.get("add", {}) for a in last), "Delta Spark's DELETE wrote a DV"
    assert spark.read.format("delta").load(t).count() == before - 1


def _column_mapping_holds(mode: str) -> Callable[[Any, str], None]:
    def check(spark: Any, t: str) -> None:
        assert detail(spark, t)["properties"].get("delta.columnMapping.mode") == mode
        spark.sql(f"ALTER TABLE delta.`{t}` RENAME COLUMN customer TO client")
        names = [r["client"] for r in spark.read.format("delta").load(t).select("client").collect()]
        assert names and all(n is not None for n in names)

    return check


def _row_ids_hold(spark: Any, t: str) -> None:
    ids = spark.read.format("delta").load(t).select("_metadata.row_id", "_metadata.row_commit_version")
    rows = ids.collect()
    assert rows and all(r["row_id"] is not None and r["row_commit_version"] is not None for r in rows)
    assert len({r["row_id"] for r in rows}) == len(rows), "row ids are unique"


def _v2_checkpoints_hold(spark: Any, t: str) -> None:
    assert detail(spark, t)["properties"].get("delta.checkpointPolicy") == "v2"
    names = os.listdir(os.path.join(t, "_delta_log"))
    # Delta Spark's V2 checkpoints are UUID-named: <version>.checkpoint.<uuid>.(json|parquet)
    assert any(re.fullmatch(r"\d{20}\.checkpoint\.[0-9a-f-]{36}\.(json|parquet)", n) for n in names), names


def _clustering_holds(spark: Any, t: str) -> None:
    assert detail(spark, t)["clusteringColumns"] == ["order_id"]
    spark.sql(f"OPTIMIZE delta.`{t}`")
    assert any(a.get("add", {}).get("clusteringProvider") == "liquid" for a in commits(t)[-1])


def _check_constraint_holds(spark: Any, t: str) -> None:
    text = refused_by_spark(
        spark,
        f"INSERT INTO delta.`{t}` VALUES (-5, 'x', 1.00, DATE'2024-01-01', TIMESTAMP'2024-01-01 00:00:00')",
    )
    assert "positive_id" in text


def _generated_column_holds(spark: Any, t: str) -> None:
    rows = spark.read.format("delta").load(t).select("order_date", "order_year").collect()
    assert rows and all(r["order_year"] == r["order_date"].year for r in rows)


def _identity_holds(spark: Any, t: str) -> None:
    keys = [r["row_key"] for r in spark.read.format("delta").load(t).select("row_key").collect()]
    assert keys and None not in keys and len(set(keys)) == len(keys)


def _change_feed_holds(spark: Any, t: str) -> None:
    changes = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(t)
    kinds = {r["_change_type"] for r in changes.select("_change_type").collect()}
    assert kinds == {"insert"}
    assert changes.count() == spark.read.format("delta").load(t).count()


def _append_only_holds(spark: Any, t: str) -> None:
    assert "append" in refused_by_spark(spark, f"DELETE FROM delta.`{t}` WHERE order_id = 1").lower()


def _not_null_holds(spark: Any, t: str) -> None:
    text = refused_by_spark(
        spark,
        f"INSERT INTO delta.`{t}` VALUES (NULL, 'x', 1.00, DATE'2024-01-01', TIMESTAMP'2024-01-01 00:00:00')",
    )
    assert "order_id" in text and "null" in text.lower()


def _in_commit_timestamps_hold(spark: Any, t: str) -> None:
    stamps = []
    for actions in commits(t):
        first = actions[0]
        assert "commitInfo" in first and isinstance(first["commitInfo"].get("inCommitTimestamp"), int), first
        stamps.append(first["commitInfo"]["inCommitTimestamp"])
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps), stamps
    history = spark.sql(f"DESCRIBE HISTORY delta.`{t}`").select("version", "timestamp").collect()
    by_version = sorted((r["version"], r["timestamp"]) for r in history)
    assert [ts for _, ts in by_version] == sorted(ts for _, ts in by_version)


def _type_widening_holds(spark: Any, t: str) -> None:
    spark.sql(f"ALTER TABLE delta.`{t}` ALTER COLUMN order_id TYPE BIGINT")
    assert spark.read.format("delta").load(t).schema["order_id"].dataType.simpleString() == "bigint"


def _vacuum_holds(spark: Any, t: str) -> None:
    spark.sql(f"VACUUM delta.`{t}`")  # a vacuum that checks the protocol, as the feature asks


def _nothing_more(spark: Any, t: str) -> None:
    """The feature asks nothing a reader can see beyond the protocol listing it."""


@dataclass(frozen=True)
class Case:
    """A table Delta Spark creates with one feature.

    :param feature: the protocol's name for it (a key of ``table_compat.TABLE_FEATURES``).
    :param columns: the table's columns.
    :param clauses: what follows ``USING delta`` (CLUSTER BY, TBLPROPERTIES).
    :param after: SQL run on the new table (``{t}``: the table).
    :param holds: the feature's rule, checked after airflow-eod's loads.
    :param delta_rs_writes: whether the delta-rs engine writes the table (else refuses).
    :param not_on_delta3: why the case cannot run with Delta Spark 3.x (Spark 3.5), if so.
    """

    id: str
    feature: str
    columns: str = ORDERS
    clauses: str = ""
    after: tuple[str, ...] = ()
    holds: Callable[[Any, str], None] = _nothing_more
    delta_rs_writes: bool = True
    not_on_delta3: str = ""


def props(**kv: str) -> str:
    """``TBLPROPERTIES`` of ``delta.<key>`` (``__`` in a key stands for a dot)."""
    pairs = ", ".join(f"'delta.{k.replace('__', '.')}' = '{v}'" for k, v in kv.items())
    return f"TBLPROPERTIES ({pairs})"


SUPPORTED = "supported"
CASES = [
    Case(
        "deletionVectors",
        "deletionVectors",
        clauses=props(enableDeletionVectors="true"),
        holds=_deletion_vectors_hold,
    ),
    Case(
        "columnMapping-name",
        "columnMapping",
        clauses=props(columnMapping__mode="name"),
        holds=_column_mapping_holds("name"),
        delta_rs_writes=False,
    ),
    Case(
        "columnMapping-id",
        "columnMapping",
        clauses=props(columnMapping__mode="id"),
        holds=_column_mapping_holds("id"),
        delta_rs_writes=False,
    ),
    Case(
        "rowTracking",
        "rowTracking",
        clauses=props(enableRowTracking="true"),
        holds=_row_ids_hold,
        delta_rs_writes=False,
    ),
    Case(
        "v2Checkpoint",
        "v2Checkpoint",
        clauses=props(checkpointPolicy="v2", checkpointInterval="2"),
        holds=_v2_checkpoints_hold,
        delta_rs_writes=False,
    ),
    Case("clustering", "clustering", clauses="CLUSTER BY (order_id)", holds=_clustering_holds),
    Case(
        "checkConstraints",
        "checkConstraints",
        after=("ALTER TABLE delta.`{t}` ADD CONSTRAINT positive_id CHECK (order_id > 0)",),
        holds=_check_constraint_holds,
        delta_rs_writes=False,
    ),
    Case(
        "generatedColumns",
        "generatedColumns",
        columns=ORDERS + ", order_year INT GENERATED ALWAYS AS (YEAR(order_date))",
        holds=_generated_column_holds,
        delta_rs_writes=False,
        not_on_delta3="Delta 3.3 on Spark 3.5 refuses generated columns in CREATE TABLE on a path",
    ),
    Case(
        "identityColumns",
        "identityColumns",
        columns="row_key BIGINT GENERATED ALWAYS AS IDENTITY, " + ORDERS,
        holds=_identity_holds,
        delta_rs_writes=False,
        not_on_delta3="Spark 3.5's SQL has no GENERATED ... AS IDENTITY",
    ),
    Case(
        "changeDataFeed",
        "changeDataFeed",
        clauses=props(enableChangeDataFeed="true"),
        holds=_change_feed_holds,
    ),
    Case("appendOnly", "appendOnly", clauses=props(appendOnly="true"), holds=_append_only_holds),
    Case("timestampNtz", "timestampNtz", clauses=props(feature__timestampNtz=SUPPORTED)),
    Case(
        "invariants-not-null",
        "invariants",
        columns=ORDERS.replace("order_id INT", "order_id INT NOT NULL"),
        clauses=props(feature__invariants=SUPPORTED),
        holds=_not_null_holds,
    ),
    Case("domainMetadata", "domainMetadata", clauses=props(feature__domainMetadata=SUPPORTED)),
    Case(
        "typeWidening",
        "typeWidening",
        clauses=props(enableTypeWidening="true"),
        holds=_type_widening_holds,
        not_on_delta3="Delta 3.3 has it only as typeWidening-preview",
    ),
    Case(
        "variantType",
        "variantType",
        clauses=props(feature__variantType=SUPPORTED),
        delta_rs_writes=False,
        not_on_delta3="Delta 3.3 has no variant type",
    ),
    Case(
        "vacuumProtocolCheck",
        "vacuumProtocolCheck",
        clauses=props(feature__vacuumProtocolCheck=SUPPORTED),
        holds=_vacuum_holds,
    ),
    Case(
        "inCommitTimestamp",
        "inCommitTimestamp",
        clauses=props(enableInCommitTimestamps="true"),
        holds=_in_commit_timestamps_hold,
    ),
]


def create(spark: Any, table: str, case: Case) -> None:
    spark.sql(f"CREATE TABLE delta.`{table}` ({case.columns}) USING delta {case.clauses}")
    for sql in case.after:
        spark.sql(sql.format(t=table))
    assert case.feature in table_features(spark, table), "Delta Spark turned the feature on"


def load(spark: Any, table: str, landing: str, engine: str, run: str, try_number: int = 1) -> Any:
    source = orders_source(landing)
    plan = plan_for(source, table, run=run)
    return run_load(spark, spec_for(source, table, plan, try_number=try_number, engine=engine))


def log_state(table: str) -> dict[str, int]:
    log_dir = os.path.join(table, "_delta_log")
    return {n: os.stat(os.path.join(log_dir, n)).st_size for n in os.listdir(log_dir)}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_delta_spark_table_with_the_feature_is_written_or_refused_at_once(
    spark: Any, tmp_path: Any, case: Case, engine: str
) -> None:
    if case.not_on_delta3 and DELTA_MAJOR == 3:
        pytest.skip(f"{case.feature} with Delta Spark 3.x: {case.not_on_delta3}")
    table, landing = str(tmp_path / "table"), str(tmp_path / "landing")
    create(spark, table, case)
    write_order_files(landing, 2, 20)
    if engine == "delta-rs" and not case.delta_rs_writes:
        before = log_state(table)
        with pytest.raises(UnsupportedTableError, match=rf"table feature {case.feature} \(") as info:
            load(spark, table, landing, engine, "run-1")
        assert not info.value.retryable
        assert "nothing was read or staged" in str(info.value) and "engine='delta-spark'" in str(info.value)
        assert log_state(table) == before, "the table is unchanged"
        assert not os.path.exists(os.path.join(table, DATA_DIR)), "nothing was staged"
        assert spark.read.format("delta").load(table).count() == 0
        return
    first = load(spark, table, landing, engine, "run-1")
    assert first.outcome == "committed" and first.rows == 40
    write_order_files(landing, 1, 15, first_id=1000)
    second = load(spark, table, landing, engine, "run-2")
    assert second.outcome == "committed" and second.rows == 15
    again = load(spark, table, landing, engine, "run-2", try_number=2)  # a retry of the second run
    assert again.outcome == "already_committed" and again.table_version == second.table_version
    cmp = spark_rows_check(spark, table, landing)
    assert cmp.exact, cmp.describe()
    report = audit_table(table)
    assert report.ok, report.findings
    assert {b.recorded_rows for b in report.batches} == {40, 15}
    assert {b.live_rows for b in report.batches} == {40, 15}
    assert case.feature in table_features(spark, table), "the feature is still on"
    case.holds(spark, table)


def test_deletion_vectors_verify_counts_net_rows_and_a_restatement_is_refused(
    spark: Any, tmp_path: Any
) -> None:
    """Another writer's DELETE on a deletion-vector table leaves the batch's file live with a
    deletion vector: ``verify`` must see the lost row (it counted numRecords before), and a
    restatement must not remove the file with a ``remove`` that does not name its vector
    (Delta Spark would keep the file: the old rows beside the new generation's)."""
    table, landing = str(tmp_path / "table"), str(tmp_path / "landing")
    create(spark, table, CASES[0])
    write_order_files(landing, 2, 20)
    source = orders_source(landing)
    plan = plan_for(source, table)
    assert run_load(spark, spec_for(source, table, plan)).rows == 40
    assert audit_table(table).ok
    spark.sql(f"DELETE FROM delta.`{table}` WHERE order_id = 3")
    assert any("deletionVector" in a.get("add", {}) for a in commits(table)[-1])
    report = audit_table(table)
    assert not report.ok
    assert [b.live_rows for b in report.batches] == [39]
    assert {f.kind for f in report.errors} >= {"row_count_mismatch"}, report.findings
    before = log_state(table)
    again = restate(source, table, plan)
    with pytest.raises(BatchRefusedError, match="deletion vector hides 1 row"):
        run_load(spark, spec_for(source, table, again, restate=True))
    assert log_state(table) == before
    assert spark.read.format("delta").load(table).count() == 39


def test_a_restatement_of_an_append_only_table_is_refused_before_staging(spark: Any, tmp_path: Any) -> None:
    table, landing = str(tmp_path / "table"), str(tmp_path / "landing")
    create(spark, table, next(c for c in CASES if c.feature == "appendOnly"))
    write_order_files(landing, 1, 10)
    source = orders_source(landing)
    plan = plan_for(source, table)
    assert run_load(spark, spec_for(source, table, plan)).rows == 10
    staged = sorted(os.listdir(os.path.join(table, DATA_DIR)))
    before = log_state(table)
    again = restate(source, table, plan)
    with pytest.raises(BatchRefusedError, match="append-only"):
        run_load(spark, spec_for(source, table, again, restate=True))
    assert log_state(table) == before
    assert sorted(os.listdir(os.path.join(table, DATA_DIR))) == staged
    batch_dirs = [os.path.join(dp) for dp, dn, _ in os.walk(os.path.join(table, DATA_DIR)) if not dn]
    assert len(batch_dirs) == 1, f"only generation 0's attempt directory: {batch_dirs}"


def test_a_feature_turned_on_after_staging_is_refused_at_the_commit(spark: Any, tmp_path: Any) -> None:
    """The early refusal reads the table before staging; another writer may turn on a feature
    the engine cannot keep while the batch is staged (ALTER TABLE ... enableRowTracking). The
    commit checks again against the snapshot it commits on, and commits nothing."""
    from airflow_eod.core.load_commit import commit_batch
    from tests.support.helpers import land_and_plan, stage_rows

    table = str(tmp_path / "table")
    spark.sql(f"CREATE TABLE delta.`{table}` (seq BIGINT, src STRING) USING delta")
    plan = land_and_plan(table, str(tmp_path / "landing"), "tests.features", 0)
    staged, manifest = stage_rows(table, plan, 0, "files", [1, 2, 3])
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.enableRowTracking' = 'true')")
    before = log_state(table)
    with pytest.raises(UnsupportedTableError, match=r"table feature rowTracking \(new files need"):
        commit_batch(TableRef.parse(table), plan.key, 0, staged, manifest)
    assert log_state(table) == before
    assert spark.read.format("delta").load(table).count() == 0
