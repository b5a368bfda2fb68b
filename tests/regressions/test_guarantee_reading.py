"""Issue 6, the reading holes: a batch reads exactly its planned files (case 1), CSV columns
are matched by header name (case 7), a column the schema lacks never vanishes (case 8), and
a schema mistake does not read as bad data (case 16).

Every load goes through ``run_load`` and the table is checked row by row afterwards.
"""

from __future__ import annotations

import gzip
import json
import os
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import BatchError, MalformedInputError, SchemaMismatchError
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.compare import compare_rows, read_delta_rows
from airflow_eod.examples.sample_data import ORDERS_COLUMNS, write_order_files
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import ORDERS_DDL, check, orders_source, plan_for, spec_for

pytestmark = [pytest.mark.guarantee, pytest.mark.spark, pytest.mark.badinput]

PEOPLE_DDL = "id INT, first_name STRING, last_name STRING"
PEOPLE = ["id", "first_name", "last_name"]


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def _orders_csv(path: str, first_id: int, rows: int) -> None:
    """Order rows that the checker can read back (the sample data's columns)."""
    lines = [",".join(ORDERS_COLUMNS)]
    for i in range(first_id, first_id + rows):
        lines.append(
            f"{i},customer-{i % 7:02d},{i % 1000}.{i % 100:02d},2026-11-01,2026-11-01T10:00:00.{i:06d}Z"
        )
    _write(path, "\n".join(lines) + "\n")


def _version(table: str) -> int | None:
    t = open_table(TableRef.parse(table))
    return None if t is None else t.version()


# -- case 1: glob characters in file names ---------------------------------------------------
def test_a_file_named_like_a_glob_and_its_lookalike_each_load_once(
    spark: Any, landing: str, table: str
) -> None:
    _orders_csv(os.path.join(landing, "x1.csv"), 1, 5)
    _orders_csv(os.path.join(landing, "x[1].csv"), 101, 7)
    source = orders_source(landing)
    plan = plan_for(source, table)
    result = run_load(spark, spec_for(source, table, plan))
    assert result.outcome == "committed" and result.rows == 12
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 12, cmp.describe()


ODD_NAMES = [
    "x1.csv",
    "x[1].csv",
    "a:b.csv",
    "p 50%.csv",
    "é#?.csv",
    "q%3A.csv",
    "a{b,c}.csv",
    "*.csv",
    "a\\b.csv",
    "x?.csv",
]


def test_every_odd_file_name_loads_exactly_once(spark: Any, landing: str, table: str) -> None:
    for n, name in enumerate(ODD_NAMES):
        _orders_csv(os.path.join(landing, name), 1 + 100 * n, 3)
    source = orders_source(landing)
    plan = plan_for(source, table)
    assert len(plan.inputs) == len(ODD_NAMES)
    result = run_load(spark, spec_for(source, table, plan))
    assert result.outcome == "committed" and result.rows == 3 * len(ODD_NAMES)
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 3 * len(ODD_NAMES), cmp.describe()
    again = run_load(spark, spec_for(source, table, plan, try_number=2))
    assert again.outcome == "already_committed"


def test_a_read_of_other_files_than_planned_fails_the_batch(
    spark: Any, landing: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_eod.spark import landing_paths

    _orders_csv(os.path.join(landing, "x1.csv"), 1, 5)
    _orders_csv(os.path.join(landing, "x[1].csv"), 101, 7)
    source = orders_source(landing)
    plan = plan_for(source, table)
    # Hand Spark the raw paths, as main did: the check after the read must catch it.
    monkeypatch.setattr(landing_paths, "spark_path", lambda path: f"file://{path}")
    with pytest.raises(BatchError) as err:
        run_load(spark, spec_for(source, table, plan))
    text = str(err.value)
    assert text.startswith(f"batch {plan.key.label}: Spark resolved other files than the batch's plan holds")
    assert f"planned but not read: {os.path.join(landing, 'x[1].csv')}" in text
    assert f"read more than once: {os.path.join(landing, 'x1.csv')}" in text
    assert "nothing was committed" in text
    assert _version(table) is None and not ask(TableRef.parse(table), plan.key).committed


def test_the_resolved_files_check_compares_multisets() -> None:
    from airflow_eod.spark.landing_paths import check_resolved

    check_resolved("p/b", ["/l/a.csv", "/l/b.csv"], ["/l/b.csv", "/l//a.csv"])
    with pytest.raises(BatchError, match=r"read but not planned: /l/c\.csv"):
        check_resolved("p/b", ["/l/a.csv"], ["/l/a.csv", "/l/c.csv"])
    with pytest.raises(BatchError, match=r"read more than once: /l/a\.csv"):
        check_resolved("p/b", ["/l/a.csv", "/l/b.csv"], ["/l/a.csv", "/l/a.csv", "/l/b.csv"])


# -- case 7: CSV columns by header name -----------------------------------------------------
def test_csv_columns_are_matched_by_header_name_not_position(spark: Any, landing: str, table: str) -> None:
    _write(os.path.join(landing, "a.csv"), "id,first_name,last_name\n1,Ada,Lovelace\n")
    _write(os.path.join(landing, "b.csv"), "id,last_name,first_name\n2,Hopper,Grace\n4,Liskov,Barbara\n")
    _write(os.path.join(landing, "c.csv"), "LAST_NAME,Id,First_Name\nTuring,3,Alan\n")
    source = LandingFilesSource(path=landing, file_format="csv", schema=PEOPLE_DDL)
    result = run_load(spark, spec_for(source, table, plan_for(source, table)))
    assert result.outcome == "committed" and result.rows == 4
    want = [(1, "Ada", "Lovelace"), (2, "Grace", "Hopper"), (3, "Alan", "Turing"), (4, "Barbara", "Liskov")]
    cmp = compare_rows(want, read_delta_rows(table, PEOPLE))
    assert cmp.exact, cmp.describe()
    assert [f["name"] for f in json.loads(DeltaTable(table).schema().to_json())["fields"]] == PEOPLE


def test_csv_headers_are_read_with_the_reader_options(spark: Any, landing: str, table: str) -> None:
    _write(os.path.join(landing, "a.csv"), '"id";"first_name";"last_name"\n1;"Ada";"Lovelace"\n')
    with gzip.open(os.path.join(landing, "b.csv.gz"), "wt", encoding="utf-8") as fh:
        fh.write('"last_name";"id";"first_name"\n"Hopper";2;"Grace"\n')
    source = LandingFilesSource(path=landing, file_format="csv", schema=PEOPLE_DDL, read_options={"sep": ";"})
    run_load(spark, spec_for(source, table, plan_for(source, table)))
    cmp = compare_rows([(1, "Ada", "Lovelace"), (2, "Grace", "Hopper")], read_delta_rows(table, PEOPLE))
    assert cmp.exact, cmp.describe()


def test_a_csv_file_lacking_a_declared_column_fails_naming_file_and_column(
    spark: Any, landing: str, table: str
) -> None:
    _write(os.path.join(landing, "a.csv"), "id,first_name,last_name\n1,Ada,Lovelace\n")
    _write(os.path.join(landing, "b.csv"), "id,first_name\n2,Grace\n")
    source = LandingFilesSource(path=landing, file_format="csv", schema=PEOPLE_DDL)
    plan = plan_for(source, table)
    with pytest.raises(SchemaMismatchError) as err:
        run_load(spark, spec_for(source, table, plan))
    text = str(err.value)
    assert text.startswith(f"batch {plan.key.label}: the CSV headers do not match the schema")
    assert f"{os.path.join(landing, 'b.csv')} lacks the declared column(s) last_name" in text
    assert "nothing was committed" in text and "a.csv" not in text
    assert _version(table) is None


# -- case 8: columns the schema lacks -------------------------------------------------------
def _drift_case(
    spark: Any,
    landing: str,
    table: str,
    source: LandingFilesSource,
    write_new: Any,
    new_file: str,
    column: str,
) -> tuple[str, Any]:
    """Load a first batch, then a batch whose ``new_file`` carries ``column``: the default
    fails naming both, and ``add_columns`` adds it. Returns the failure's text and the
    second result."""
    run_load(spark, spec_for(source, table, plan_for(source, table, run="r0")))
    version = DeltaTable(table).version()
    write_new()
    plan = plan_for(source, table, run="r1")
    with pytest.raises(SchemaMismatchError) as err:
        run_load(spark, spec_for(source, table, plan))
    text = str(err.value)
    assert text.startswith(f"batch {plan.key.label}:") and "nothing was committed" in text
    assert os.path.join(landing, new_file) in text and column in text and "schema_drift='add_columns'" in text
    assert DeltaTable(table).version() == version and not ask(TableRef.parse(table), plan.key).committed
    result = run_load(spark, spec_for(source, table, plan, schema_drift="add_columns"))
    assert result.outcome == "committed"
    return text, result


def test_a_new_json_field_fails_by_default_and_is_added_on_request(
    spark: Any, landing: str, table: str
) -> None:
    source = LandingFilesSource(path=landing, file_format="json", schema="id INT, name STRING")
    _write(os.path.join(landing, "a.json"), '{"id": 1, "name": "a"}\n')

    def new() -> None:
        _write(
            os.path.join(landing, "b.json"),
            '{"id": 2, "name": "b", "country": "NL"}\n{"id": 3, "name": "c"}\n',
        )

    text, _ = _drift_case(spark, landing, table, source, new, "b.json", "country")
    assert "field country (string)" in text
    cmp = compare_rows(
        [(1, "a", None), (2, "b", "NL"), (3, "c", None)], read_delta_rows(table, ["id", "name", "country"])
    )
    assert cmp.exact, cmp.describe()


def test_a_new_csv_column_fails_by_default_and_is_added_as_a_string(
    spark: Any, landing: str, table: str
) -> None:
    source = LandingFilesSource(path=landing, file_format="csv", schema="id INT, name STRING")
    _write(os.path.join(landing, "a.csv"), "id,name\n1,a\n")

    def new() -> None:
        _write(os.path.join(landing, "b.csv"), "id,country,name\n2,NL,b\n")
        _write(os.path.join(landing, "c.csv"), "name,id\nc,3\n")

    _drift_case(spark, landing, table, source, new, "b.csv", "country")
    cmp = compare_rows(
        [(1, "a", None), (2, "b", "NL"), (3, "c", None)], read_delta_rows(table, ["id", "name", "country"])
    )
    assert cmp.exact, cmp.describe()
    fields = {f["name"]: f["type"] for f in json.loads(DeltaTable(table).schema().to_json())["fields"]}
    assert fields == {"id": "integer", "name": "string", "country": "string"}


def test_a_new_parquet_column_with_a_declared_schema_fails_by_default_and_is_added_on_request(
    spark: Any, landing: str, table: str
) -> None:
    source = LandingFilesSource(path=landing, file_format="parquet", schema="id BIGINT, v STRING")
    pq.write_table(
        pa.table({"id": pa.array([1], pa.int64()), "v": ["a"]}), os.path.join(landing, "a.parquet")
    )

    def new() -> None:
        body = pa.table({"id": pa.array([2], pa.int64()), "v": ["b"], "extra": [1.5]})
        pq.write_table(body, os.path.join(landing, "b.parquet"))

    text, _ = _drift_case(spark, landing, table, source, new, "b.parquet", "extra")
    assert "column extra (double)" in text
    cmp = compare_rows([(1, "a", None), (2, "b", 1.5)], read_delta_rows(table, ["id", "v", "extra"]))
    assert cmp.exact, cmp.describe()


def test_parquet_files_without_a_schema_keep_every_files_columns(
    spark: Any, landing: str, table: str
) -> None:
    pq.write_table(
        pa.table({"id": pa.array([1], pa.int64()), "v": ["a"]}), os.path.join(landing, "a.parquet")
    )
    body = pa.table({"id": pa.array([2], pa.int64()), "v": ["b"], "extra": [1.5]})
    pq.write_table(body, os.path.join(landing, "b.parquet"))
    source = LandingFilesSource(path=landing, file_format="parquet")
    run_load(spark, spec_for(source, table, plan_for(source, table)))
    cmp = compare_rows([(1, "a", None), (2, "b", 1.5)], read_delta_rows(table, ["id", "v", "extra"]))
    assert cmp.exact, cmp.describe()


# -- case 16: a schema mistake reads as bad data ----------------------------------------------
def _malformed(spark: Any, source: LandingFilesSource, table: str) -> tuple[str, str]:
    plan = plan_for(source, table)
    with pytest.raises(MalformedInputError) as err:
        run_load(spark, spec_for(source, table, plan))
    assert _version(table) is None and not ask(TableRef.parse(table), plan.key).committed
    return str(err.value), plan.key.label


def test_a_wrong_integer_type_names_the_column_and_blames_the_schema(
    spark: Any, landing: str, table: str
) -> None:
    write_order_files(landing, 1, 30)
    source = LandingFilesSource(
        path=landing, file_format="csv", schema=ORDERS_DDL.replace("amount DECIMAL(10,2)", "amount INT")
    )
    text, label = _malformed(spark, source, table)
    assert text.startswith(f"batch {label}: 30 malformed record(s)")
    assert "orders-000001-0000.csv: 30" in text and "nothing was committed" in text
    assert "the values that do not fit are in column(s) amount (declared INT; 20 record(s), e.g. '" in text
    assert "Every record of the batch is malformed, so the schema is probably wrong" in text
    assert "check the declared type of amount INT" in text
    assert "Sample record(s): orders-000001-0000.csv: '1,customer-" in text


def test_a_double_declared_for_european_decimal_text_names_the_column(
    spark: Any, landing: str, table: str
) -> None:
    _write(os.path.join(landing, "eu.csv"), 'id,amount\n1,"1.234,50"\n2,"7,10"\n')
    source = LandingFilesSource(path=landing, file_format="csv", schema="id INT, amount DOUBLE")
    text, label = _malformed(spark, source, table)
    assert text.startswith(f"batch {label}: 2 malformed record(s)") and "eu.csv: 2" in text
    assert "amount (declared DOUBLE; 2 record(s), e.g. '1.234,50')" in text
    assert "schema is probably wrong" in text and "check the declared type of amount DOUBLE" in text
    assert "Sample record(s): eu.csv: '1,\"1.234,50\"'" in text


def test_a_few_bad_values_name_the_column_without_blaming_the_schema(
    spark: Any, landing: str, table: str
) -> None:
    write_order_files(landing, 1, 10)
    _write(
        os.path.join(landing, "z-bad.csv"),
        ",".join(ORDERS_COLUMNS)
        + "\n100,x,1.00,not-a-date,2026-11-01T00:00:00Z\n101,y,2.00,2026-11-01,never\n",
    )
    text, label = _malformed(spark, orders_source(landing), table)
    assert text.startswith(f"batch {label}: 2 malformed record(s)") and "z-bad.csv: 2" in text
    assert "order_date (declared DATE; 1 record(s), e.g. 'not-a-date')" in text
    assert "ordered_at (declared TIMESTAMP; 1 record(s), e.g. 'never')" in text
    assert "probably wrong" not in text


def test_a_wrong_type_in_json_names_the_column(spark: Any, landing: str, table: str) -> None:
    _write(os.path.join(landing, "a.json"), '{"id": 1, "amount": 12.34}\n{"id": 2, "amount": 5.5}\n')
    source = LandingFilesSource(path=landing, file_format="json", schema="id INT, amount INT")
    text, label = _malformed(spark, source, table)
    assert text.startswith(f"batch {label}: 2 malformed record(s)") and "a.json: 2" in text
    assert "amount (declared INT; 2 record(s), e.g. '12.34')" in text and "schema is probably wrong" in text


def test_a_bad_value_in_a_reordered_csv_names_the_right_column(spark: Any, landing: str, table: str) -> None:
    _write(os.path.join(landing, "a.csv"), "id,amount,day\n1,1.50,2026-11-01\n")
    _write(os.path.join(landing, "b.csv"), "day,amount,id\n2026-11-02,abc,2\n")
    source = LandingFilesSource(
        path=landing, file_format="csv", schema="id INT, amount DECIMAL(10,2), day DATE"
    )
    text, _ = _malformed(spark, source, table)
    assert "amount (declared DECIMAL(10,2); 1 record(s), e.g. 'abc')" in text and "day (declared" not in text
    assert "probably wrong" not in text


@pytest.mark.parametrize(
    ("value", "type_name", "text", "fits"),
    [
        ("12", "int", True, True),
        ("12.34", "int", True, False),
        (" 12", "int", True, False),
        ("2147483648", "int", True, False),
        ("2147483648", "bigint", True, True),
        ("128", "tinyint", True, False),
        ("1.5", "double", True, True),
        ("NaN", "double", True, True),
        ("1.234,50", "double", True, False),
        ("12.345", "decimal(10,2)", True, True),
        ("1,234.50", "decimal(10,2)", True, True),
        ("123456789.1", "decimal(10,2)", True, False),
        ("abc", "decimal(10,2)", True, False),
        ("2026-11-01", "date", True, True),
        ("2026-13-01", "date", True, False),
        ("01/11/2026", "date", True, False),
        ("2026-11-01T10:00:00.123Z", "timestamp", True, True),
        ("2026-11-01 10:00:00", "timestamp", True, True),
        ("yesterday", "timestamp", True, False),
        ("TRUE", "boolean", True, True),
        ("yes", "boolean", True, False),
        ("anything", "string", True, True),
        (Decimal("12.34"), "int", False, False),
        (12, "int", False, True),
        ("12", "int", False, False),
        (True, "int", False, False),
        (Decimal("12.34"), "decimal(4,2)", False, True),
        (Decimal("123.4"), "decimal(4,2)", False, False),
        ("Infinity", "double", False, True),
        ({"a": 1}, "string", False, True),
    ],
)
def test_values_are_judged_as_spark_reads_them(value: Any, type_name: str, text: bool, fits: bool) -> None:
    from airflow_eod.spark.bad_records import value_fits

    assert value_fits(value, type_name, {}, text=text) is fits


@pytest.mark.parametrize("drift", ["fail", "add_columns"])
def test_nested_json_fields_the_schema_lacks_fail_the_batch(
    spark: Any, landing: str, table: str, drift: str
) -> None:
    """A declared struct reads only its declared fields; the others vanished without a word."""
    source = LandingFilesSource(
        path=landing,
        file_format="json",
        schema="id INT, addr STRUCT<city: STRING>, items ARRAY<STRUCT<sku: STRING>>",
    )
    _write(
        os.path.join(landing, "a.json"),
        '{"id": 1, "addr": {"city": "X", "zip": "123"}, "items": [{"sku": "s", "qty": 2}]}\n',
    )
    plan = plan_for(source, table)
    with pytest.raises(SchemaMismatchError, match=r"nested fields .*addr\.zip.*items\[\]\.qty"):
        run_load(spark, spec_for(source, table, plan, schema_drift=drift))
    assert _version(table) is None


def test_a_parquet_file_lacking_a_declared_column_fails_naming_file_and_column(
    spark: Any, landing: str, table: str
) -> None:
    pq.write_table(
        pa.table({"id": pa.array([1], pa.int32()), "amount": [1.5]}), os.path.join(landing, "a.parquet")
    )
    pq.write_table(pa.table({"id": pa.array([2], pa.int32())}), os.path.join(landing, "b.parquet"))
    source = LandingFilesSource(path=landing, file_format="parquet", schema="id INT, amount DOUBLE")
    plan = plan_for(source, table)
    with pytest.raises(SchemaMismatchError, match=r"b\.parquet lacks column amount"):
        run_load(spark, spec_for(source, table, plan))
    assert _version(table) is None
