"""Edges of the landing-files source found by the second adversarial review of issue 21,
beyond its own tests (tests/regressions/test_adversary_i21b.py): a Delta table below a local
landing directory (the same hole as on a store), the check of endpoint options before any
request, the Spark paths of a landing prefix with a space or glob characters, and an offset
pipeline's empty prefix on a store (a missing source until it has loaded files)."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

from airflow_eod.core.errors import BatchError, ConfigurationError
from airflow_eod.core.storage import storage_at
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.sources.landing_store import StoreLanding
from tests.support.helpers import ORDERS_DDL, plan_for

ORDER = b"order_id,customer,amount,order_ts\n1,c-1,1.00,2026-11-01T00:00:00\n"


def _write(path: str, data: bytes = ORDER) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)


# -- a Delta table below a local landing directory ------------------------------------------
def test_a_table_below_its_local_landing_directory_never_plans_its_own_files(tmp_path: Any) -> None:
    """The local listing had the hole the store's had: a table at ``<landing>/orders`` had its
    part files planned (only ``_``/``.`` names were skipped). Its root is excluded when the
    plan log names it, and any folder holding ``_delta_log`` is a table's, never input."""
    import pyarrow as pa
    from deltalake import write_deltalake

    land = tmp_path / "raw"
    _write(str(land / "incoming.csv"))
    table = land / "orders"
    write_deltalake(str(table), pa.table({"order_id": [1, 2]}))
    other = land / "archive" / "old_table"  # another table below the landing directory
    write_deltalake(str(other), pa.table({"order_id": [3]}))
    assert any(n.endswith(".parquet") for n in os.listdir(table))
    source = LandingFilesSource(path=str(land), file_format="csv", schema=ORDERS_DDL)
    plan = plan_for(source, str(table))
    assert [e["path"] for e in plan.inputs] == [str(land / "incoming.csv")]
    # Without the plan log (a restatement's listing), the _delta_log folders still keep them out.
    assert [e["path"] for e in source.list_files()] == [str(land / "incoming.csv")]


def test_a_local_table_before_its_first_commit_is_excluded_by_its_root(tmp_path: Any) -> None:
    land = tmp_path / "raw"
    _write(str(land / "incoming.csv"))
    _write(str(land / "orders" / "part-00000.csv"))  # no _delta_log yet: only the root says it
    source = LandingFilesSource(path=str(land), file_format="csv", schema=ORDERS_DDL)
    files = source.list_files(exclude=(str(land / "orders"),))
    assert [e["path"] for e in files] == [str(land / "incoming.csv")]


def test_a_landing_directory_inside_its_table_or_a_table_is_refused(tmp_path: Any) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    table = tmp_path / "orders"
    write_deltalake(str(table), pa.table({"order_id": [1]}))
    inside = LandingFilesSource(path=str(table / "landing"), file_format="csv")
    os.makedirs(inside.path)
    with pytest.raises(ConfigurationError, match="inside the table"):
        inside.list_files("p/b", exclude=(str(table),))
    at_root = LandingFilesSource(path=str(table), file_format="parquet")
    with pytest.raises(ConfigurationError, match="root of a Delta table"):
        at_root.list_files()


# -- endpoints checked before any request ---------------------------------------------------
@pytest.mark.parametrize(
    ("uri", "options"),
    [
        ("s3://b/land", {"AWS_ENDPOINT_URL": "s3 gateway"}),
        ("s3://b/land", {"AWS_ENDPOINT": "ftp://host"}),
        ("s3://b/land", {"AWS_ENDPOINT_URL": "http://host:port"}),
        ("az://c/land", {"AZURE_STORAGE_ACCOUNT_NAME": "a", "AZURE_STORAGE_ENDPOINT": "http://"}),
        ("gs://b/land", {"GOOGLE_BASE_URL": "http://host\n/x"}),
    ],
)
def test_an_endpoint_that_is_no_url_is_refused_naming_the_option(uri: str, options: dict[str, str]) -> None:
    name = next(k for k in options if "ENDPOINT" in k or "URL" in k)
    with pytest.raises(ConfigurationError, match=name) as caught:
        storage_at(uri, options)
    assert options[name] not in str(caught.value) or options[name] == "http://"  # never echoed


def test_well_formed_endpoints_and_flags_named_like_endpoints_are_accepted() -> None:
    storage_at("s3://b/land", {"AWS_ENDPOINT_URL": "https://s3.example.com:9000/"})
    storage_at(
        "az://c/land",
        {
            "AZURE_STORAGE_ACCOUNT_NAME": "a",
            "AZURE_USE_FABRIC_ENDPOINT": "false",
            "AZURE_SKIP_SIGNATURE": "true",
        },
    )


# -- the Spark side of a prefix with a space or glob characters (no Spark needed) -----------
@pytest.mark.parametrize(
    ("root", "key", "spark_path", "reported"),
    [
        (
            "s3://b/in/land[1]",
            "x{a}.csv",
            "s3a://b/in/land\\[1\\]/x\\{a\\}.csv",
            "s3a://b/in/land%5B1%5D/x%7Ba%7D.csv",
        ),
        (
            "s3://b/in/land zone",
            "a b.csv",
            "s3a://b/in/land zone/a b.csv",
            "s3a://b/in/land%20zone/a%20b.csv",
        ),
        ("s3://b/in/50%off", "x%20y.csv", "s3a://b/in/50%off/x%20y.csv", "s3a://b/in/50%25off/x%2520y.csv"),
    ],
)
def test_store_files_escape_the_whole_prefix_and_read_back_what_spark_reports(
    root: str, key: str, spark_path: str, reported: str
) -> None:
    from airflow_eod.spark.landing_store_files import StoreFiles

    files = StoreFiles(landing=StoreLanding(root), spark_root="s3a://" + root[len("s3://") :], sizes={})
    assert files.spark_path(f"{root}/{key}") == spark_path
    assert files.path_of_uri(reported) == f"{root}/{key}"
    # A file of a prefix that merely starts the same way is not the landing prefix's.
    assert files.path_of_uri("s3a://b/in/other/x.csv") == "s3a://b/in/other/x.csv"


# -- an offset pipeline's empty prefix on a store ------------------------------------------
@pytest.mark.objectstore
def test_an_offset_pipeline_on_an_empty_prefix_is_a_missing_source_until_it_has_loaded(
    s3_server: Any, tmp_path: Any
) -> None:
    """Like a local landing directory that does not exist: the first planning of an offset
    pipeline on a prefix with no object fails, naming the pipeline (retried, not terminal).
    Once the pipeline has loaded files, an emptied prefix (its files removed after loading)
    is only "nothing new"."""
    from airflow_eod.core.planlog.store import PlanLog
    from airflow_eod.core.table_ref import TableRef

    rel = f"edges/{uuid.uuid4().hex}/land"
    source = LandingFilesSource(
        path=f"s3://{s3_server.bucket}/{rel}",
        file_format="csv",
        schema=ORDERS_DDL,
        storage_options=s3_server.options(),
    )
    table = str(tmp_path / "table")
    with pytest.raises(BatchError, match=r"tests\.orders.*holds no object \(a missing source") as caught:
        plan_for(source, table)
    assert caught.value.retryable
    store = storage_at(f"s3://{s3_server.bucket}/{rel}", s3_server.options())
    store.put("a.csv", ORDER)
    first = plan_for(source, table)
    assert [e["path"] for e in first.inputs] == [f"{source.root}/a.csv"]
    # Its files removed after loading (the batch taken as committed): nothing new, no error.
    store.delete("a.csv")
    ref = TableRef.parse(table)
    after = source.plan(PlanLog(ref, "tests.orders"), run_token="run-2", is_committed=lambda k: True)
    assert after is None
