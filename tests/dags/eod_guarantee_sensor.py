"""Sensors fed the key of a load that had nothing to load, and a key of the wrong shape
(test_guarantee_airflow.py, issue 6 case 14)."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG

from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator
from airflow_eod.sensors.delta_batch import DeltaBatchSensor

LANDING = os.environ.get("EOD_TEST_SENSOR_LANDING", "/nonexistent/landing")
TABLE = os.environ.get("EOD_TEST_SENSOR_TABLE", "/nonexistent/table")
START = datetime(2026, 1, 1, tzinfo=UTC)

with DAG("eod_guarantee_sensor_nothing", schedule=None, start_date=START) as nothing:
    load = LandingFilesToDeltaOperator(
        task_id="load",
        landing_path=LANDING,
        table_uri=TABLE,
        pipeline_id="tests.sensor",
        file_format="csv",
        retries=0,
    )
    # Timeouts far above what the test allows: waiting for "None" must not be what ends it.
    for mode in ("poke", "reschedule"):
        load >> DeltaBatchSensor(
            task_id=f"confirm_{mode}",
            table_uri=TABLE,
            pipeline_id="tests.sensor",
            batch_key="{{ ti.xcom_pull(task_ids='load')['batch_key'] }}",
            poke_interval=1,
            timeout=60,
            mode=mode,
            retries=0,
        )

with DAG("eod_guarantee_sensor_garbage", schedule=None, start_date=START) as garbage:
    # Retries are allowed: the failure must not use them, since no retry can fix a key.
    DeltaBatchSensor(
        task_id="confirm",
        table_uri=TABLE,
        pipeline_id="tests.sensor",
        batch_key="2026-11-20",
        poke_interval=1,
        timeout=60,
        retries=2,
        retry_delay=timedelta(seconds=1),
    )
