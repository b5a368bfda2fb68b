"""Example: load Kafka topics into a Delta table exactly once (docs/sources/kafka.md).

Each run freezes, for every partition of the topics, the offset range from where the last
committed batch ended to the partition's end (at most ``EOD_KAFKA_MAX_RECORDS`` offsets per
batch), reads exactly those records with Spark's batch ``kafka`` reader, and commits them
with their marker in one Delta commit; ``catch_up`` loads batch after batch until the topics
are drained. A retry after a crash, before or after the commit, reads the same frozen ranges
and never lands a record twice. Nothing is committed to Kafka's consumer groups: the table's
markers and its plan log are the record. A sensor confirms the last batch from the table.

The brokers and the security settings come from an Airflow ``kafka`` connection
(``EOD_KAFKA_CONN``, default ``kafka_default``): its extra is a librdkafka configuration such
as ``{"bootstrap.servers": "broker:9092"}``, plus ``security.protocol``/``sasl.mechanism`` with
the SASL user and password as the connection's login and password. ``EOD_KAFKA_TOPICS``
(comma-separated) and ``EOD_KAFKA_TABLE`` choose the topics and the table. The workers need
Spark's Kafka connector jars: ``make jars-kafka``.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_eod.operators.kafka_to_delta import KafkaToDeltaOperator
from airflow_eod.sensors.delta_batch import DeltaBatchSensor

CONN = os.environ.get("EOD_KAFKA_CONN", "kafka_default")
TOPICS = [t.strip() for t in os.environ.get("EOD_KAFKA_TOPICS", "orders").split(",") if t.strip()]
TABLE = os.environ.get("EOD_KAFKA_TABLE", "/tmp/airflow-eod-demo/kafka-orders")
MAX_RECORDS = int(os.environ.get("EOD_KAFKA_MAX_RECORDS", "100000"))

with DAG(
    dag_id="eod_kafka_example",
    description="Kafka topics -> Delta table, exactly once, in frozen offset ranges",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=1)},
    tags=["airflow-eod", "example", "kafka"],
) as dag:
    load_events = KafkaToDeltaOperator(
        task_id="load_events",
        kafka_config_id=CONN,
        topics=TOPICS,
        table_uri=TABLE,
        max_records_per_batch=MAX_RECORDS,
        catch_up=True,
    )
    confirm_events = DeltaBatchSensor(
        task_id="confirm_events",
        table_uri=TABLE,
        pipeline_id="eod_kafka_example.load_events",
        batch_key="{{ ti.xcom_pull(task_ids='load_events')['batch_key'] }}",
        poke_interval=1,
        timeout=120,
        mode="reschedule",
    )
    load_events >> confirm_events
