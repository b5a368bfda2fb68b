"""LandingFilesToDeltaOperator with a landing prefix on an object store (issue 21, item 2):
the storage options come from landing_conn_id (else the table's storage_conn_id), stay in
memory (never in the source's dict or a spec), and a submitted driver, which would need
them, is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

pytestmark = [pytest.mark.airflow]

SECRET = "landing-secret-Zz98"


@pytest.fixture
def landing_conn(monkeypatch: pytest.MonkeyPatch) -> str:
    conn = {
        "conn_type": "aws",
        "login": "landing-key",
        "password": SECRET,
        "extra": {"endpoint_url": "http://127.0.0.1:9", "region_name": "us-east-1"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_LANDING_S3", json.dumps(conn))
    return "landing_s3"


def _operator(**kw: Any) -> LandingFilesToDeltaOperator:
    base: dict[str, Any] = {
        "task_id": "load",
        "landing_path": "s3a://bucket/incoming/orders/",
        "table_uri": "/tmp/eod-never-written/orders",
        "pipeline_id": "orders",
        "schema": "id INT",
    }
    return LandingFilesToDeltaOperator(**{**base, **kw})


def test_the_landing_connection_gives_the_options_in_memory_only(airflow_db: str, landing_conn: str) -> None:
    source = _operator(landing_conn_id=landing_conn).build_source()
    assert source.on_store and source.root == "s3://bucket/incoming/orders"
    assert source.storage_options is not None
    assert source.storage_options["AWS_SECRET_ACCESS_KEY"] == SECRET
    assert source.storage_options["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9"
    assert SECRET not in json.dumps(source.to_dict()) and SECRET not in repr(source)


def test_the_table_connection_serves_a_landing_prefix_on_its_store(
    airflow_db: str, landing_conn: str
) -> None:
    op = _operator(table_uri="s3://bucket/tables/orders", storage_conn_id=landing_conn)
    source = op.build_source()
    assert source.storage_options is not None and source.storage_options["AWS_SECRET_ACCESS_KEY"] == SECRET
    assert op.lineage_inputs() == [("s3://bucket", "incoming/orders")]


def test_what_a_landing_prefix_on_a_store_refuses(airflow_db: str, landing_conn: str) -> None:
    with pytest.raises(ConfigurationError, match="execution='local' only"):
        _operator(landing_conn_id=landing_conn, execution="submit").build_source()
    with pytest.raises(ConfigurationError, match=r"landing path .* is local"):
        _operator(landing_path="/tmp/landing", landing_conn_id=landing_conn).build_source()
    # A local landing directory's source is what it always was.
    local = _operator(landing_path="/tmp/landing").build_source()
    assert local.storage_options is None and not local.on_store


@pytest.mark.parametrize(
    ("table_uri", "expected"),
    [
        ("/tmp/eod-never-written/orders", ["/jars/s3.jar"]),  # the landing prefix's store only
        ("s3://bucket/tables/orders", ["/jars/s3.jar"]),  # one store: its connector once
        ("az://container/tables/orders", ["/jars/az.jar", "/jars/s3.jar"]),  # two stores: both
    ],
)
def test_the_driver_class_path_holds_each_stores_connector_once(
    monkeypatch: pytest.MonkeyPatch, table_uri: str, expected: list[str]
) -> None:
    from airflow_eod.core.table_ref import TableRef
    from airflow_eod.spark import cloud_jars

    # The cache's jar paths stand in for the real lookup: which jars the cache holds is not
    # what this asserts, how the operator puts them on the class path is.
    monkeypatch.setattr(cloud_jars, "connector_class_path", lambda scheme, cache=None: f"/jars/{scheme}.jar")
    op = _operator(table_uri=table_uri, spark_conf={"spark.driver.extraClassPath": "/mine.jar"})
    conf = op._local_conf(TableRef.parse(table_uri))
    assert conf["spark.driver.extraClassPath"].split(":") == ["/mine.jar", *expected]
