"""The Delta Spark engine (writer options txnAppId/txnVersion/userMetadata).

It needs the Delta Spark jars on the Spark classpath: `make test` fetches them
(airflow_eod/spark/jars.py), and tests/conftest.py skips the tier, saying why, where they
are missing (CI fails instead).
"""

from __future__ import annotations

from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.spark.load_job import run_load
from tests.helpers import check, orders_source, plan_for, spec_for

pytestmark = [
    pytest.mark.spark,
    pytest.mark.delta_spark,
]


def test_delta_spark_engine_commits_once_and_reports_a_skip(spark: Any, landing: str, table: str) -> None:
    write_order_files(landing, 2, 30)
    source = orders_source(landing)
    plan = plan_for(source, table)
    first = run_load(spark, spec_for(source, table, plan, engine="delta-spark"))
    assert first.outcome == "committed" and first.rows == 60
    again = run_load(spark, spec_for(source, table, plan, try_number=2, engine="delta-spark"))
    assert again.outcome == "already_committed"
    assert DeltaTable(table).version() == first.table_version
    assert DeltaTable(table).transaction_version(plan.key.app_id) == 0
    cmp = check(table, landing)
    assert cmp.exact, cmp.describe()
