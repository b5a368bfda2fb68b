"""Example: load landing files into a Delta table exactly once, on a Spark cluster.

The same load as ``eod_landing_files_example``, in submit mode: the task plans the batch
and asks the table in the Airflow worker, then spark-submits this package's driver
through the ``spark_default`` connection (``SparkSubmitHook``); the driver writes and
commits, and the task asks the table again to decide. A re-run of a batch the table holds
submits nothing.

The docker compose set-up (``docker-compose.yaml``, docs/deployment.md) runs it against
its Spark master and worker. The landing directory and the table must be at the same path
on the Airflow worker and on every Spark node: ``EOD_SUBMIT_LANDING`` and
``EOD_SUBMIT_TABLE`` name them, ``EOD_SPARK_PYTHON`` the Python with airflow-eod
installed on the Spark nodes.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator
from airflow_eod.sensors.delta_batch import DeltaBatchSensor

LANDING = os.environ.get("EOD_SUBMIT_LANDING", "/tmp/airflow-eod-submit/landing")
TABLE = os.environ.get("EOD_SUBMIT_TABLE", "/tmp/airflow-eod-submit/orders")
ORDERS_SCHEMA = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"
# Passed as --conf to spark-submit. The executors' Python must be one where airflow-eod
# (and the very pyspark version of the driver) is installed; one core and 1g leave room on
# the worker for a second application, such as a retry racing a zombie driver.
SPARK_CONF = {
    "spark.pyspark.python": os.environ.get("EOD_SPARK_PYTHON", sys.executable),
    "spark.cores.max": "1",
    "spark.executor.memory": "1g",
    "spark.sql.shuffle.partitions": "4",
}

with DAG(
    dag_id="eod_submit_example",
    description="Landing CSV files -> Delta table on a Spark cluster (spark-submit), exactly once",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=10)},
    tags=["airflow-eod", "example", "spark-submit"],
) as dag:
    load_orders = LandingFilesToDeltaOperator(
        task_id="load_orders",
        execution="submit",
        spark_conn_id="spark_default",
        spark_conf=SPARK_CONF,
        landing_path=LANDING,
        table_uri=TABLE,
        file_format="csv",
        schema=ORDERS_SCHEMA,
        partition_by=["order_date"],
        max_files_per_batch=1000,
    )
    confirm_orders = DeltaBatchSensor(
        task_id="confirm_orders",
        table_uri=TABLE,
        pipeline_id="eod_submit_example.load_orders",
        batch_key="{{ ti.xcom_pull(task_ids='load_orders')['batch_key'] }}",
        poke_interval=5,
        timeout=300,
        mode="reschedule",
    )
    load_orders >> confirm_orders
