"""Interval loads under three timetables (test_guarantee_airflow.py, issue 6 case 3).

``"@daily"`` on the default config (a CronTriggerTimetable) and ``schedule=None`` give every
run a zero-length data interval, which an interval load refuses when the DAG is parsed
(issue 18 item 14): :func:`interval_dag` builds them for the test, which expects the
refusal; ``eod_guarantee_intervals`` (a CronDataIntervalTimetable) gives real daily
intervals and loads.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import DAG

from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator
from tests.support.airflow_compat import CronDataIntervalTimetable

ROOT = os.environ.get("EOD_TEST_IV_LANDING", "/nonexistent/landing")
TABLE = os.environ.get("EOD_TEST_IV_TABLE", "/nonexistent/table")
ORDERS = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"


def interval_dag(dag_id: str, schedule: Any, landing_template: str) -> DAG:
    with DAG(dag_id, schedule=schedule, start_date=datetime(2026, 1, 1, tzinfo=UTC), catchup=False) as dag:
        LandingFilesToDeltaOperator(
            task_id="load",
            landing_path=os.path.join(ROOT, landing_template),
            table_uri=TABLE,
            pipeline_id="tests.intervals",
            file_format="csv",
            schema=ORDERS,
            boundary="interval",
            retries=0,
        )
    return dag


# A timetable with real intervals; the directory is named after the interval's start, which
# is the same for a scheduled run and a manual run of that interval (see docs/intervals.md).
intervals = interval_dag(
    "eod_guarantee_intervals",
    CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    "{{ data_interval_start | ds }}",
)
