"""The example DAG under ``dag.test()`` with its table on S3 (SeaweedFS) and its credentials
from an Airflow ``aws`` connection (issue 21): a crash after the commit and the retry load
every row once, the sensor confirms the batch from the store, and the secret key is in no
XCom value and no object of the table."""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from tests.conftest import REPO
from tests.support.helpers import check, load_dag_file, task_tries, xcom_value

pytestmark = [
    pytest.mark.airflow,
    pytest.mark.spark,
    pytest.mark.objectstore,
    pytest.mark.faults,
    pytest.mark.airflow_current_only,
]


def test_the_example_dag_loads_into_s3_once_with_a_connection(
    airflow_db: str, spark: Any, s3_server: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.spark_conf import find_s3a_jars

    why = find_s3a_jars()
    if why is not None:
        pytest.skip(why)
    options = s3_server.options()
    secret = options["AWS_SECRET_ACCESS_KEY"]
    conn = {
        "conn_type": "aws",
        "login": options["AWS_ACCESS_KEY_ID"],
        "password": secret,
        "extra": {"endpoint_url": options["AWS_ENDPOINT_URL"], "region_name": options["AWS_REGION"]},
    }
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", json.dumps(conn))
    table = f"s3://{s3_server.bucket}/dags/{uuid.uuid4().hex}/orders"
    landing = str(tmp_path / "landing")
    write_order_files(landing, 3, 100)
    monkeypatch.setenv("EOD_DEMO_LANDING", landing)
    monkeypatch.setenv("EOD_DEMO_TABLE", table)
    monkeypatch.setenv("EOD_DEMO_STORAGE_CONN", "lake_s3")
    module = load_dag_file(os.path.join(REPO, "dags", "eod_landing_files_example.py"))
    monkeypatch.setenv("EOD_FAULTPOINTS", "after_commit=raise@1")
    run = module.dag.test(logical_date=datetime(2026, 11, 20, tzinfo=UTC))
    monkeypatch.delenv("EOD_FAULTPOINTS")
    assert str(run.state) == "success"
    assert task_tries(run.run_id, "load_orders") == ["failed", "success"]
    result = xcom_value(run.run_id, "load_orders")
    assert result["outcome"] == "already_committed" and result["rows"] == 300
    confirmed = xcom_value(run.run_id, "confirm_orders")
    assert confirmed["batch_key"] == result["batch_key"] and confirmed["table_version"] == 0
    ref = TableRef.parse(table, options)
    cmp = check(ref, landing)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 300, cmp.describe()
    # The secret is nowhere the load writes: XCom, the plan log, the manifest, the commit.
    assert secret not in json.dumps(result) and secret not in json.dumps(confirmed)
    import obstore
    from obstore.store import S3Store

    store = S3Store(
        s3_server.bucket,
        prefix=table.split(f"{s3_server.bucket}/", 1)[1],
        config={"endpoint": options["AWS_ENDPOINT_URL"], "access_key_id": options["AWS_ACCESS_KEY_ID"],
                "secret_access_key": secret, "region": options["AWS_REGION"]},
        client_options={"allow_http": True},
    )  # fmt: skip
    keys = [o["path"] for page in obstore.list(store) for o in page]
    assert any(k.startswith("_eod/") for k in keys) and any(k.startswith("_delta_log/") for k in keys)
    for key in keys:
        assert secret.encode() not in bytes(obstore.get(store, key).bytes()), key
