"""The stores' option tables: delta-rs' names in, obstore's keys out, anything else refused."""

from __future__ import annotations

import pytest

from airflow_eod.core.storage.azure_store import AZURE_OPTIONS
from airflow_eod.core.storage.gcs_store import gcs_options
from airflow_eod.core.storage.object_store import S3_OPTIONS


def test_names_are_matched_without_case_and_flags_read_as_yes_or_no() -> None:
    config, client = S3_OPTIONS.map({"aws_region": "eu-west-1", "AWS_ALLOW_HTTP": "On"})
    assert config == {"region": "eu-west-1"}
    assert client == {"allow_http": True}
    config, client = AZURE_OPTIONS.map({"AZURE_STORAGE_USE_EMULATOR": "no", "AZURE_ALLOW_HTTP": "1"})
    assert config == {"use_emulator": False}
    assert client == {"allow_http": True}


def test_gcs_takes_client_options_with_or_without_its_prefix_and_its_own_bucket_only() -> None:
    config, client = gcs_options(
        {"GOOGLE_SKIP_SIGNATURE": "true", "timeout": "30s", "google_allow_http": "yes", "BUCKET": "b"},
        bucket="b",
    )
    assert config == {"skip_signature": True}
    assert client == {"timeout": "30s", "allow_http": True}
    with pytest.raises(ValueError, match="names bucket 'other'"):
        gcs_options({"GOOGLE_BUCKET": "other"}, bucket="b")


@pytest.mark.parametrize(
    ("names", "option"),
    [
        (S3_OPTIONS, "AWS_SECRET_KEY"),
        (AZURE_OPTIONS, "AZURE_ACCOUNT_KEYS"),
        (S3_OPTIONS, "AZURE_STORAGE_ACCOUNT_KEY"),
    ],
)
def test_a_name_the_store_does_not_take_is_refused_by_name(names: object, option: str) -> None:
    with pytest.raises(ValueError, match=f"unknown .* storage option '{option}'"):
        names.map({option: "x"})  # type: ignore[attr-defined]
