"""Which failures spend a task's retries (test_retry_policy.py).

Every load has two retries. ``refused`` writes to a path that is a file, and
``foreign_directory`` to a directory of another system's files: no retry can fix that, so
each must end on its first try, having written nothing there. ``missing_input`` reads a landing
directory that does not exist yet: it may arrive, so every retry is spent.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG

from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

ROOT = os.environ.get("EOD_TEST_RETRY_ROOT", "/nonexistent/retry")
ORDERS = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"

with DAG(
    "eod_retry_policy",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=0)},
) as dag:
    LandingFilesToDeltaOperator(
        task_id="refused",
        landing_path=os.path.join(ROOT, "landing"),
        table_uri=os.path.join(ROOT, "not_a_table.csv"),
        pipeline_id="tests.retry.refused",
        file_format="csv",
        schema=ORDERS,
    )
    LandingFilesToDeltaOperator(
        task_id="foreign_directory",
        landing_path=os.path.join(ROOT, "landing"),
        table_uri=os.path.join(ROOT, "someone_elses"),
        pipeline_id="tests.retry.foreign",
        file_format="csv",
        schema=ORDERS,
    )
    LandingFilesToDeltaOperator(
        task_id="missing_input",
        landing_path=os.path.join(ROOT, "not_landed_yet"),
        table_uri=os.path.join(ROOT, "table"),
        pipeline_id="tests.retry.missing",
        file_format="csv",
        schema=ORDERS,
    )
