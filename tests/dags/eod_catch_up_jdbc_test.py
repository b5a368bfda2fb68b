"""A JDBC load that catches up in one task (tests/airflow/test_catch_up_and_refreeze.py)."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from airflow.sdk import DAG

from airflow_eod.operators.jdbc_to_delta import JdbcToDeltaOperator

with DAG("eod_catch_up_jdbc_test", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)) as dag:
    JdbcToDeltaOperator(
        task_id="load",
        jdbc_conn_id="eod_test_pg",
        source_table=os.environ.get("EOD_TEST_CU_SOURCE", "orders_cu"),
        key_column="id",
        max_rows_per_batch=1000,
        table_uri=os.environ.get("EOD_TEST_CU_TABLE", "/nonexistent/table"),
        pipeline_id="cu.jdbc",
        catch_up=True,
        retries=0,
    )
