"""A mapped interval load over three landing directories (test_guarantee_airflow.py, issue 6
case 4): every mapped instance must load its own directory."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from airflow.sdk import DAG

from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator
from tests.support.airflow_compat import CronDataIntervalTimetable

ROOT = os.environ.get("EOD_TEST_MAPPED_LANDING", "/nonexistent/landing")
ORDERS = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"

with DAG(
    "eod_guarantee_mapped",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
) as dag:
    LandingFilesToDeltaOperator.partial(
        task_id="load",
        table_uri=os.environ.get("EOD_TEST_MAPPED_TABLE", "/nonexistent/table"),
        file_format="csv",
        schema=ORDERS,
        boundary="interval",
        retries=0,
    ).expand(landing_path=[os.path.join(ROOT, f"d{i}") for i in range(3)])
