"""Landing files on S3 (SeaweedFS), planned from the store's listing and read by Spark over
s3a (issue 21, item 2): loads into an S3 table and into a local one checked row by row with
an independent reader, a file rewritten between planning and the load refused (I3), a
second run loading only the new files, odd key names, and keys outside the landing prefix
never planned or read (I11)."""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from typing import Any

import pytest

from airflow_eod.core.ask import ask
from airflow_eod.core.errors import InputChangedError, UnsafePathError
from airflow_eod.core.storage import storage_at
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import ORDERS_DDL, check, plan_for, spec_for

pytestmark = [pytest.mark.objectstore]
spark_tier = pytest.mark.spark


@pytest.fixture
def landing_uri(s3_server: Any) -> TableRef:
    """A fresh landing prefix on the S3 server, as a reference carrying its storage options."""
    return TableRef.parse(f"s3://{s3_server.bucket}/landing/{uuid.uuid4().hex}/land", s3_server.options())


@pytest.fixture
def s3a(spark: Any) -> None:
    from tests.support.spark_conf import find_s3a_jars

    why = find_s3a_jars()
    if why is not None:
        pytest.skip(why)


def _source(landing: TableRef, **kw: Any) -> LandingFilesSource:
    return LandingFilesSource(
        path=landing.location,
        file_format="csv",
        schema=ORDERS_DDL,
        storage_options=landing.storage_options,
        **kw,
    )


def _upload(
    landing: TableRef, tmp: str, files: int, rows: int, *, first_id: int, names: list[str] | None = None
) -> list[str]:
    """Write order files locally, then put each under the landing prefix (as ``names``)."""
    local = os.path.join(tmp, f"gen-{first_id}")
    write_order_files(local, files, rows, first_id=first_id)
    store = landing.storage()
    keys = []
    for i, name in enumerate(sorted(os.listdir(local))):
        key = names[i] if names else name
        with open(os.path.join(local, name), "rb") as fh:
            store.put(key, fh.read())
        keys.append(key)
    return keys


def _table(kind: str, s3_server: Any, tmp_path: Any) -> TableRef:
    if kind == "s3":
        return TableRef.parse(f"s3://{s3_server.bucket}/loads/{uuid.uuid4().hex}/orders", s3_server.options())
    return TableRef.parse(str(tmp_path / "table"))


@spark_tier
@pytest.mark.parametrize("kind", ["s3", "local"])
def test_a_landing_prefix_on_s3_loads_row_by_row_and_a_second_run_only_new_files(
    spark: Any, s3a: None, s3_server: Any, landing_uri: TableRef, tmp_path: Any, kind: str
) -> None:
    table = _table(kind, s3_server, tmp_path)
    _upload(landing_uri, str(tmp_path), 2, 30, first_id=1)
    _upload(landing_uri, str(tmp_path), 1, 20, first_id=1000, names=["sub/deeper/orders-nested.csv"])
    # Hidden names and a sibling prefix that merely starts the same way are never input.
    root = storage_at(f"s3://{s3_server.bucket}", s3_server.options())
    rel = landing_uri.location.split("/", 3)[3]
    for key in (f"{rel}/_SUCCESS", f"{rel}/.tmp/part.csv", f"{rel}/_staging/x.csv", f"{rel}2/outside.csv"):
        root.put(key, b"order_id\nnot-a-number\n")
    source = _source(landing_uri)
    plan = plan_for(source, table)  # type: ignore[arg-type]
    planned = [f["path"] for f in plan.inputs]
    assert len(planned) == 3 and all(p.startswith(landing_uri.location + "/") for p in planned), planned
    assert all(set(f) == {"path", "size", "etag"} and f["etag"] for f in plan.inputs), plan.inputs
    assert plan.boundary["directory"] == landing_uri.location
    result = run_load(spark, spec_for(source, table, plan))  # type: ignore[arg-type]
    assert result.outcome == "committed" and result.rows == 80
    cmp = check(table, landing_uri)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 80, cmp.describe()

    # A second run plans only the files that arrived since.
    new = _upload(landing_uri, str(tmp_path), 2, 15, first_id=5000)
    second = plan_for(source, table, run="run-2")  # type: ignore[arg-type]
    assert sorted(f["path"] for f in second.inputs) == sorted(f"{landing_uri.location}/{k}" for k in new)
    assert run_load(spark, spec_for(source, table, second)).outcome == "committed"  # type: ignore[arg-type]
    cmp = check(table, landing_uri)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 110, cmp.describe()


@spark_tier
def test_a_file_rewritten_after_planning_is_refused_and_nothing_is_committed(
    spark: Any, s3a: None, s3_server: Any, landing_uri: TableRef, tmp_path: Any
) -> None:
    table = _table("s3", s3_server, tmp_path)
    keys = _upload(landing_uri, str(tmp_path), 2, 25, first_id=1)
    source = _source(landing_uri)
    plan = plan_for(source, table)  # type: ignore[arg-type]
    store = landing_uri.storage()
    old = store.get(keys[0])
    new = old.replace(b"customer-", b"customer+", 1)  # the same size, other bytes
    assert new != old and len(new) == len(old)
    store.put(keys[0], new)
    with pytest.raises(InputChangedError, match="etag"):
        run_load(spark, spec_for(source, table, plan))  # type: ignore[arg-type]
    assert not ask(table, plan.key).committed
    assert not table.storage().has_prefix("_delta_log")


@spark_tier
def test_odd_key_names_load_exactly(
    spark: Any, s3a: None, s3_server: Any, landing_uri: TableRef, tmp_path: Any
) -> None:
    table = _table("s3", s3_server, tmp_path)
    names = ["with space.csv", "ünïcödé-日本.csv", "day=2026-11-01/k=v.csv", "x[1]{a,b}*?.csv", "50%off.csv"]
    _upload(landing_uri, str(tmp_path), len(names), 10, first_id=1, names=names)
    source = _source(landing_uri)
    plan = plan_for(source, table)  # type: ignore[arg-type]
    assert sorted(f["path"] for f in plan.inputs) == sorted(f"{landing_uri.location}/{n}" for n in names)
    assert run_load(spark, spec_for(source, table, plan)).outcome == "committed"  # type: ignore[arg-type]
    cmp = check(table, landing_uri)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 50, cmp.describe()


def test_a_planned_key_outside_the_prefix_or_climbing_is_never_read(
    s3_server: Any, landing_uri: TableRef, tmp_path: Any
) -> None:
    table = _table("local", s3_server, tmp_path)
    _upload(landing_uri, str(tmp_path), 1, 5, first_id=1)
    root = storage_at(f"s3://{s3_server.bucket}", s3_server.options())
    rel = landing_uri.location.split("/", 3)[3]
    root.put(f"{rel}2/outside.csv", b"order_id\n1\n")
    source = _source(landing_uri)
    plan = plan_for(source, table)  # type: ignore[arg-type]
    source.verify(plan)  # the planned file is as planned
    good = plan.inputs[0]
    for path in (
        f"{landing_uri.location}2/outside.csv",  # a shared start, another prefix
        f"{landing_uri.location}/../land2/outside.csv",
        f"{landing_uri.location}//orders.csv",
        f"{landing_uri.location}/./x.csv",
        f"s3://other-bucket/{rel}/x.csv",
        "/etc/passwd",
    ):
        tampered = dataclasses.replace(plan, inputs=[dict(good, path=path)])
        with pytest.raises(UnsafePathError, match="outside the landing prefix"):
            source.verify(tampered)
        # A restatement reads nothing there either: refused for a committed batch, and
        # re-frozen without it for one never committed.
        with pytest.raises(InputChangedError, match="needs every file"):
            source.replan(tampered, 1, committed=True)
        refrozen = source.replan(tampered, 1, committed=False)
        assert refrozen.inputs == [] and refrozen.boundary["dropped"] == [path]


def test_the_storage_options_are_never_serialized(
    s3_server: Any, landing_uri: TableRef, tmp_path: Any
) -> None:
    table = _table("local", s3_server, tmp_path)
    _upload(landing_uri, str(tmp_path), 1, 5, first_id=1)
    source = _source(landing_uri)
    plan = plan_for(source, table)  # type: ignore[arg-type]
    secret = s3_server.secret_key
    assert secret in json.dumps(source.storage_options)
    assert "storage_options" not in source.to_dict() and secret not in json.dumps(source.to_dict())
    assert secret not in repr(source)
    assert secret not in spec_for(source, table, plan).to_json()  # type: ignore[arg-type]
    assert secret not in json.dumps(dataclasses.asdict(plan))
    # The source rebuilt from its dict (a submitted driver's) plans the same prefix, without them.
    again = LandingFilesSource.from_dict(source.to_dict())
    assert again.identity() == source.identity() and again.storage_options is None
