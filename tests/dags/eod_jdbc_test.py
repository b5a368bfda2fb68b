"""A DAG that loads a PostgreSQL table through an Airflow connection (test_jdbc.py)."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from airflow.sdk import DAG

from airflow_eod.operators.jdbc_to_delta import JdbcToDeltaOperator

with DAG("eod_jdbc_test", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)) as dag:
    JdbcToDeltaOperator(
        task_id="load",
        jdbc_conn_id="eod_test_pg",
        source_table="orders_dag",
        key_column="id",
        num_partitions=2,
        table_uri=os.environ.get("EOD_TEST_JDBC_TABLE", "/nonexistent/table"),
        pipeline_id="tests.jdbc_dag",
        retries=0,
    )
