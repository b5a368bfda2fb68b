"""The Azure Blob Storage / ADLS Gen2 backend of the storage seam, over obstore's ``AzureStore``.

What it shares with S3 (reads, listing, the put-if-absent loop and its read-back of an
attempt id) is :class:`~airflow_eod.core.storage.object_store.ObjectStorage`; this module says
how an ``az://``/``abfs[s]://`` URL and delta-rs' ``AZURE_*`` storage options become an
obstore store, and what Azure's answers mean:

- ``put_if_absent``: ``Put Blob`` with ``If-None-Match: *`` (obstore's ``mode="create"``). An
  existing blob answers 409 ``BlobAlreadyExists`` (obstore's ``AlreadyExistsError``): the key
  is taken, final, not a conflict to retry (Azure serializes conditional writes to one blob;
  it has no counterpart of S3's 409 ``ConditionalRequestConflict``). Whether it is this
  attempt's own write whose reply was lost is settled by reading back, as on S3.
- 503 ``ServerBusy`` (throttling: the request was not served) is retried with backoff. A 500
  ``OperationTimedOut`` or ``InternalError``, a timeout or a dropped connection after the
  request was sent may have landed: a put-if-absent raises
  :class:`~airflow_eod.core.storage.base.UnknownOutcome`, settled by reading back.
- ``head``: ``Get Blob Properties``; :attr:`Head.tag` is the ETag (``"0x8DC..."``), the
  ``Last-Modified`` time is whole seconds.
- ``list``: ``List Blobs`` with ``delimiter=/``.
- ``delete``: one ``Delete Blob`` (Azure answers 404 ``BlobNotFound`` for nothing there, so,
  unlike S3, no head is needed first). ``delete_prefix``: a listing, then ``Blob Batch``
  requests of at most 256 deletes each (Azure's limit; obstore sends them as a batch).

An ADLS Gen2 account (hierarchical namespace) is reached through its blob endpoint, as obstore
does: ``abfss://container@account.dfs.core.windows.net/prefix`` names the same bytes as
``az://container/prefix`` with the account given. On such an account a directory is an entry
of its own, which may stay after its last file is deleted: a listing may then name an empty
sub-prefix, as on SeaweedFS.

:attr:`ObjectStorage.requests` counts requests under the names of their S3 counterparts
(``PutObject(If-None-Match)`` for a conditional ``Put Blob``, ``ListObjectsV2`` for ``List
Blobs``...), so that the counts of the two stores read side by side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import obstore
from obstore.store import AzureStore

from airflow_eod.core.storage.base import check_key
from airflow_eod.core.storage.object_store import ObjectStorage, _status, default_retry
from airflow_eod.core.storage.option_names import OptionNames

# Deletes per Blob Batch request (Azure's limit is 256).
DELETE_BATCH = 256

# delta-rs' names of Azure storage options (those of the object_store crate it hands them to)
# -> obstore's AzureStore configuration keys. Matched without regard to case.
_CONFIG = {
    "AZURE_STORAGE_ACCOUNT_NAME": "account_name",
    "AZURE_STORAGE_ACCOUNT_KEY": "account_key",
    "AZURE_STORAGE_ACCESS_KEY": "account_key",
    "AZURE_STORAGE_MASTER_KEY": "account_key",
    "AZURE_STORAGE_CLIENT_ID": "client_id",
    "AZURE_CLIENT_ID": "client_id",
    "AZURE_STORAGE_CLIENT_SECRET": "client_secret",
    "AZURE_CLIENT_SECRET": "client_secret",
    "AZURE_STORAGE_TENANT_ID": "tenant_id",
    "AZURE_STORAGE_AUTHORITY_ID": "tenant_id",
    "AZURE_TENANT_ID": "tenant_id",
    "AZURE_AUTHORITY_ID": "tenant_id",
    "AZURE_STORAGE_AUTHORITY_HOST": "authority_host",
    "AZURE_AUTHORITY_HOST": "authority_host",
    "AZURE_STORAGE_SAS_KEY": "sas_key",
    "AZURE_STORAGE_SAS_TOKEN": "sas_key",
    "AZURE_STORAGE_TOKEN": "token",
    "AZURE_STORAGE_ENDPOINT": "endpoint",
    "AZURE_ENDPOINT": "endpoint",
    "AZURE_MSI_ENDPOINT": "msi_endpoint",
    "AZURE_IDENTITY_ENDPOINT": "msi_endpoint",
    "AZURE_OBJECT_ID": "object_id",
    "AZURE_MSI_RESOURCE_ID": "msi_resource_id",
    "AZURE_FEDERATED_TOKEN_FILE": "federated_token_file",
}
# Options whose value is a flag ("true", "1", "yes" mean yes).
_FLAGS = {
    "AZURE_STORAGE_USE_EMULATOR": "use_emulator",
    "AZURE_USE_FABRIC_ENDPOINT": "use_fabric_endpoint",
    "AZURE_USE_AZURE_CLI": "use_azure_cli",
    "AZURE_SKIP_SIGNATURE": "skip_signature",
    "AZURE_DISABLE_TAGGING": "disable_tagging",
}
# Options of the HTTP client rather than of the store.
_CLIENT_FLAGS = {"AZURE_ALLOW_HTTP": "allow_http"}

AZURE_OPTIONS = OptionNames(store="Azure", config=_CONFIG, flags=_FLAGS, client_flags=_CLIENT_FLAGS)
ACCEPTED_OPTIONS = AZURE_OPTIONS.accepted

_SCHEMES = ("az", "abfs", "abfss")


def parse_url(url: str) -> tuple[str, str | None, str]:
    """The container, the account (``None`` when the URL names none) and the prefix of an
    ``az://container/prefix``, ``abfs[s]://container/prefix`` or
    ``abfs[s]://container@account.dfs.core.windows.net/prefix`` URL.

    :raises ValueError: when ``url`` is none of these, or names no container.
    """
    scheme, sep, rest = url.partition("://")
    where, _, prefix = rest.partition("/")
    container, at, host = where.partition("@")
    account: str | None = None
    if at:
        if scheme not in ("abfs", "abfss") or "." not in host:
            raise ValueError(f"not an Azure URL with a container and an account host: {url!r}")
        account = host.split(".", 1)[0]
    if not sep or scheme not in _SCHEMES or not container or (at and not account):
        raise ValueError(f"not an Azure URL (az://container/prefix, abfss://container@account...): {url!r}")
    return container, account, prefix


class AzureStorage(ObjectStorage):
    """The bytes under ``az://container/prefix`` (a table's root) in one storage account.

    :param container: the container (an ADLS Gen2 file system).
    :param prefix: the root prefix within it (no leading or trailing ``/``); keys are below it.
    :param config: obstore's Azure configuration (``account_name``, ``account_key``,
        ``endpoint``, ...).
    :param client_options: obstore's HTTP client options (``allow_http``, ``timeout``, ...).
    :param retry_config: obstore's retry configuration; by default 3 retries within 30 s.
    """

    def __init__(
        self,
        *,
        container: str,
        prefix: str = "",
        config: Mapping[str, Any] | None = None,
        client_options: Mapping[str, Any] | None = None,
        retry_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.container = container
        self.prefix = prefix.strip("/")
        if self.prefix:
            check_key(self.prefix, f"az://{container}")
        store = AzureStore(
            container,
            prefix=self.prefix or None,
            config=dict(config or {}),  # type: ignore[arg-type]
            client_options=dict(client_options or {}),  # type: ignore[arg-type]
            retry_config=dict(retry_config or default_retry()),  # type: ignore[arg-type]
        )
        super().__init__(store=store, root=f"az://{container}/{self.prefix}")

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, str] | None = None) -> AzureStorage:
        """The storage at ``az://container/prefix``, ``abfs[s]://container/prefix`` or
        ``abfs[s]://container@account.dfs.core.windows.net/prefix``, with storage options named
        as delta-rs names them (:data:`ACCEPTED_OPTIONS`: ``AZURE_STORAGE_ACCOUNT_NAME``,
        ``AZURE_STORAGE_ACCOUNT_KEY``, ``AZURE_STORAGE_ENDPOINT``, ``AZURE_ALLOW_HTTP``...).

        :raises ValueError: when ``url`` is no such URL, an option is unknown, the URL's account
            and ``AZURE_STORAGE_ACCOUNT_NAME`` differ, or ``AZURE_STORAGE_USE_EMULATOR`` comes
            with an endpoint (obstore would ignore the endpoint and reach port 10000).
        """
        container, account, prefix = parse_url(url)
        config, client = AZURE_OPTIONS.map(options)
        if account is not None:
            if config.setdefault("account_name", account) != account:
                raise ValueError(f"the URL names account {account!r}, the options {config['account_name']!r}")
        if config.get("use_emulator") and "endpoint" in config:
            raise ValueError(
                "AZURE_STORAGE_USE_EMULATOR ignores AZURE_STORAGE_ENDPOINT (obstore then reaches "
                "AZURITE_BLOB_STORAGE_URL or port 10000): give one of them"
            )
        return cls(container=container, prefix=prefix, config=config, client_options=client)

    def _retryable(self, exc: BaseException) -> bool:
        # 503 ServerBusy: throttled, not served. A 500 OperationTimedOut may have been served.
        return _status(exc) == 503 or "ServerBusy" in str(exc)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        try:
            return super().get_range(key, start, length)
        except obstore.exceptions.GenericError as exc:
            # A range that starts at the end: Azure answers 416, Azurite the whole blob, which
            # obstore then refuses itself (StartTooLarge). Either way nothing is there.
            if "StartTooLarge" in repr(exc) or "Wanted range starting at" in str(exc):
                return b""
            raise

    def delete(self, key: str) -> bool:
        check_key(key, self.root)
        self._count("DeleteObject")
        try:
            obstore.delete(self._store, key)
        except FileNotFoundError:  # 404 BlobNotFound: nothing there
            return False
        return True

    delete_batch = DELETE_BATCH
    list_page = 5000  # Azure's List Blobs answers up to 5,000 a page

    def delete_prefix(self, prefix: str) -> bool:
        below = super().delete_prefix(prefix)
        # Hadoop's ABFS driver on a Blob endpoint marks each folder it makes with an empty blob
        # named like the folder (``d`` for ``d/...``): Spark's staging leaves one per attempt.
        return self.delete(prefix.strip("/")) or below

    def _delete_batch(self, keys: Sequence[str]) -> None:
        try:
            obstore.delete(self._store, keys)
        except FileNotFoundError:
            # Someone removed one of them meanwhile. Each delete of a batch stands on its own,
            # but whether obstore sent the rest is not said: those left are deleted one by one.
            for key in keys:
                self.delete(key)
