"""ObjectStoreHook: the storage options of a table on an object store, from one Airflow connection.

A table on ``s3://``, ``az://``/``abfss://`` or ``gs://`` is read and written with storage
options named as delta-rs names them (``AWS_ACCESS_KEY_ID``, ``AZURE_STORAGE_ACCOUNT_KEY``,
``GOOGLE_SERVICE_ACCOUNT_KEY``...). This hook builds them from the connection types of the
Amazon, Microsoft Azure and Google providers, read by their documented fields, so that a
connection those providers' hooks use works here unchanged, without the providers installed:

- ``aws``: login and password are the access key id and secret; ``extra.region_name``,
  ``extra.endpoint_url`` (an S3-compatible server), ``extra.aws_session_token``.
- ``wasb`` / ``adls``: login is the storage account and password its key; or, with
  ``extra.tenant_id``, login and password are a service principal's client id and secret and
  ``extra.account_name`` (or the host) the account; ``extra.sas_token``; ``extra.endpoint``
  (Azurite).
- ``google_cloud_platform``: ``extra.key_path`` (a key file on the worker) or
  ``extra.keyfile_dict`` (the key's JSON).

Every connection may add ``extra.storage_options``: more options by their delta-rs names
(``AWS_VIRTUAL_HOSTED_STYLE_REQUEST``, ...). Without a connection the options are empty, and
the store's default credential chain applies (an instance role, workload identity, the
environment's ``AWS_*``/``AZURE_*``/``GOOGLE_*`` variables).

Secrets are registered with Airflow's secrets masker as soon as they are read, and they go
only into the in-memory table reference: never into XCom, the plan log, a spec or a commit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.table_ref import TableRef

# The connection types that serve each store, by the table URI's scheme.
CONN_TYPES = {
    "s3": ("aws",),
    "az": ("wasb", "adls"),
    "abfs": ("wasb", "adls"),
    "abfss": ("wasb", "adls"),
    "gs": ("google_cloud_platform",),
}
# Options whose values are secrets: masked in every log line of the task.
SECRET_OPTIONS = frozenset(
    {
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_ACCESS_KEY",
        "AZURE_STORAGE_MASTER_KEY",
        "AZURE_STORAGE_CLIENT_SECRET",
        "AZURE_CLIENT_SECRET",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_STORAGE_SAS_KEY",
        "AZURE_STORAGE_TOKEN",
        "GOOGLE_SERVICE_ACCOUNT_KEY",
        "SERVICE_ACCOUNT_KEY",
        "GOOGLE_BEARER_TOKEN",
        "BEARER_TOKEN",
    }
)


def _set(out: dict[str, str], name: str, value: Any) -> None:
    if value not in (None, ""):
        out[name] = str(value)


def _aws(login: str | None, password: str | None, extra: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    _set(out, "AWS_ACCESS_KEY_ID", login)
    _set(out, "AWS_SECRET_ACCESS_KEY", password)
    _set(out, "AWS_SESSION_TOKEN", extra.get("aws_session_token"))
    _set(out, "AWS_REGION", extra.get("region_name"))
    endpoint = extra.get("endpoint_url")
    _set(out, "AWS_ENDPOINT_URL", endpoint)
    if str(endpoint or "").startswith("http://"):
        out["AWS_ALLOW_HTTP"] = "true"
    return out


def _azure(
    host: str | None, login: str | None, password: str | None, extra: Mapping[str, Any]
) -> dict[str, str]:
    out: dict[str, str] = {}
    if extra.get("tenant_id"):
        _set(out, "AZURE_STORAGE_ACCOUNT_NAME", extra.get("account_name") or host)
        _set(out, "AZURE_STORAGE_TENANT_ID", extra["tenant_id"])
        _set(out, "AZURE_STORAGE_CLIENT_ID", login)
        _set(out, "AZURE_STORAGE_CLIENT_SECRET", password)
    else:
        _set(out, "AZURE_STORAGE_ACCOUNT_NAME", extra.get("account_name") or login)
        _set(out, "AZURE_STORAGE_ACCOUNT_KEY", password)
    _set(out, "AZURE_STORAGE_SAS_TOKEN", extra.get("sas_token"))
    endpoint = extra.get("endpoint")
    _set(out, "AZURE_STORAGE_ENDPOINT", endpoint)
    if str(endpoint or "").startswith("http://"):
        out["AZURE_ALLOW_HTTP"] = "true"
    return out


def _google(extra: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    _set(out, "GOOGLE_SERVICE_ACCOUNT_PATH", extra.get("key_path"))
    keyfile = extra.get("keyfile_dict")
    if keyfile:
        _set(out, "GOOGLE_SERVICE_ACCOUNT_KEY", keyfile if isinstance(keyfile, str) else json.dumps(keyfile))
    return out


class ObjectStoreHook(BaseHook):
    """The storage options of the object store a table lives on, from an Airflow connection.

    :param storage_conn_id: the connection (an ``aws``, ``wasb``/``adls`` or
        ``google_cloud_platform`` one); ``None``: no options, the store's default chain.
    """

    conn_name_attr = "storage_conn_id"
    default_conn_name = "aws_default"
    hook_name = "airflow-eod object store"

    def __init__(self, *, storage_conn_id: str | None = None) -> None:
        super().__init__()
        self.storage_conn_id = storage_conn_id

    def storage_options(self, scheme: str) -> dict[str, str]:
        """The delta-rs storage options for a table on ``scheme`` (``s3``, ``az``, ``gs``...).

        :raises ConfigurationError: for a connection of a type that serves another store, or
            an ``extra.storage_options`` that is no mapping of names to strings.
        """
        if self.storage_conn_id is None:
            return {}
        scheme = "s3" if scheme == "s3a" else scheme
        conn = self.get_connection(self.storage_conn_id)
        kinds = CONN_TYPES.get(scheme, ())
        if conn.conn_type not in kinds:
            raise ConfigurationError(
                f"connection {self.storage_conn_id!r} is of type {conn.conn_type!r}, and a table on "
                f"{scheme}:// takes a connection of type {' or '.join(repr(k) for k in kinds) or 'none'}"
            )
        extra = conn.extra_dejson
        if scheme == "s3":
            out = _aws(conn.login, conn.password, extra)
        elif scheme == "gs":
            out = _google(extra)
        else:
            out = _azure(conn.host, conn.login, conn.password, extra)
        more = extra.get("storage_options") or {}
        if not isinstance(more, Mapping) or not all(isinstance(v, str) for v in more.values()):
            raise ConfigurationError(
                f"connection {self.storage_conn_id!r}: extra.storage_options must map option names "
                "to strings (delta-rs' names, e.g. AWS_VIRTUAL_HOSTED_STYLE_REQUEST)"
            )
        out.update({str(k).upper(): v for k, v in more.items()})
        for name, value in out.items():
            if name in SECRET_OPTIONS:
                mask_secret(value)
        return out


def table_ref(table_uri: str, storage_conn_id: str | None) -> TableRef:
    """The reference to ``table_uri``, with the storage options of ``storage_conn_id`` when
    the table is on an object store: what the operators, the sensor and its trigger parse a
    rendered ``table_uri`` with.

    :raises ConfigurationError: a connection given for a local table, or one of a type that
        serves another store.
    """
    ref = TableRef.parse(table_uri)
    if storage_conn_id is None:
        return ref
    if ref.is_local:
        raise ConfigurationError(
            f"storage_conn_id {storage_conn_id!r} is set, but the table {ref} is a local path: "
            "a connection is for a table on an object store (s3://, az://, abfss://, gs://)"
        )
    return TableRef.parse(ref, ObjectStoreHook(storage_conn_id=storage_conn_id).storage_options(ref.scheme))
