"""Loads into a table on Azure (Azurite) with real Spark writing the staged files over abfs://
(issue 21): Hadoop 3.5's ABFS driver on the Blob endpoint, pointed at the emulator by
``fs.azure.abfs.endpoint`` (airflow_eod/spark/object_store_conf.py). The table URI stays
``az://container/path`` for delta-rs and the seam; Spark's side maps it. Each test ends with
the row-by-row checker against the landing files."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.audit.verify import audit_table
from airflow_eod.core.faults import InjectedFault
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import check, orders_source, plan_for, spec_for

pytestmark = [pytest.mark.spark, pytest.mark.objectstore, pytest.mark.faults]


@pytest.fixture
def az_table(azure_server: Any, spark: Any) -> Iterator[TableRef]:
    from tests.support.spark_conf import ABFS_JARS_ENV, find_abfs_jars

    why = find_abfs_jars()
    class_path = spark.sparkContext.getConf().get("spark.driver.extraClassPath", "")
    if why is None and not all(j in class_path for j in os.environ[ABFS_JARS_ENV].split(",")):
        why = f"the shared SparkSession started without the abfs jars ({ABFS_JARS_ENV}) on its class path"
    if why is not None:
        if os.environ.get("EOD_REQUIRE_OBJECTSTORE"):
            pytest.fail(why)
        pytest.skip(why)
    uri = f"az://{azure_server.container}/loads/{uuid.uuid4().hex}/orders"
    yield TableRef.parse(uri, azure_server.options())
    # Close Hadoop's cached ABFS client while Azurite still runs: left open, the JVM closes it
    # at exit, after the emulator has stopped ("ShutdownHook 'ClientFinalizer' timeout"), and
    # was seen to outlive the test process by minutes.
    jvm = spark.sparkContext._jvm
    account = f"abfs://{azure_server.container}@{azure_server.account}.dfs.core.windows.net/"
    jvm.org.apache.hadoop.fs.FileSystem.get(
        jvm.java.net.URI(account), spark.sparkContext._jsc.hadoopConfiguration()
    ).close()


def _history(ref: TableRef) -> int:
    return len(DeltaTable(ref.location, storage_options=ref.storage_options).history())


def test_a_crash_after_staging_on_azure_is_recovered_by_the_retry(
    spark: Any, landing: str, az_table: TableRef, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_order_files(landing, 2, 40)
    source = orders_source(landing)
    plan = plan_for(source, az_table)  # type: ignore[arg-type]
    monkeypatch.setenv("EOD_FAULTPOINTS", "after_stage=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, az_table, plan, try_number=1))  # type: ignore[arg-type]
    batch = f"eod_data/{plan.pipeline_id}/{plan.batch_key}"
    store = az_table.storage()
    # Spark wrote the first attempt's Parquet files to the emulator over abfs://.
    staged = [k for k, _ in store.walk(batch) if k.endswith(".parquet")]
    assert staged, "the crashed attempt staged nothing on the store"
    retry = plan_for(source, az_table)  # type: ignore[arg-type]
    assert retry == plan
    result = run_load(spark, spec_for(source, az_table, retry, try_number=2))  # type: ignore[arg-type]
    assert result.outcome == "committed"
    assert _history(az_table) == 1 and ask(az_table, plan.key).committed
    cmp = check(az_table, landing)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 80, cmp.describe()
    # The failed attempt's staged objects are gone once the batch is committed.
    # (A set: Hadoop's folder marker objects make the listing name each folder twice.)
    attempts = {n for n in store.list(batch) if store.has_prefix(f"{batch}/{n}")}
    assert len(attempts) == 1, attempts
    assert audit_table(az_table).ok


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
