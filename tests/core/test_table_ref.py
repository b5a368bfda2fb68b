"""The table reference (core/table_ref.py): parsed once from what the user wrote, equal
however it was spelled, refused with a clear error where this release cannot write."""

from __future__ import annotations

import os
from typing import Any

import pytest

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.table_ref import TableRef


def test_spellings_of_one_table_are_one_reference(tmp_path: Any) -> None:
    path = str(tmp_path / "lake" / "t")
    refs = {
        TableRef.parse(path),
        TableRef.parse(f"file://{path}"),
        TableRef.parse(str(tmp_path / "lake" / "." / "t")),
        TableRef.parse(str(tmp_path / "lake" / "x" / ".." / "t")),
    }
    assert refs == {TableRef(location=path)}
    ref = refs.pop()
    assert ref.path == ref.location == str(ref) == path


def test_a_relative_path_is_made_absolute_once(tmp_path: Any, monkeypatch: Any) -> None:
    """Resolved against the working directory at parse time: a later chdir (a Spark driver,
    a forked worker) does not move the table."""
    monkeypatch.chdir(tmp_path)
    ref = TableRef.parse("rel/t")
    monkeypatch.chdir("/")
    assert ref.path == os.path.join(str(tmp_path), "rel", "t")


def test_parse_returns_a_reference_as_it_is() -> None:
    ref = TableRef.parse("/lake/t")
    assert TableRef.parse(ref) is ref


def test_the_asset_uri_is_percent_encoded_and_never_gains_a_host() -> None:
    assert TableRef.parse("/lake/a b#c").asset_uri == "file:///lake/a%20b%23c"
    # POSIX reads "//lake/t" as "/lake/t"; "file:////lake/t" would be host "lake" to Airflow.
    assert TableRef.parse("//lake/t").asset_uri == "file:///lake/t"


def test_the_plan_log_keys_are_inside_the_table() -> None:
    ref = TableRef.parse("/lake/t")
    assert ref.plan_log_key("tests.p") == "_eod/pipelines/tests.p"
    assert ref.plan_logs_key == "_eod/pipelines"


@pytest.mark.parametrize(
    ("uri", "cause"),
    [
        ("wasb://c@a.blob.core.windows.net/t", "object store's URI"),
        ("s3://bucket", "names no folder in the bucket"),
        ("gs://bucket/", "names no folder in the bucket"),
        ("s3://bucket/a/../t", "'..'"),
        ("az://c/a%2Fb", "'%'"),
        ("s3://bucket/t?versionId=1", "'?'"),
        ("/lake/100%", "holds a '%'"),
        ("file://", "has no path"),
    ],
)
def test_a_table_this_release_cannot_write_is_refused_naming_it(uri: str, cause: str) -> None:
    with pytest.raises(ConfigurationError, match=cause) as err:
        TableRef.parse(uri)
    assert uri in str(err.value) or "100%" in str(err.value)


@pytest.mark.parametrize(
    ("uri", "location"),
    [
        ("s3://bucket/lake/t", "s3://bucket/lake/t"),
        ("s3a://bucket/lake/t/", "s3://bucket/lake/t"),
        ("S3://bucket//lake/t", "s3://bucket/lake/t"),
        ("az://container/t", "az://container/t"),
        ("abfss://c@a.dfs.core.windows.net/t", "abfss://c@a.dfs.core.windows.net/t"),
        ("gs://bucket/t", "gs://bucket/t"),
    ],
)
def test_an_object_store_table_is_one_canonical_uri(uri: str, location: str) -> None:
    ref = TableRef.parse(uri)
    assert ref.location == ref.path == ref.asset_uri == location
    assert not ref.is_local and ref.scheme == location.split("://")[0]
    assert ref.dir("eod_data/k/g0-a") == f"{location}/eod_data/k/g0-a"


def test_storage_options_are_carried_but_never_shown_or_compared() -> None:
    secret = "wJalrXUtnFEMI-not-a-real-key"
    ref = TableRef.parse("s3://bucket/t", {"AWS_SECRET_ACCESS_KEY": secret, "AWS_REGION": "eu-west-1"})
    assert ref.storage_options == {"AWS_SECRET_ACCESS_KEY": secret, "AWS_REGION": "eu-west-1"}
    assert secret not in repr(ref) and secret not in str(ref)
    assert ref == TableRef.parse("s3://bucket/t") and hash(ref) == hash(TableRef.parse("s3://bucket/t"))
    assert TableRef.parse(ref) is ref
    assert TableRef.parse(ref, {"AWS_REGION": "x"}).storage_options == {"AWS_REGION": "x"}


def test_storage_options_for_a_local_table_are_refused(tmp_path: Any) -> None:
    with pytest.raises(ConfigurationError, match="storage options mean nothing"):
        TableRef.parse(str(tmp_path / "t"), {"AWS_REGION": "x"})


def test_something_that_is_no_table_name_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="path or a URI"):
        TableRef.parse(42)  # type: ignore[arg-type]


def test_each_storage_is_new_so_no_link_check_outlives_one_use(tmp_path: Any) -> None:
    """The local backend remembers directories it found to be no link; a reference lives as
    long as a task, so it hands out a fresh storage each time (a link planted between two
    uses is seen by the second)."""
    ref = TableRef.parse(str(tmp_path / "t"))
    first, second = ref.storage(), ref.storage()
    assert first is not second
    first.put("_eod/x.json", b"{}")
    assert second.get("_eod/x.json") == b"{}"


def test_a_link_planted_in_the_attempt_path_is_refused(tmp_path: Any) -> None:
    from airflow_eod.core.errors import UnsafePathError

    table, outside = tmp_path / "t", tmp_path / "outside"
    table.mkdir()
    outside.mkdir()
    os.symlink(outside, table / "eod_data")
    with pytest.raises(UnsafePathError, match="outside"):
        TableRef.parse(str(table)).dir("eod_data/p/k")
