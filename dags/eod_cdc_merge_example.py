"""Example: merge change-data files into a Delta table exactly once (``write_mode="merge"``).

An upstream system lands CSV files of changes, one line per change: the business key
``id``, the row's columns, a log sequence number ``seq`` that grows with every change, and
``op`` (``I``, ``U`` or ``D``). Each run merges the files no earlier run loaded, batch after
batch (``catch_up``), into a table that holds one row per ``id``: the change with the
greatest ``seq`` wins, within a batch and against the table, so a retry, a replay or an
older file loaded late never writes an old row over a newer one. A delete stays in the
table as a tombstone (the ``D`` row itself; read the table with ``WHERE NOT (op = 'D')``),
so that an older insert of the key loaded later does not bring it back. Each batch is one
Delta commit with its marker: a retry after a crash, before or after that commit, merges
nothing twice. Records that do not parse go to ``EOD_CDC_QUARANTINE`` when it is set;
otherwise they fail the batch with nothing committed.

``EOD_CDC_LANDING``, ``EOD_CDC_TABLE`` and ``EOD_CDC_QUARANTINE`` choose the directories.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

LANDING = os.environ.get("EOD_CDC_LANDING", "/tmp/airflow-eod-demo/cdc-landing")
TABLE = os.environ.get("EOD_CDC_TABLE", "/tmp/airflow-eod-demo/cdc-customers")
QUARANTINE = os.environ.get("EOD_CDC_QUARANTINE") or None
CHANGES_SCHEMA = "id BIGINT, name STRING, amount BIGINT, seq BIGINT, op STRING"

with DAG(
    dag_id="eod_cdc_merge_example",
    description="Change-data CSV files -> one row per key in a Delta table, exactly once",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=1)},
    tags=["airflow-eod", "example", "merge"],
) as dag:
    merge_changes = LandingFilesToDeltaOperator(
        task_id="merge_changes",
        landing_path=LANDING,
        table_uri=TABLE,
        file_format="csv",
        schema=CHANGES_SCHEMA,
        write_mode="merge",
        merge_keys=["id"],
        order_by="seq",
        delete_when="op = 'D'",
        quarantine_table_uri=QUARANTINE,
        max_files_per_batch=100,
        catch_up=True,
    )
