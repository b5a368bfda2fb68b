"""DAGs whose loads run in submit mode on the `yarn` tier's mini YARN cluster
(tests/yarn/): landing files by interval and a PostgreSQL table by offsets, each in client
and in cluster deploy mode (one Spark connection per mode, from the test's environment)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

from airflow.sdk import DAG

from airflow_eod.operators.jdbc_to_delta import JdbcToDeltaOperator
from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator
from tests.support.airflow_compat import CronDataIntervalTimetable

ORDERS_SCHEMA = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"
# The mini cluster's settings (tests/support/mini_yarn.py MiniYarn.spark_conf) and the test's.
YARN_CONF: dict[str, str] = json.loads(os.environ.get("EOD_TEST_YARN_CONF", "{}"))
TABLE = os.environ.get("EOD_TEST_TABLE", "/nonexistent/table")
JDBC_TABLE = os.environ.get("EOD_TEST_JDBC_TABLE", "/nonexistent/table")
LANDING = os.environ.get("EOD_TEST_LANDING", "/nonexistent")
dags: dict[str, DAG] = {}

for mode in ("client", "cluster"):
    with DAG(
        f"eod_yarn_landing_{mode}",
        schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
        start_date=datetime(2026, 1, 1, tzinfo=UTC),
        catchup=False,
    ) as dag:
        LandingFilesToDeltaOperator(
            task_id="load",
            execution="submit",
            spark_conn_id=f"eod_yarn_{mode}",
            spark_conf=YARN_CONF,
            landing_path=os.path.join(LANDING, "{{ ds }}"),
            boundary="interval",
            table_uri=TABLE,
            pipeline_id="tests.yarn_landing",
            file_format="csv",
            schema=ORDERS_SCHEMA,
            engine=os.environ.get("EOD_TEST_ENGINE", "delta-rs"),
            retries=0,
        )
    dags[f"landing_{mode}"] = dag

    with DAG(f"eod_yarn_jdbc_{mode}", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)) as dag:
        JdbcToDeltaOperator(
            task_id="load",
            execution="submit",
            spark_conn_id=f"eod_yarn_{mode}",
            spark_conf=YARN_CONF,
            jars="/usr/share/java/postgresql.jar",
            jdbc_conn_id="eod_test_pg",
            source_table="orders_yarn",
            key_column="id",
            num_partitions=2,
            table_uri=JDBC_TABLE,
            pipeline_id="tests.yarn_jdbc",
            retries=0,
        )
    dags[f"jdbc_{mode}"] = dag
