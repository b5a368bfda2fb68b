"""The `scheduler` tier's interval loads: daily data intervals (CronDataIntervalTimetable).

``eod_sched_clear`` is run once by hand and then cleared; ``eod_sched_backfill`` is
backfilled. Each interval's files sit in ``<landing>/<interval start as YYYY-MM-DD>``,
templated by the interval (not the logical date, see docs/intervals.md). The DAGs end in
January 2026, so the scheduler never starts a run of its own: only the tests' triggers and
backfills run. ``EOD_SCHED_ROOT`` (set by the test for every Airflow process) holds the
landing directories and the tables.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from airflow.sdk import DAG

from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator
from tests.support.airflow_compat import CronDataIntervalTimetable

ROOT = os.environ.get("EOD_SCHED_ROOT", "/nonexistent/eod-sched")
# A short-lived JVM spends most of its CPU in the JIT: C1 only and the serial GC halve a
# small load's CPU time, which counts on the 2 cores that run this tier's parallel tasks.
FAST_JVM = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
ORDERS = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"


def _interval_dag(dag_id: str, name: str) -> DAG:
    with DAG(
        dag_id,
        schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
        start_date=datetime(2026, 1, 1, tzinfo=UTC),
        end_date=datetime(2026, 1, 31, tzinfo=UTC),
        catchup=False,
        max_active_runs=4,
        default_args={"retries": 1, "retry_delay": timedelta(seconds=2)},
        tags=["airflow-eod", "tests"],
    ) as dag:
        LandingFilesToDeltaOperator(
            task_id="load",
            landing_path=os.path.join(ROOT, name, "landing", "{{ data_interval_start | ds }}"),
            table_uri=os.path.join(ROOT, name, "table"),
            file_format="csv",
            schema=ORDERS,
            partition_by=["order_date"],
            spark_conf=FAST_JVM,
            boundary="interval",
        )
    return dag


clear = _interval_dag("eod_sched_clear", "clear")
backfill = _interval_dag("eod_sched_backfill", "backfill")
