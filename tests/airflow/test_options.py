"""Options checked when the DAG is parsed: enumerated options, the schema DDL (parsed
without a JVM, and held to Spark's own parser), the table URI's scheme and the partition
columns. A typo is a DAG import error, not three failed tries."""

from __future__ import annotations

import os
import textwrap
from typing import Any

import pytest

from airflow_eod.core.ddl_schema import ddl_columns
from airflow_eod.core.errors import ConfigurationError
from airflow_eod.operators.jdbc_to_delta import JdbcToDeltaOperator
from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

ORDERS = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"
VALID = [
    ORDERS,
    "id BIGINT NOT NULL, name STRING COMMENT 'who, and why'",
    "`odd name` INT, `with``tick` STRING",
    "tags ARRAY<STRING>, attrs MAP<STRING, ARRAY<INT>>, s STRUCT<a: INT, b: DECIMAL(5, 1)>",
    "a BOOLEAN, b TINYINT, c SMALLINT, d FLOAT, e DOUBLE, f BINARY, g TIMESTAMP_NTZ, h VARCHAR(10)",
    "d INTERVAL DAY TO SECOND",
]
INVALID = [
    "id INTT",
    "id INT,",
    "id INT, name",
    "tags ARRAY<STRING",
    "m MAP<STRING>",
    "id INT, ID STRING",
    "amount DECIMAL(10,",
]


@pytest.mark.parametrize("ddl", VALID)
def test_a_schema_spark_parses_is_accepted(ddl: str) -> None:
    assert ddl_columns("schema", ddl)


@pytest.mark.parametrize("ddl", INVALID)
def test_a_schema_that_does_not_parse_is_refused_naming_it(ddl: str) -> None:
    with pytest.raises(ConfigurationError, match="is not a Spark DDL schema"):
        ddl_columns("schema", ddl)


@pytest.mark.spark
def test_the_parser_agrees_with_sparks_own(spark: Any) -> None:
    from pyspark.sql.types import DataType, _parse_datatype_string

    # Spark 3.5 (tests/spark_versions.sh) has no DataType.fromDDL, only the parser it wraps.
    from_ddl = getattr(DataType, "fromDDL", None) or _parse_datatype_string
    for ddl in VALID:
        parsed = from_ddl(ddl)
        assert [f.name for f in parsed.fields] == ddl_columns("schema", ddl), ddl
    for ddl in INVALID[:-2]:  # Spark takes duplicate names and reads DECIMAL(10, loosely
        with pytest.raises(Exception):  # noqa: B017 - Spark's parse error, any of its types
            from_ddl(ddl)


def _landing(**kwargs: Any) -> LandingFilesToDeltaOperator:
    args: dict[str, Any] = {
        "task_id": "load",
        "landing_path": "/landing",
        "table_uri": "/lake/orders",
        "schema": ORDERS,
        **kwargs,
    }
    return LandingFilesToDeltaOperator(**args)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"engine": "deltars"}, "engine 'deltars' is not one of"),
        ({"schema_drift": "add_column"}, "schema_drift 'add_column' is not one of"),
        ({"execution": "cluster"}, "execution 'cluster' is not one of"),
        ({"file_format": "CSV"}, "file_format 'CSV' is not one of"),
        ({"boundary": "intervals"}, "boundary 'intervals' is not one of"),
        ({"schema": "order_id INTEGR"}, "is not a Spark DDL schema"),
        ({"partition_by": ["order_day"]}, "partition_by ['order_day'] are not columns"),
        ({"table_uri": "wasb://c@a.blob.core.windows.net/o"}, "table_uri: table URI 'wasb://"),
        ({"quarantine_table_uri": "gs://b"}, "quarantine_table_uri: table URI"),
        ({"table_uri": "/lake/100%"}, "holds a '%'"),
    ],
)
def test_a_wrong_option_fails_when_the_operator_is_made(kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        _landing(**kwargs)
    assert says in str(err.value)


def test_templated_values_and_a_transform_are_left_for_run_time() -> None:
    templated = _landing(table_uri="{{ params.table }}", schema="{{ params.schema }}", partition_by=["x"])
    assert (templated.table_uri, templated.schema) == ("{{ params.table }}", "{{ params.schema }}")
    derived = _landing(partition_by=["derived"], transform="mypkg.mod:fn")  # the transform may add it
    assert derived.partition_by == ["derived"]
    assert _landing(partition_by=["ORDER_DATE"]).partition_by == ["ORDER_DATE"]  # case-insensitive


def test_the_jdbc_operator_checks_its_options_early() -> None:
    base = {"task_id": "t", "jdbc_conn_id": "pg", "source_table": "orders", "key_column": "id"}
    with pytest.raises(ConfigurationError, match="key_type 'int' is not one of"):
        JdbcToDeltaOperator(table_uri="/lake/t", key_type="int", **base)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="needs a timestamp key"):
        JdbcToDeltaOperator(table_uri="/lake/t", boundary="interval", **base)


@pytest.mark.airflow
def test_a_typo_is_an_import_error_of_the_dag(airflow_db: str, tmp_path: Any) -> None:
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag  # type: ignore[no-redef]

    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "typo.py").write_text(
        textwrap.dedent(
            """
            from datetime import datetime, timezone
            from airflow.sdk import DAG
            from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

            with DAG("eod_typo", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
                LandingFilesToDeltaOperator(
                    task_id="load", landing_path="/landing", table_uri="/lake/t", file_format="cvs"
                )
            """
        )
    )
    bag = DagBag(dag_folder=str(dags), safe_mode=False)
    assert "eod_typo" not in bag.dags
    ((where, error),) = bag.import_errors.items()
    assert os.path.basename(where) == "typo.py"
    assert "file_format 'cvs' is not one of ('csv', 'json', 'parquet')" in error
