"""The Google Cloud Storage backend of the storage seam: :class:`GCSStorage`, over obstore's
``GCSStore`` (the Rust ``object_store`` crate that delta-rs commits with).

What it shares with every obstore-backed store is :class:`~airflow_eod.core.storage.
object_store.ObjectStorage`; this module says how a ``gs://`` URL and delta-rs' storage
options become a store, and which of GCS's answers mean "retry".

obstore speaks GCS's XML API. The six calls of the seam map to it as follows:

- ``put_if_absent``: ``PUT /{bucket}/{object}`` with ``x-goog-if-generation-match: 0``
  (obstore's ``mode="create"``): GCS creates the object only if it has no live generation.
  A 412 Precondition Failed (obstore's ``AlreadyExistsError``) means the key is taken:
  someone else's write, unless an ``attempt`` is given and the object read back is the
  bytes meant. A 429 (rate limit: GCS allows about one write a second to one object name)
  and a 503 are retried with bounded, jittered backoff. A timeout, a dropped connection or
  another 5xx may have landed: :class:`~airflow_eod.core.storage.base.UnknownOutcome`,
  settled by reading back (:func:`~airflow_eod.core.storage.base.put_settled`).
- ``put``: a plain ``PUT`` (a reader sees the old generation or the new one).
  ``private=True`` means nothing in GCS: who reads an object is the bucket's IAM policy.
- ``get``/``get_range``: ``GET`` (ranged); ``head``: ``HEAD``; :attr:`Head.tag` is the ETag.
- ``list``: the XML API's ``GET /{bucket}?list-type=2&delimiter=/``.
- ``delete``: ``HEAD`` then ``DELETE``; ``delete_prefix``: a listing, then one ``DELETE``
  per object (GCS has no multi-object delete in its XML API).

:attr:`ObjectStorage.requests` counts requests under the S3 operation names the base class
uses (``PutObject(If-None-Match)`` is the conditional ``PUT`` above), so that the costs of
the stores compare line by line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from obstore.store import GCSStore

from airflow_eod.core.storage.base import check_key
from airflow_eod.core.storage.object_store import ObjectStorage, _status, default_retry
from airflow_eod.core.storage.option_names import OptionNames

# delta-rs' names of GCS storage options (those of object_store's GoogleConfigKey, matched
# without regard to case) -> obstore's GCS configuration keys.
_CONFIG = {
    "GOOGLE_SERVICE_ACCOUNT": "service_account",
    "GOOGLE_SERVICE_ACCOUNT_PATH": "service_account",
    "SERVICE_ACCOUNT": "service_account",
    "SERVICE_ACCOUNT_PATH": "service_account",
    "GOOGLE_SERVICE_ACCOUNT_KEY": "service_account_key",
    "SERVICE_ACCOUNT_KEY": "service_account_key",
    "GOOGLE_APPLICATION_CREDENTIALS": "application_credentials",
    "APPLICATION_CREDENTIALS": "application_credentials",
    "GOOGLE_BEARER_TOKEN": "bearer_token",
    "BEARER_TOKEN": "bearer_token",
    "GOOGLE_BASE_URL": "base_url",
    "BASE_URL": "base_url",
    "GOOGLE_SKIP_SIGNATURE": "skip_signature",
    "SKIP_SIGNATURE": "skip_signature",
}
# The bucket may be named again in the options; it must then be the URL's.
_BUCKET = ("GOOGLE_BUCKET", "GOOGLE_BUCKET_NAME", "BUCKET", "BUCKET_NAME")
# HTTP client options (object_store reads them with or without the GOOGLE_ prefix).
_CLIENT = {"TIMEOUT": "timeout", "CONNECT_TIMEOUT": "connect_timeout"}
GCS_OPTIONS = OptionNames(
    store="GCS",
    config={k: v for k, v in _CONFIG.items() if v != "skip_signature"},
    flags={k: v for k, v in _CONFIG.items() if v == "skip_signature"},
    client={**_CLIENT, **{f"GOOGLE_{k}": v for k, v in _CLIENT.items()}},
    client_flags={"ALLOW_HTTP": "allow_http", "GOOGLE_ALLOW_HTTP": "allow_http"},
)
# The answers of GCS that ask to be asked again: 429 rate limit (rateLimitExceeded, SlowDown),
# 503 service unavailable.
_RETRY = (429, 503)


def gcs_options(options: Mapping[str, str] | None, *, bucket: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """obstore's GCS configuration and client options for delta-rs' storage ``options``.

    :param options: storage options as delta-rs names them (``GOOGLE_SERVICE_ACCOUNT``...).
    :param bucket: the URL's bucket, which a ``GOOGLE_BUCKET`` option must repeat if given.
    :raises ValueError: for an unknown option, or a bucket option naming another bucket.
    """
    rest = dict(options or {})
    for name, value in list(rest.items()):
        if name.upper() in _BUCKET:
            if value != bucket:
                raise ValueError(f"GCS storage option {name!r} names bucket {value!r}, the URL {bucket!r}")
            del rest[name]
    config, client = GCS_OPTIONS.map(rest)
    if "service_account" in config and "service_account_key" in config:
        raise ValueError("GCS storage options name both a service account file and a key")
    return config, client


class GCSStorage(ObjectStorage):
    """The bytes under ``gs://bucket/prefix`` (a table's root).

    :param bucket: the bucket.
    :param prefix: the root prefix within it (no leading or trailing ``/``); keys are below it.
    :param config: obstore's GCS configuration (``service_account``, ``service_account_key``,
        ``application_credentials``, ``bearer_token``, ``base_url``, ``skip_signature``).
    :param client_options: obstore's HTTP client options (``allow_http``, ``timeout``, ...).
    :param retry_config: obstore's retry configuration; by default 3 retries within 30 s.
    """

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str = "",
        config: Mapping[str, Any] | None = None,
        client_options: Mapping[str, Any] | None = None,
        retry_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if self.prefix:
            check_key(self.prefix, f"gs://{bucket}")
        store = GCSStore(
            bucket,
            prefix=self.prefix or None,
            config=dict(config or {}),  # type: ignore[arg-type]
            client_options=dict(client_options or {}),  # type: ignore[arg-type]
            retry_config=dict(retry_config or default_retry()),  # type: ignore[arg-type]
        )
        super().__init__(store=store, root=f"gs://{bucket}/{self.prefix}")

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, str] | None = None) -> GCSStorage:
        """The storage at ``gs://bucket/prefix``, with storage options named as delta-rs names
        them: ``GOOGLE_SERVICE_ACCOUNT`` (or ``GOOGLE_SERVICE_ACCOUNT_PATH``, a key file's path),
        ``GOOGLE_SERVICE_ACCOUNT_KEY`` (the key's JSON), ``GOOGLE_APPLICATION_CREDENTIALS``,
        ``GOOGLE_BEARER_TOKEN``, ``GOOGLE_BASE_URL``, ``GOOGLE_SKIP_SIGNATURE``,
        ``GOOGLE_BUCKET``/``GOOGLE_BUCKET_NAME`` (must be the URL's), each also without the
        ``GOOGLE_`` prefix, and the client options ``ALLOW_HTTP``, ``TIMEOUT``,
        ``CONNECT_TIMEOUT`` (with or without it). Case does not matter.

        :raises ValueError: when ``url`` is no ``gs://`` URL with a bucket, or an option is unknown.
        """
        scheme, _, rest = url.partition("://")
        bucket, _, prefix = rest.partition("/")
        if scheme != "gs" or not bucket:
            raise ValueError(f"not a GCS URL with a bucket: {url!r}")
        config, client = gcs_options(options, bucket=bucket)
        return cls(bucket=bucket, prefix=prefix, config=config, client_options=client)

    def _retryable(self, exc: BaseException) -> bool:
        text = str(exc)
        return _status(exc) in _RETRY or "rateLimitExceeded" in text or "SlowDown" in text
