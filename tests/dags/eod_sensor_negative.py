"""A DAG whose sensor waits for a batch that nobody loads (used by test_airflow.py)."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from airflow.sdk import DAG

from airflow_eod.sensors.delta_batch import DeltaBatchSensor

with DAG("eod_sensor_negative", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)) as dag:
    for mode in ("poke", "reschedule"):
        DeltaBatchSensor(
            task_id=f"wait_{mode}",
            table_uri=os.environ.get("EOD_TEST_TABLE", "/nonexistent/table"),
            pipeline_id="tests.nothing",
            batch_key="o-00000000-000000000000",
            poke_interval=1,
            timeout=2,
            mode=mode,
            retries=0,
        )
