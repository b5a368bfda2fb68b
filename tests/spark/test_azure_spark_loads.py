"""Loads into a table on Azure (Azurite) with real Spark writing the staged files over abfs://
(issue 21): Hadoop 3.5's ABFS driver on the Blob endpoint, pointed at the emulator by
``fs.azure.abfs.endpoint`` (airflow_eod/spark/object_store_conf.py). The table URI stays
``az://container/path`` for delta-rs and the seam; Spark's side maps it. The crash at each
boundary, the race, the restatement and JDBC run on Azure as on S3 (the ``az_table`` fixture,
tests/spark/test_object_store_loads.py); this file holds what is Azure's own. Each test ends
with the row-by-row checker against the landing files."""

from __future__ import annotations

from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.audit.verify import audit_table
from airflow_eod.core.table_ref import TableRef
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import check, orders_source, plan_for, spec_for

pytestmark = [pytest.mark.spark, pytest.mark.objectstore, pytest.mark.faults]


def _history(ref: TableRef) -> int:
    return len(DeltaTable(ref.location, storage_options=ref.storage_options).history())


def test_a_partitioned_load_on_azure_stages_each_file_once(
    spark: Any, landing: str, az_table: TableRef
) -> None:
    """Hadoop leaves an empty marker object beside each folder it makes on the Blob endpoint,
    so a partition folder is listed twice (marker and prefix); each file is staged once."""
    with open(f"{landing}/orders-one.csv", "w") as fh:
        fh.write("order_id,customer,amount,order_date,ordered_at\n")
        for n in range(1, 31):
            fh.write(f"{n},customer-01,{n}.50,2026-11-01,2026-11-01T00:00:{n:02d}.000000Z\n")
    source = orders_source(landing)
    plan = plan_for(source, az_table)  # type: ignore[arg-type]
    spec = spec_for(source, az_table, plan, partition_by=["customer"])  # type: ignore[arg-type]
    assert run_load(spark, spec).outcome == "committed"
    files = DeltaTable(az_table.location, storage_options=az_table.storage_options).file_uris()
    assert len(files) == 1 and "/customer=customer-01/" in files[0], files
    cmp = check(az_table, landing)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 30, cmp.describe()
    assert audit_table(az_table).ok
