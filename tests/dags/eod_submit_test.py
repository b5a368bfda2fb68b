"""DAGs whose loads run in submit mode on the `cluster` tier's Spark standalone master
(test_cluster.py): landing files by interval, and a PostgreSQL table by offsets."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime

from airflow.sdk import DAG

from airflow_eod.operators.jdbc_to_delta import JdbcToDeltaOperator
from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator
from tests.support.airflow_compat import CronDataIntervalTimetable

ORDERS_SCHEMA = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"
# The executors run this interpreter, where airflow-eod is installed, on a one-core slice.
CLUSTER_CONF = {
    "spark.pyspark.python": sys.executable,
    "spark.executor.memory": "1g",
    "spark.cores.max": "1",
    "spark.sql.shuffle.partitions": "2",
}

with DAG(
    "eod_submit_landing_test",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
) as landing_dag:
    LandingFilesToDeltaOperator(
        task_id="load",
        execution="submit",
        spark_conn_id="eod_spark_test",
        spark_conf=CLUSTER_CONF,
        landing_path=os.path.join(os.environ.get("EOD_TEST_LANDING", "/nonexistent"), "{{ ds }}"),
        boundary="interval",
        table_uri=os.environ.get("EOD_TEST_TABLE", "/nonexistent/table"),
        pipeline_id="tests.submit_landing",
        file_format="csv",
        schema=ORDERS_SCHEMA,
        retries=0,
    )

with DAG("eod_submit_jdbc_test", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)) as jdbc_dag:
    JdbcToDeltaOperator(
        task_id="load",
        execution="submit",
        spark_conn_id="eod_spark_test",
        spark_conf=CLUSTER_CONF,
        jars="/usr/share/java/postgresql.jar",
        jdbc_conn_id="eod_test_pg",
        source_table="orders_submit",
        key_column="id",
        num_partitions=2,
        table_uri=os.environ.get("EOD_TEST_JDBC_TABLE", "/nonexistent/table"),
        pipeline_id="tests.submit_jdbc",
        retries=0,
    )
