"""Submit mode into a table on S3 (issue 21): the driver spark-submitted to the `cluster`
tier's standalone master writes over s3a to SeaweedFS, with the table's storage options only
in its environment (never in the spec, on a command line or in the task log); a driver killed
at a boundary and the retry make one commit. Each load ends with the row-by-row checker."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.result import COMMITTED
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.spark import driver
from airflow_eod.spark.load_spec import LoadSpec
from tests.support.helpers import check
from tests.support.spark_cluster import task_env

DAY = (dt.datetime(2026, 11, 2, tzinfo=dt.UTC), dt.datetime(2026, 11, 3, tzinfo=dt.UTC))
SPARK_CONN = "s3sub_spark"
STORE_CONN = "s3sub_store"
ORDERS_DDL = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"
# The executors run this interpreter, where airflow-eod is installed, on a one-core slice.
CLUSTER_CONF = {
    "spark.pyspark.python": sys.executable,
    "spark.executor.memory": "1g",
    "spark.cores.max": "1",
    "spark.sql.shuffle.partitions": "2",
}
OPTIONS = {
    "AWS_ACCESS_KEY_ID": "key-id",
    "AWS_SECRET_ACCESS_KEY": "opt-secret-Qx71",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
}


def _context(run_id: str, try_number: int) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="s3sub", task_id="load", run_id=run_id, map_index=-1, try_number=try_number)
    return {"ti": ti, "data_interval_start": DAY[0], "data_interval_end": DAY[1]}


# -- what crosses to the driver, without a cluster ----------------------------------------------
def test_the_spec_holds_no_option_and_the_driver_reattaches_them_to_the_table_and_its_quarantine(
    landing: str, table: str
) -> None:
    from airflow_eod.spark.load_spec import LoadSettings
    from tests.support.helpers import orders_source, plan_for

    write_order_files(landing, 1, 3)
    source = orders_source(landing)
    ref = TableRef.parse("s3://b/lake/orders", OPTIONS)
    settings = LoadSettings(run_id="r", try_number=1, quarantine_table_uri="s3a://b/lake/rejects")
    text = LoadSpec(table=ref, plan=plan_for(source, table), source=source, settings=settings).to_json()
    assert OPTIONS["AWS_SECRET_ACCESS_KEY"] not in text and "AWS_" not in text
    again = LoadSpec.from_json(text, OPTIONS)
    assert again.table == ref and again.table.storage_options == OPTIONS
    assert again.quarantine_table is not None and again.quarantine_table.storage_options == OPTIONS
    assert LoadSpec.from_json(text).table.storage_options == {}


def test_the_driver_takes_the_options_from_its_environment_and_refuses_a_malformed_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_eod.core.errors import ConfigurationError

    monkeypatch.delenv(driver.STORAGE_OPTIONS_ENV, raising=False)
    assert driver.storage_options_from_env() == {}
    monkeypatch.setenv(driver.STORAGE_OPTIONS_ENV, json.dumps(OPTIONS))
    assert driver.storage_options_from_env() == OPTIONS
    for bad in ("not json", '["a"]', '{"AWS_SECRET_ACCESS_KEY": 12345678}'):
        monkeypatch.setenv(driver.STORAGE_OPTIONS_ENV, bad)
        with pytest.raises(ConfigurationError, match=driver.STORAGE_OPTIONS_ENV) as err:
            driver.storage_options_from_env()
        assert "12345678" not in str(err.value)  # a value is never echoed


def test_a_spec_on_a_store_and_its_error_file_are_reached_through_the_tables_storage() -> None:
    store, key = driver.spec_storage("s3://b/lake/t/_eod/specs/abc-g0-x.json.error.json", OPTIONS)
    assert key == "_eod/specs/abc-g0-x.json.error.json"
    assert store.where(key) == "s3://b/lake/t/_eod/specs/abc-g0-x.json.error.json"
    local, local_key = driver.spec_storage("/lake/t/_eod/specs/abc-g0-x.json")
    assert local_key == "_eod/specs/abc-g0-x.json" and local.where(local_key).startswith("/lake/t/")


@pytest.mark.objectstore
def test_a_spec_and_a_drivers_error_on_s3_cross_through_the_storage_seam(s3_server: Any) -> None:
    """The task writes the spec beside the table on S3; the driver reads it back with the
    options and leaves its error beside it; the task takes both (and removes them)."""
    from airflow_eod.core.batch import BatchKey
    from airflow_eod.core.errors import BatchError
    from airflow_eod.core.spec_files import take_spec_files, write_spec

    table = TableRef.parse(f"s3://{s3_server.bucket}/submit/{uuid.uuid4().hex}/orders", s3_server.options())
    batch = BatchKey("s3sub.seam", "b-1")
    path = write_spec(table, batch, 0, "attempt-1", '{"spec": 1}')
    assert path.startswith(f"{table.location}/_eod/specs/")
    assert driver.read_spec(path, table.storage_options) == b'{"spec": 1}'
    driver.write_error(path, BatchError("s3sub.seam/b-1", "the cause"), None, table.storage_options)
    error = driver.error_from(take_spec_files(table, batch, 0, "attempt-1"))
    assert isinstance(error, BatchError) and error.cause == "the cause"
    assert table.storage().list("_eod/specs") == []


def test_the_driver_env_carries_the_options_as_one_masked_json_value() -> None:
    from airflow.sdk.log import _secrets_masker

    from airflow_eod.runners.submit import driver_secrets

    env = driver_secrets(None, TableRef.parse("s3://b/lake/t", OPTIONS))
    assert set(env) == {driver.STORAGE_OPTIONS_ENV}
    assert json.loads(env[driver.STORAGE_OPTIONS_ENV]) == OPTIONS
    # What a cluster-mode command line would carry (--conf ...driverEnv.EOD_STORAGE_OPTIONS=...)
    # reads masked in the log; a local table sends nothing.
    line = f"--conf spark.kubernetes.driverEnv.{driver.STORAGE_OPTIONS_ENV}={env[driver.STORAGE_OPTIONS_ENV]}"
    assert OPTIONS["AWS_SECRET_ACCESS_KEY"] not in str(_secrets_masker().redact(line))
    assert driver_secrets(None, TableRef.parse("/lake/t")) == {}


@pytest.mark.airflow
def test_a_submitted_load_puts_the_connector_on_the_driver_and_executor_class_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator
    from airflow_eod.spark import cloud_jars

    # The cache's jar paths stand in for the real lookup: which jars the cache holds is not
    # what this asserts, where the operator puts them for spark-submit is.
    monkeypatch.setattr(cloud_jars, "connector_class_path", lambda scheme, cache=None: f"/jars/{scheme}.jar")
    op = LandingFilesToDeltaOperator(
        task_id="load",
        execution="submit",
        landing_path="/tmp/eod-never-written/landing",
        table_uri="s3://b/lake/orders",
        pipeline_id="orders",
        schema="id INT",
        spark_conf={"spark.executor.extraClassPath": "/mine.jar"},
    )
    conf = op._submit_conf(TableRef.parse("s3://b/lake/orders"))
    assert conf["spark.driver.extraClassPath"] == "/jars/s3.jar"
    assert conf["spark.executor.extraClassPath"].split(":") == ["/mine.jar", "/jars/s3.jar"]
    assert op.spark_conf == {"spark.executor.extraClassPath": "/mine.jar"}, "the operator's own is untouched"


# -- on the cluster -----------------------------------------------------------------------------
@pytest.fixture
def s3_submit(spark_cluster: Any, s3_server: Any, monkeypatch: pytest.MonkeyPatch) -> TableRef:
    """A task's environment in submit mode, with an ``aws`` connection to the S3 server; the
    table on S3 (a new prefix per test)."""
    from tests.support.spark_conf import find_s3a_jars

    why = find_s3a_jars()
    if why is not None:
        if os.environ.get("EOD_REQUIRE_OBJECTSTORE"):
            pytest.fail(why)
        pytest.skip(why)
    for key, value in task_env(spark_cluster, SPARK_CONN).items():
        monkeypatch.setenv(key, value)
    conn = {
        "conn_type": "aws",
        "login": s3_server.access_key,
        "password": s3_server.secret_key,
        "extra": {"endpoint_url": s3_server.endpoint, "region_name": s3_server.region},
    }
    monkeypatch.setenv(f"AIRFLOW_CONN_{STORE_CONN.upper()}", json.dumps(conn))
    monkeypatch.delenv("EOD_FAULTPOINTS", raising=False)
    monkeypatch.delenv(driver.STORAGE_OPTIONS_ENV, raising=False)
    return TableRef.parse(f"s3://{s3_server.bucket}/submit/{uuid.uuid4().hex}/orders", s3_server.options())


def _op(table: TableRef, landing: str, pipeline: str) -> Any:
    from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

    return LandingFilesToDeltaOperator(
        task_id="load",
        execution="submit",
        spark_conn_id=SPARK_CONN,
        spark_conf=CLUSTER_CONF,
        landing_path=landing,
        boundary="interval",
        table_uri=table.location,
        storage_conn_id=STORE_CONN,
        pipeline_id=pipeline,
        file_format="csv",
        schema=ORDERS_DDL,
    )


def _commits(table: TableRef) -> int:
    return len(DeltaTable(table.location, storage_options=table.storage_options).history())


@pytest.mark.spark
@pytest.mark.cluster
@pytest.mark.objectstore
def test_a_submitted_load_into_s3_commits_and_its_secret_is_in_no_spec_command_line_or_log(
    s3_submit: TableRef,
    s3_server: Any,
    landing: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from airflow_eod.runners import submit

    table, secret = s3_submit, s3_server.secret_key
    write_order_files(landing, 2, 20)
    specs: list[tuple[str, str, bytes]] = []
    write_spec = submit.write_spec

    def recording_write_spec(*args: Any) -> str:
        path = write_spec(*args)
        # What the driver reads: the object on S3, through the storage seam.
        specs.append((path, args[-1], driver.read_spec(path, table.storage_options)))
        return path

    monkeypatch.setattr(submit, "write_spec", recording_write_spec)
    caplog.set_level("DEBUG")
    result = _op(table, landing, "s3sub.e2e").execute(_context("run-1", 1))
    out, err = capfd.readouterr()
    assert (result["outcome"], result["rows"]) == (COMMITTED, 40), result
    cmp = check(table, landing)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 40, cmp.describe()
    assert _commits(table) == 1

    # The spec was written beside the table on S3, read back from there, and holds no secret.
    [(path, text, stored)] = specs
    assert path.startswith(f"{table.location}/_eod/specs/") and stored == text.encode()
    assert secret not in text and s3_server.access_key not in text
    assert table.storage().list("_eod/specs") == [], "the decided attempt's spec is removed"
    # Nothing the load left in the table names the secret (its log, plan log, records, data).
    store = table.storage()
    for key, _head in store.walk(""):  # type: ignore[attr-defined]
        assert secret.encode() not in store.get(key), key

    # The task's log (caplog) and what reached the terminal: the command line the hook logs,
    # spark-submit's and the driver's own lines. The driver did run on the cluster.
    log = caplog.text + out + err
    command = [line for line in log.splitlines() if "Spark-Submit cmd:" in line]
    assert command, "the hook's command line is in the captured log"
    assert "spark.executor.extraClassPath" in command[0] and "hadoop-aws" in command[0]
    assert "EOD_RESULT " in log, "the driver's output reaches the task log"
    assert secret not in log, "the storage secret is in the task log"


@pytest.mark.spark
@pytest.mark.cluster
@pytest.mark.objectstore
@pytest.mark.faults
def test_a_driver_killed_between_staging_and_commit_on_s3_is_retried_into_one_commit(
    s3_submit: TableRef, landing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver (SIGKILLed by the fault point its environment carries) dies with its files
    staged on S3: the task asks the table, which does not hold the batch, and fails; the
    retry submits again and commits once; the dead attempt's objects and spec are gone."""
    from airflow_eod.core.errors import BatchError

    table = s3_submit
    write_order_files(landing, 2, 15)
    # The client-mode driver is a child of spark-submit: the task's environment reaches it.
    monkeypatch.setenv("EOD_FAULTPOINTS", "after_stage=kill")
    with pytest.raises(BatchError) as failed:
        _op(table, landing, "s3sub.killed").execute(_context("run-1", 1))
    monkeypatch.delenv("EOD_FAULTPOINTS")
    assert failed.value.retryable, failed.value
    store = table.storage()
    assert not store.has_prefix("_delta_log"), "the killed driver committed nothing"
    assert store.has_prefix("eod_data"), "it died with its files staged on S3"
    again = _op(table, landing, "s3sub.killed").execute(_context("run-1", 2))
    assert (again["outcome"], again["rows"]) == (COMMITTED, 30), again
    assert _commits(table) == 1
    cmp = check(table, landing)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 30, cmp.describe()
    batch = f"eod_data/s3sub.killed/{again['batch_key']}"
    attempts = [n for n in store.list(batch) if store.has_prefix(f"{batch}/{n}")]
    assert len(attempts) == 1, f"the killed attempt's staged objects are removed: {attempts}"
    assert store.list("_eod/specs") == []
