"""Adversarial review of issue 21 (tables on object stores), on real servers (SeaweedFS S3,
Azurite, fake-gcs-server). Each test asserts the correct behaviour and fails today."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_eod.core.ask import ask
from airflow_eod.core.delta.log import clear_cache
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.table_ref import TableRef
from tests.core.test_object_store_tables import _batch, rows_of, stage

pytestmark = pytest.mark.objectstore
pytest.importorskip("obstore")


@pytest.fixture(scope="module")
def other_s3_server(s3_server: Any) -> Iterator[Any]:
    """A second SeaweedFS S3 server (another store, same bucket name: ``s3://eod/...`` names
    a different table on each)."""
    from tests.support.s3_server import S3Server

    server = S3Server.start()
    yield server
    server.stop()


def test_the_log_cache_never_answers_for_another_store_at_the_same_uri(
    s3_server: Any, other_s3_server: Any
) -> None:
    """Finding: core/delta/log.py's ``_CACHE`` is keyed by the table's location only, and a
    cached reading keeps the first reference (and its storage options). The same URI on
    another store (another endpoint or account: a test and a production lake, two regions)
    is then answered from the first store: the ask says "committed" for a batch the second
    table never got, and the load skips it (I2, a loss)."""
    clear_cache()
    uri = f"s3://{s3_server.bucket}/lake/{uuid.uuid4().hex}/orders"
    first = TableRef.parse(uri, s3_server.options())
    second = TableRef.parse(uri, other_s3_server.options())
    batch = _batch(1)
    assert commit_batch(first, batch, 0, *stage(first, batch, [1, 2]))[0]
    assert ask(first, batch).committed
    # The other store holds no table at this URI at all.
    assert not second.storage().has_prefix("_delta_log")
    assert not ask(second, batch).committed, "the ask answered from the other store's table"
    we, _ = commit_batch(second, batch, 0, *stage(second, batch, [1, 2]))
    assert we, "the batch was never written to the second store's table (lost)"


@pytest.mark.parametrize("form", ["abfss-account", "abfss", "abfs"])
def test_a_table_named_by_an_abfss_uri_commits_and_records_its_batch(azure_server: Any, form: str) -> None:
    """Finding: a table named ``abfss://container@account.dfs.core.windows.net/...`` (the
    form the issue and the docs name first) or ``abfs[s]://container/...`` commits the batch
    into the Delta log and then fails writing the batch's commit record: the plan log builds
    its entries' paths from the storage's root (``az://container/...``), and
    ``PlanLog.key_of`` refuses them as "outside the table" (the reference's location keeps the
    ``abfss://`` spelling). The load fails after its data became visible, and the durable
    record that answers for the batch once its ``txn`` marker expires is never written (I1
    after the retention window, I7)."""
    from tests.support.azurite_server import ACCOUNT

    container = azure_server.container
    where = {
        "abfss-account": f"abfss://{container}@{ACCOUNT}.dfs.core.windows.net",
        "abfss": f"abfss://{container}",
        "abfs": f"abfs://{container}",
    }[form]
    ref = TableRef.parse(f"{where}/lake/{uuid.uuid4().hex}/orders", azure_server.options())
    batch = _batch(1)
    we, status = commit_batch(ref, batch, 0, *stage(ref, batch, [1, 2]))
    assert we and status.committed
    assert rows_of(ref) == [(1, batch.key), (2, batch.key)]


@pytest.mark.parametrize(
    ("uri", "options"),
    [
        ("s3://eod/lake/t", {"AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "maybe"}),
        ("gs://eod/lake/t", {"GOOGLE_TIMEOUT": "thirty seconds"}),
        ("az://eod/lake/t", {"AZURE_STORAGE_ACCOUNT_NAME": "a", "AZURE_STORAGE_ACCOUNT_KEY": "not base64!"}),
        ("gs://eod/lake/t", {"GOOGLE_SERVICE_ACCOUNT_KEY": '{"private_key": "cut short'}),
    ],
)
def test_a_malformed_storage_option_is_a_configuration_error(uri: str, options: dict[str, str]) -> None:
    """Finding: ``storage_at`` turns only a ``ValueError`` of the backend into a
    :class:`ConfigurationError`; obstore refuses a malformed option value (a flag that is no
    boolean, a timeout that is no duration, an account key that is no base64, a key that is
    no JSON) with its own ``GenericError`` when it builds the store, which reaches the
    operator raw: no retry can fix it, yet it is not the error that ends the task at once
    (I6), and its text does not say which option is wrong."""
    from airflow_eod.core.errors import ConfigurationError
    from airflow_eod.core.storage import storage_at

    with pytest.raises(ConfigurationError):
        storage_at(uri, options)
