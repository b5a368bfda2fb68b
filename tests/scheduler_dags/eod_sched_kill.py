"""The `scheduler` tier's kill test: an offset load whose first try hangs in its Spark job.

The test SIGKILLs that try's task process from outside; the real scheduler retries it.
``EOD_SCHED_ROOT`` (set by the test for every Airflow process) holds the landing directory
and the table.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG

from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

ROOT = os.environ.get("EOD_SCHED_ROOT", "/nonexistent/eod-sched")
# A short-lived JVM spends most of its CPU in the JIT: C1 only and the serial GC halve a
# small load's CPU time, which counts on the 2 cores that run this tier's parallel tasks.
FAST_JVM = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
ORDERS = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"

with DAG(
    "eod_sched_kill",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=2)},
    tags=["airflow-eod", "tests"],
) as dag:
    LandingFilesToDeltaOperator(
        task_id="load",
        landing_path=os.path.join(ROOT, "kill", "landing"),
        table_uri=os.path.join(ROOT, "kill", "table"),
        file_format="csv",
        schema=ORDERS,
        partition_by=["order_date"],
        spark_conf=FAST_JVM,
        transform="tests.scheduler_dags.slow_transform:slow_first_try",
    )
