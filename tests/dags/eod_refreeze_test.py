"""A DAG with two load tasks and no restate params (tests/airflow/test_catch_up_and_refreeze.py): the
way out of a changed input must work through ``dag_run.conf`` alone, and only for the
pipeline the conf names."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from airflow.sdk import DAG

from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

ORDERS_DDL = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"

with DAG("eod_refreeze_test", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)) as dag:
    for name in ("a", "b"):
        LandingFilesToDeltaOperator(
            task_id=f"load_{name}",
            landing_path=os.environ.get(f"EOD_TEST_RF_LANDING_{name.upper()}", "/nonexistent/landing"),
            table_uri=os.environ.get(f"EOD_TEST_RF_TABLE_{name.upper()}", "/nonexistent/table"),
            pipeline_id=f"rf.{name}",
            file_format="csv",
            schema=ORDERS_DDL,
            retries=0,
        )
