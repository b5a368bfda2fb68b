"""GCSStorage without a server (issue 21): which storage options ``from_url`` takes, how they
become obstore's GCS configuration, and which of GCS's answers are retried."""

from __future__ import annotations

import os

import pytest

if os.environ.get("EOD_REQUIRE_OBJECTSTORE"):  # CI: obstore missing fails instead of skipping
    import obstore

    from airflow_eod.core.storage import gcs_store
else:
    obstore = pytest.importorskip("obstore")
    gcs_store = pytest.importorskip("airflow_eod.core.storage.gcs_store")
GCSStorage = gcs_store.GCSStorage
gcs_options = gcs_store.gcs_options


def test_delta_rs_option_names_map_to_obstore_keys_whatever_their_case() -> None:
    config, client = gcs_options(
        {
            "GOOGLE_SERVICE_ACCOUNT_PATH": "/keys/sa.json",
            "google_application_credentials": "/keys/adc.json",
            "GOOGLE_BASE_URL": "http://127.0.0.1:1",
            "Google_Skip_Signature": "true",
            "GOOGLE_BUCKET": "lake",
            "GOOGLE_ALLOW_HTTP": "TRUE",
            "timeout": "30s",
            "GOOGLE_CONNECT_TIMEOUT": "5s",
        },
        bucket="lake",
    )
    assert config == {
        "service_account": "/keys/sa.json",
        "application_credentials": "/keys/adc.json",
        "base_url": "http://127.0.0.1:1",
        "skip_signature": True,
    }
    assert client == {"allow_http": True, "timeout": "30s", "connect_timeout": "5s"}
    for name in ("GOOGLE_SERVICE_ACCOUNT", "SERVICE_ACCOUNT", "SERVICE_ACCOUNT_PATH"):
        assert gcs_options({name: "/k.json"}, bucket="b") == ({"service_account": "/k.json"}, {})
    for name in ("GOOGLE_SERVICE_ACCOUNT_KEY", "SERVICE_ACCOUNT_KEY"):
        assert gcs_options({name: "{}"}, bucket="b") == ({"service_account_key": "{}"}, {})
    assert gcs_options({"GOOGLE_BEARER_TOKEN": "t"}, bucket="b") == ({"bearer_token": "t"}, {})


@pytest.mark.parametrize(
    "options",
    [
        {"AWS_ACCESS_KEY_ID": "x"},  # another store's option
        {"GOOGLE_PROJECT_ID": "p"},  # not an object_store option
        {"GOOGLE_SERVICE_ACOUNT": "/k.json"},  # a typo is not dropped in silence
    ],
)
def test_an_unknown_option_is_refused(options: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="unknown GCS storage option"):
        GCSStorage.from_url("gs://lake/t", options)


def test_a_bucket_option_must_be_the_urls_bucket_and_a_key_file_and_key_exclude_each_other() -> None:
    with pytest.raises(ValueError, match="names bucket 'other'"):
        gcs_options({"GOOGLE_BUCKET_NAME": "other"}, bucket="lake")
    with pytest.raises(ValueError, match="both a service account file and a key"):
        gcs_options({"GOOGLE_SERVICE_ACCOUNT": "/k.json", "GOOGLE_SERVICE_ACCOUNT_KEY": "{}"}, bucket="lake")


@pytest.mark.parametrize("url", ["s3://lake/t", "gs://", "gs:///t", "lake/t", "gcs://lake/t"])
def test_only_gs_urls_with_a_bucket(url: str) -> None:
    with pytest.raises(ValueError, match="not a GCS URL"):
        GCSStorage.from_url(url, {"GOOGLE_BEARER_TOKEN": "t"})


def test_from_url_roots_the_store_at_the_bucket_and_prefix() -> None:
    store = GCSStorage.from_url(
        "gs://lake/tables/orders/", {"GOOGLE_BEARER_TOKEN": "t", "GOOGLE_BASE_URL": "http://127.0.0.1:1"}
    )
    assert (store.bucket, store.prefix, store.root) == ("lake", "tables/orders", "gs://lake/tables/orders")
    assert store._store.config["base_url"] == "http://127.0.0.1:1"


@pytest.mark.parametrize(
    ("message", "retried"),
    [
        ("Server returned non-2xx status code: 429 Too Many Requests: rateLimitExceeded", True),
        ("Server returned non-2xx status code: 503 Service Unavailable: <Code>SlowDown</Code>", True),
        ("Server returned non-2xx status code: 400 Bad Request: <Code>InvalidArgument</Code>", False),
        ("Server returned non-2xx status code: 403 Forbidden: <Code>AccessDenied</Code>", False),
        ("Server returned non-2xx status code: 500 Internal Server Error", False),  # may have landed
        ("error sending request: connection reset by peer", False),
    ],
)
def test_which_gcs_answers_are_retried(message: str, retried: bool) -> None:
    store = GCSStorage.from_url("gs://lake/t", {"GOOGLE_BEARER_TOKEN": "t"})
    exc = obstore.exceptions.GenericError(f"Generic GCS error: {message}")
    assert store._retryable(exc) is retried
    # GCS has no 409 "conditional request conflict": a 412 on create is always "taken".
    assert store._taken_conflict(exc) is False
