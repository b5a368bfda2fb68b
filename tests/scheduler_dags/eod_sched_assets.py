"""The `scheduler` tier's Asset test: a load, and a DAG scheduled on the table it loads.

``eod_sched_asset_load`` loads ``EOD_SCHED_ROOT/assets/landing`` into
``EOD_SCHED_ROOT/assets/table``; the load declares the table as its outlet Asset by itself.
``eod_sched_asset_reader`` is scheduled on that Asset: the scheduler runs it after each load,
and its task returns the extra of the asset events that triggered it (which batch arrived).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import DAG, Asset, task

from airflow_eod.core.table_ref import TableRef
from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

ROOT = os.environ.get("EOD_SCHED_ROOT", "/nonexistent/eod-sched")
TABLE = os.path.join(ROOT, "assets", "table")
ORDERS = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"
FAST_JVM = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}

with DAG(
    "eod_sched_asset_load",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    tags=["airflow-eod", "tests"],
):
    LandingFilesToDeltaOperator(
        task_id="load",
        landing_path=os.path.join(ROOT, "assets", "landing"),
        table_uri=TABLE,
        file_format="csv",
        schema=ORDERS,
        spark_conf=FAST_JVM,
    )

with DAG(
    "eod_sched_asset_reader",
    schedule=[Asset(uri=TableRef.parse(TABLE).asset_uri)],
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    tags=["airflow-eod", "tests"],
):

    @task
    def which_batches(*, triggering_asset_events: Any = None) -> list[dict[str, Any]]:
        """The batches that arrived, as the load put them on its asset events."""
        return [dict(event.extra) for events in triggering_asset_events.values() for event in events]

    which_batches()
