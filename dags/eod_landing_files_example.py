"""Example: load a landing directory of order files into a Delta table exactly once.

Every run loads the files that no earlier run loaded (an offset batch), commits them with
their marker in one Delta commit, and a sensor confirms the batch from the table alone.
Retries, clears and a task killed after its commit never load a file twice.

``EOD_DEMO_LANDING`` and ``EOD_DEMO_TABLE`` choose the directories; ``make demo`` sets them.
The table may be on an object store (``s3://bucket/lake/orders``): ``EOD_DEMO_STORAGE_CONN``
then names the Airflow connection its credentials come from (docs/object-stores.md).
Trigger with ``{"restate": true, "restate_batch_key": "<key>"}`` to re-load a batch on
purpose: it becomes generation + 1, swapped for the old one in one commit. A DAG without
these params does the same with ``{"eod_pipeline": "eod_landing_files_example.load_orders",
"eod_restate": true, "eod_restate_batch_key": "<key>"}``, which every load operator honours.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param

from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator
from airflow_eod.sensors.delta_batch import DeltaBatchSensor

LANDING = os.environ.get("EOD_DEMO_LANDING", "/tmp/airflow-eod-demo/landing")
TABLE = os.environ.get("EOD_DEMO_TABLE", "/tmp/airflow-eod-demo/orders")
STORAGE_CONN = os.environ.get("EOD_DEMO_STORAGE_CONN") or None
ORDERS_SCHEMA = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"

with DAG(
    dag_id="eod_landing_files_example",
    description="Landing CSV files -> Delta table, exactly once",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=1)},
    tags=["airflow-eod", "example"],
    params={
        "restate": Param(False, type="boolean", description="re-load a batch as a new generation"),
        "restate_batch_key": Param(
            "", type="string", description="the batch to restate (airflow-eod status)"
        ),
    },
) as dag:
    load_orders = LandingFilesToDeltaOperator(
        task_id="load_orders",
        landing_path=LANDING,
        table_uri=TABLE,
        storage_conn_id=STORAGE_CONN,
        file_format="csv",
        schema=ORDERS_SCHEMA,
        partition_by=["order_date"],
        max_files_per_batch=1000,
        restate="{{ params.restate }}",
        restate_batch_key="{{ params.restate_batch_key }}",
    )
    confirm_orders = DeltaBatchSensor(
        task_id="confirm_orders",
        table_uri=TABLE,
        storage_conn_id=STORAGE_CONN,
        pipeline_id="eod_landing_files_example.load_orders",
        batch_key="{{ ti.xcom_pull(task_ids='load_orders')['batch_key'] }}",
        poke_interval=1,
        timeout=120,
        mode="reschedule",
    )
    load_orders >> confirm_orders
