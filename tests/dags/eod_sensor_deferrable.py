"""Deferrable sensors under ``dag.test()`` (used by test_sensor_deferrable.py): one that waits
for a batch the test commits while it is deferred, and two whose batch never comes, one
failing on its timeout and one skipped by ``soft_fail``."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG

from airflow_eod.sensors.delta_batch import DeltaBatchSensor

TABLE = os.environ.get("EOD_TEST_DEFER_TABLE", "/nonexistent/table")
PIPELINE = os.environ.get("EOD_TEST_DEFER_PIPELINE", "tests.defer")
KEY = os.environ.get("EOD_TEST_DEFER_KEY", "o-00000000-000000000000")
START = datetime(2026, 1, 1, tzinfo=UTC)

with DAG("eod_sensor_deferrable_wait", schedule=None, start_date=START) as wait:
    DeltaBatchSensor(
        task_id="confirm",
        table_uri=TABLE,
        pipeline_id=PIPELINE,
        batch_key=KEY,
        deferrable=True,
        poke_interval=1,
        timeout=120,
        retries=0,
    )

with DAG("eod_sensor_deferrable_timeout", schedule=None, start_date=START) as timeout:
    # Retries are allowed: a timeout must not use them (a retry would wait the same way).
    DeltaBatchSensor(
        task_id="wait",
        table_uri=TABLE,
        pipeline_id=PIPELINE,
        batch_key=KEY,
        deferrable=True,
        poke_interval=1,
        timeout=3,
        retries=2,
        retry_delay=timedelta(seconds=1),
    )
    DeltaBatchSensor(
        task_id="wait_soft",
        table_uri=TABLE,
        pipeline_id=PIPELINE,
        batch_key=KEY,
        deferrable=True,
        poke_interval=1,
        timeout=3,
        soft_fail=True,
        retries=0,
    )
