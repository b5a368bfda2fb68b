"""ObjectStoreHook: a table's storage options from the Amazon, Azure and Google providers'
connection types (issue 21), secrets masked; the operators, the sensor and its trigger carry
the connection's id, never its secrets."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.hooks.object_store import ObjectStoreHook, table_ref

pytestmark = pytest.mark.airflow

SECRET = "wJalrXUtnFEMI-K7MDENG-s3cret"


def _conn(monkeypatch: Any, conn_id: str, **fields: Any) -> str:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))
    return conn_id


def test_an_aws_connection_gives_keys_region_and_endpoint(monkeypatch: Any) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    conn = _conn(
        monkeypatch, "lake_s3", conn_type="aws", login="AKIAEXAMPLE", password=SECRET,
        extra={"region_name": "eu-west-1", "endpoint_url": "http://127.0.0.1:9000",
               "storage_options": {"aws_virtual_hosted_style_request": "false"}},
    )  # fmt: skip
    options = ObjectStoreHook(storage_conn_id=conn).storage_options("s3")
    assert options == {
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_ALLOW_HTTP": "true",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
    }
    assert SECRET not in str(redact(f"loading with {SECRET}"))


def test_azure_shared_key_and_service_principal_connections(monkeypatch: Any) -> None:
    key = _conn(monkeypatch, "lake_wasb", conn_type="wasb", login="acct", password=SECRET)
    assert ObjectStoreHook(storage_conn_id=key).storage_options("az") == {
        "AZURE_STORAGE_ACCOUNT_NAME": "acct",
        "AZURE_STORAGE_ACCOUNT_KEY": SECRET,
    }
    sp = _conn(
        monkeypatch, "lake_adls", conn_type="adls", host="acct2", login="client-id", password=SECRET,
        extra={"tenant_id": "tenant-1"},
    )  # fmt: skip
    assert ObjectStoreHook(storage_conn_id=sp).storage_options("abfss") == {
        "AZURE_STORAGE_ACCOUNT_NAME": "acct2",
        "AZURE_STORAGE_TENANT_ID": "tenant-1",
        "AZURE_STORAGE_CLIENT_ID": "client-id",
        "AZURE_STORAGE_CLIENT_SECRET": SECRET,
    }


def test_a_google_connection_gives_the_service_account(monkeypatch: Any) -> None:
    conn = _conn(
        monkeypatch, "lake_gcs", conn_type="google_cloud_platform",
        extra={"keyfile_dict": {"type": "service_account", "private_key": SECRET}},
    )  # fmt: skip
    options = ObjectStoreHook(storage_conn_id=conn).storage_options("gs")
    assert json.loads(options["GOOGLE_SERVICE_ACCOUNT_KEY"])["private_key"] == SECRET


def test_a_connection_of_another_store_or_a_local_table_is_refused(monkeypatch: Any) -> None:
    conn = _conn(monkeypatch, "lake_s3b", conn_type="aws", login="a", password=SECRET)
    with pytest.raises(ConfigurationError, match=r"'aws'.*gs:// takes a connection of type 'google_cloud"):
        table_ref("gs://bucket/t", conn)
    with pytest.raises(ConfigurationError, match="is a local path"):
        table_ref("/lake/t", conn)
    bad = _conn(monkeypatch, "lake_bad", conn_type="aws", extra={"storage_options": {"AWS_REGION": 1}})
    with pytest.raises(ConfigurationError, match="must map option names to strings"):
        table_ref("s3://bucket/t", bad)


def test_the_reference_carries_the_options_and_shows_no_secret(monkeypatch: Any) -> None:
    conn = _conn(monkeypatch, "lake_s3c", conn_type="aws", login="a", password=SECRET)
    ref = table_ref("s3a://bucket/lake/t/", conn)
    assert ref.location == "s3://bucket/lake/t" and ref.storage_options["AWS_SECRET_ACCESS_KEY"] == SECRET
    assert SECRET not in repr(ref) and table_ref("s3://bucket/lake/t", None).storage_options == {}


def test_the_trigger_serializes_the_connection_id_and_no_secret(monkeypatch: Any) -> None:
    from airflow_eod.sensors.delta_batch import DeltaBatchSensor
    from airflow_eod.triggers.delta_batch import DeltaBatchTrigger

    conn = _conn(monkeypatch, "lake_s3d", conn_type="aws", login="a", password=SECRET)
    sensor = DeltaBatchSensor(
        task_id="wait", table_uri="s3://bucket/t", pipeline_id="p", storage_conn_id=conn
    )
    assert "storage_conn_id" in sensor.template_fields
    trigger = DeltaBatchTrigger(
        table_uri="s3://bucket/t", pipeline_id="p", batch_key="k", storage_conn_id=conn
    )
    _, kwargs = trigger.serialize()
    assert kwargs["storage_conn_id"] == conn and SECRET not in json.dumps(kwargs)
