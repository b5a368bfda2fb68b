"""The Hadoop settings that let Spark write a table URI's store, from delta-rs storage options.

A load names its table as delta-rs does (``s3://bucket/path``, ``az://container/path`` or
``abfss://container@account.dfs.core.windows.net/path``, ``gs://bucket/path``) with storage
options named as delta-rs names them (``AWS_ENDPOINT_URL``, ``AZURE_STORAGE_ACCOUNT_KEY``...).
Spark reaches the same bytes through Hadoop's connectors, under other schemes (``s3a://``,
``abfss://``, ``gs://``) and other setting names. :func:`hadoop_store_conf` translates both;
:func:`apply_to_session` sets the result on a running session's Hadoop configuration.

Settings are per bucket (S3A ``fs.s3a.bucket.<bucket>.*``) or per storage account (ABFS
``fs.azure.*.<account>.dfs.core.windows.net``), so one shared session can write to several
stores with different credentials. The GCS connector has no per-bucket settings: its
credentials are the session's, one set per session.

Secrets are held as :class:`Secret`, whose ``repr`` and ``str`` are masked, so that a logged
:class:`HadoopStoreConf` never shows them; only :func:`apply_to_session` reveals them, to the
JVM. An option that would send the bytes somewhere this module cannot express (an Azure
endpoint over TLS, a Google endpoint) is refused rather than ignored: ignoring it would write
to the public cloud instead.

An Azure emulator (Azurite: ``AZURE_STORAGE_ENDPOINT=http://host:port/<account>`` or
``AZURE_STORAGE_USE_EMULATOR``) is reached through Hadoop 3.5's ABFS driver on the Blob
endpoint (``fs.azure.fns.account.service.type=BLOB``, the driver of flat-namespace accounts
since the WASB driver was removed) with its emulator override ``fs.azure.abfs.endpoint``
(``host:port``, path-style URLs ``http://host:port/<account>/<container>/...``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

MASK = "***"
_DFS = "dfs.core.windows.net"
_TRUE = {"true", "1", "yes", "on"}
# Azurite's one account and its key, published by Microsoft (not a secret): object_store
# takes them when AZURE_STORAGE_USE_EMULATOR is set and no account is named, and so does this.
EMULATOR_ACCOUNT = "devstoreaccount1"
EMULATOR_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class Secret:
    """A secret value whose ``repr`` and ``str`` are masked.

    :param value: the secret.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself, for the one place that hands it on (the JVM's configuration)."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({MASK!r})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class HadoopStoreConf:
    """Where Spark writes a table and the Hadoop settings that take it there.

    :param uri: the URI Spark writes to (``s3a://``, ``abfss://``, ``gs://``).
    :param settings: the Hadoop settings that are not secret, by key.
    :param secrets: the Hadoop settings that are, by key, masked in ``repr``.
    """

    uri: str
    settings: Mapping[str, str]
    secrets: Mapping[str, Secret]

    def keys(self) -> list[str]:
        """Every key this sets, secret or not, sorted: what a log may show."""
        return sorted([*self.settings, *self.secrets])

    def revealed(self) -> Iterator[tuple[str, str]]:
        """Every setting with its value, secrets revealed, for :func:`apply_to_session`."""
        yield from self.settings.items()
        for key, secret in self.secrets.items():
            yield key, secret.reveal()


def _options(options: Mapping[str, str] | None) -> dict[str, str]:
    # delta-rs and object_store take option names in any case (aws_region, AWS_REGION).
    return {key.upper(): str(value) for key, value in (options or {}).items() if value is not None}


def _first(opts: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        if opts.get(name):
            return opts[name]
    return None


def hadoop_store_conf(uri: str, options: Mapping[str, str] | None = None) -> HadoopStoreConf:
    """The URI Spark writes ``uri`` under and the Hadoop settings for it.

    :param uri: a table (or folder) URI as delta-rs names it: ``s3://``/``s3a://``,
        ``az://``/``abfs://``/``abfss://``/``adl://``, ``gs://``.
    :param options: storage options as delta-rs names them (any case).
    :raises ValueError: for a URI of no object store, one without its bucket or account, or an
        option this cannot express for Hadoop.
    """
    opts = _options(options)
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme in ("s3", "s3a"):
        return _s3(parts.netloc, parts.path, opts)
    if scheme in ("az", "adl", "azure", "abfs", "abfss"):
        return _azure(scheme, parts.netloc, parts.path, opts)
    if scheme == "gs":
        return _gcs(parts.netloc, parts.path, opts)
    raise ValueError(f"{uri!r} is not an S3, Azure or GCS URI")


def _s3(bucket: str, path: str, opts: Mapping[str, str]) -> HadoopStoreConf:
    if not bucket:
        raise ValueError("an S3 URI needs a bucket: s3://<bucket>/<path>")
    prefix = f"fs.s3a.bucket.{bucket}."
    # S3A buffers each upload block on local disk by default, through FileSystem.getLocal,
    # which casts fs.file.impl to LocalFileSystem: the RawLocalFileSystem that loads set
    # (session.REQUIRED_CONF) fails that cast at the first write. Off-heap buffers instead;
    # each open file holds at most fs.s3a.fast.upload.active.blocks (4) blocks of
    # fs.s3a.multipart.size (64 MB) while they upload.
    settings: dict[str, str] = {prefix + "fast.upload.buffer": "bytebuffer"}
    secrets: dict[str, Secret] = {}
    endpoint = _first(opts, "AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_ENDPOINT_URL_S3")
    if endpoint:
        settings[prefix + "endpoint"] = endpoint
        # A custom endpoint (MinIO, SeaweedFS, an on-premises gateway) rarely serves
        # virtual-hosted bucket names; delta-rs uses path style there too unless told otherwise.
        virtual = opts.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "").lower() in _TRUE
        settings[prefix + "path.style.access"] = "false" if virtual else "true"
        if endpoint.lower().startswith("http://"):
            settings[prefix + "connection.ssl.enabled"] = "false"
    if opts.get("AWS_ALLOW_HTTP", "").lower() in _TRUE:
        settings[prefix + "connection.ssl.enabled"] = "false"
    region = _first(opts, "AWS_REGION", "AWS_DEFAULT_REGION")
    if region:
        settings[prefix + "endpoint.region"] = region
    key_id = opts.get("AWS_ACCESS_KEY_ID")
    secret = opts.get("AWS_SECRET_ACCESS_KEY")
    if bool(key_id) != bool(secret):
        raise ValueError("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY go together")
    if key_id and secret:
        # The access key id names the key; AWS does not treat it as a secret (it shows in
        # CloudTrail and error messages), so a log may show it.
        settings[prefix + "access.key"] = key_id
        secrets[prefix + "secret.key"] = Secret(secret)
        token = opts.get("AWS_SESSION_TOKEN") or opts.get("AWS_TOKEN")
        if token:
            secrets[prefix + "session.token"] = Secret(token)
        # Only the given keys: without this, S3A falls back along its chain (environment,
        # instance profile) when a key is refused, and would write as someone else.
        provider = "TemporaryAWSCredentialsProvider" if token else "SimpleAWSCredentialsProvider"
        settings[prefix + "aws.credentials.provider"] = f"org.apache.hadoop.fs.s3a.{provider}"
    return HadoopStoreConf(f"s3a://{bucket}{path}", settings, secrets)


def _azure_emulator(opts: Mapping[str, str]) -> str | None:
    """The emulator's ``http://host:port[/account]`` the options name, or ``None`` for Azure."""
    endpoint = _first(opts, "AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT")
    if endpoint:
        return endpoint
    use = _first(opts, "AZURE_STORAGE_USE_EMULATOR", "AZURE_USE_EMULATOR", "USE_EMULATOR") or ""
    if use.lower() in _TRUE:
        # object_store's default: the AZURITE_BLOB_STORAGE_URL of the process, else Azurite's port.
        return os.environ.get("AZURITE_BLOB_STORAGE_URL") or "http://127.0.0.1:10000"
    return None


def _azure(scheme: str, netloc: str, path: str, opts: Mapping[str, str]) -> HadoopStoreConf:
    emulator = _azure_emulator(opts)
    container, _, host = netloc.partition("@")
    if host:
        account = host.split(".", 1)[0]
    else:
        account = _first(opts, "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT", "ACCOUNT_NAME") or ""
    settings: dict[str, str] = {}
    if emulator:
        ep = urlsplit(emulator)
        named = ep.path.strip("/")
        if ep.scheme != "http" or not ep.hostname or not ep.port or "/" in named:
            raise ValueError(
                f"endpoint {emulator!r}: Hadoop's ABFS driver takes another endpoint only as an "
                "emulator's, http://<host>:<port>[/<account>] (path style, no TLS); this one is "
                "refused, not ignored"
            )
        account = account or named or EMULATOR_ACCOUNT
        if named and named != account:
            raise ValueError(f"endpoint {emulator!r} names the account {named!r}, the table {account!r}")
        opts = {"AZURE_STORAGE_ACCOUNT_KEY": EMULATOR_KEY, **opts} if account == EMULATOR_ACCOUNT else opts
        fqdn = f"{account}.{_DFS}"
        settings.update(
            {
                # Path-style http://host:port/<account>/<container>/<path> instead of the host.
                f"fs.azure.abfs.endpoint.{fqdn}": f"{ep.hostname}:{ep.port}",
                # Azurite serves the Blob API only: a flat namespace through the Blob endpoint.
                f"fs.azure.account.hns.enabled.{fqdn}": "false",
                f"fs.azure.fns.account.service.type.{fqdn}": "BLOB",
                # The Apache HTTP client ABFS picks by default wants a TLS socket factory even
                # for http:// ("SSL socket factory may not be null"); the JDK's does not.
                f"fs.azure.networking.library.{fqdn}": "JDK_HTTP_URL_CONNECTION",
                # Read for the whole session, not per account (a per-account key was ignored
                # and the driver spoke TLS to the http port): abfs:// then means http, as its
                # scheme says; abfss:// keeps TLS, and tables on Azure itself are abfss://.
                "fs.azure.always.use.https": "false",
            }
        )
        scheme = "abfs"
    if not container or not account:
        raise ValueError(
            f"an Azure URI needs a container and an account: {scheme}://<container>/<path> with "
            f"AZURE_STORAGE_ACCOUNT_NAME, or abfss://<container>@<account>.{_DFS}/<path>"
        )
    fqdn = f"{account}.{_DFS}"
    secrets: dict[str, Secret] = {}
    key = _first(opts, "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_ACCESS_KEY", "ACCESS_KEY", "ACCOUNT_KEY")
    sas = _first(opts, "AZURE_STORAGE_SAS_KEY", "AZURE_STORAGE_SAS_TOKEN", "SAS_KEY", "SAS_TOKEN")
    client_id = _first(opts, "AZURE_CLIENT_ID", "AZURE_STORAGE_CLIENT_ID")
    client_secret = _first(opts, "AZURE_CLIENT_SECRET", "AZURE_STORAGE_CLIENT_SECRET")
    tenant = _first(opts, "AZURE_TENANT_ID", "AZURE_STORAGE_TENANT_ID", "AZURE_AUTHORITY_ID")
    if key:
        settings[f"fs.azure.account.auth.type.{fqdn}"] = "SharedKey"
        secrets[f"fs.azure.account.key.{fqdn}"] = Secret(key)
    elif sas:
        settings[f"fs.azure.account.auth.type.{fqdn}"] = "SAS"
        secrets[f"fs.azure.sas.fixed.token.{fqdn}"] = Secret(sas.lstrip("?"))
    elif client_id and client_secret and tenant:
        settings[f"fs.azure.account.auth.type.{fqdn}"] = "OAuth"
        settings[f"fs.azure.account.oauth.provider.type.{fqdn}"] = (
            "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider"
        )
        settings[f"fs.azure.account.oauth2.client.id.{fqdn}"] = client_id
        secrets[f"fs.azure.account.oauth2.client.secret.{fqdn}"] = Secret(client_secret)
        settings[f"fs.azure.account.oauth2.client.endpoint.{fqdn}"] = (
            f"https://login.microsoftonline.com/{tenant}/oauth2/token"
        )
    # abfs:// (no TLS) only where the caller asked for it; everything else goes over TLS.
    spark_scheme = "abfs" if scheme == "abfs" else "abfss"
    return HadoopStoreConf(f"{spark_scheme}://{container}@{fqdn}{path}", settings, secrets)


def _gcs(bucket: str, path: str, opts: Mapping[str, str]) -> HadoopStoreConf:
    if not bucket:
        raise ValueError("a GCS URI needs a bucket: gs://<bucket>/<path>")
    for name in ("GOOGLE_BASE_URL", "GOOGLE_STORAGE_EMULATOR_HOST", "STORAGE_EMULATOR_HOST"):
        if opts.get(name):
            raise ValueError(f"{name}: not expressed for the GCS connector; refused, not ignored")
    # Both GCS connectors (Google's 2.2, Hadoop 3.5's hadoop-gcp) read their credentials from
    # fs.gs.* only, not per bucket. fs.gs.impl is left alone: Hadoop 3.5's core-default names
    # hadoop-gcp, Google's jar registers itself as a FileSystem service before that.
    # fs.gs.auth.type is hadoop-gcp's (3.x) switch, fs.gs.auth.service.account.enable 2.2's.
    settings: dict[str, str] = {}
    secrets: dict[str, Secret] = {}
    key_path = _first(
        opts, "GOOGLE_SERVICE_ACCOUNT_PATH", "GOOGLE_SERVICE_ACCOUNT", "SERVICE_ACCOUNT",
        "GOOGLE_APPLICATION_CREDENTIALS",
    )  # fmt: skip
    key_json = _first(opts, "GOOGLE_SERVICE_ACCOUNT_KEY", "SERVICE_ACCOUNT_KEY")
    if key_path:
        settings["fs.gs.auth.type"] = "SERVICE_ACCOUNT_JSON_KEYFILE"
        settings["fs.gs.auth.service.account.enable"] = "true"
        settings["fs.gs.auth.service.account.json.keyfile"] = key_path
    elif key_json:
        try:
            key: dict[str, Any] = json.loads(key_json)
            email, key_id, private = key["client_email"], key["private_key_id"], key["private_key"]
        except (ValueError, KeyError, TypeError):
            # The message names no part of the key: it is a secret, and malformed.
            raise ValueError(
                "GOOGLE_SERVICE_ACCOUNT_KEY is not a service account key (JSON with client_email, "
                "private_key_id, private_key)"
            ) from None
        settings["fs.gs.auth.service.account.enable"] = "true"
        settings["fs.gs.auth.service.account.email"] = email
        settings["fs.gs.auth.service.account.private.key.id"] = key_id
        secrets["fs.gs.auth.service.account.private.key"] = Secret(private)
    return HadoopStoreConf(f"gs://{bucket}{path}", settings, secrets)


def apply_to_session(spark: Any, conf: HadoopStoreConf) -> None:
    """Set ``conf`` on ``spark``'s Hadoop configuration, which every later job of the session
    takes (and ships to its executors).

    Hadoop caches a file system per scheme and bucket: set a bucket's settings before the
    session first touches that bucket; a change after it reaches only a new session.

    :param spark: a running SparkSession.
    :param conf: what :func:`hadoop_store_conf` returned.
    """
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in conf.revealed():
        hadoop.set(key, value)


def prepare_session(spark: Any, uri: str, options: Mapping[str, str] | None, what: str) -> str:
    """Make ``spark`` ready to read or write ``uri`` on an object store, and return the URI
    Spark uses for it: the store's connector must be on the driver's class path (refused,
    naming the fix, when it is not), and the store's settings are set on the session.

    :param uri: the table's or the landing prefix's URI, as delta-rs names it.
    :param options: its storage options (delta-rs' names).
    :param what: how messages name it (``table s3://b/t``, ``landing path s3://b/in``).
    :raises ConfigurationError: no connector, or an option Hadoop cannot be given.
    """
    from airflow_eod.core.errors import ConfigurationError

    try:
        conf = hadoop_store_conf(uri, options)
    except ValueError as exc:
        raise ConfigurationError(f"{what}: {exc}") from None
    scheme = conf.uri.split("://", 1)[0]
    try:
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()
        spark.sparkContext._jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, hadoop)
    except Exception:
        store = "s3" if scheme == "s3a" else "gcs" if scheme == "gs" else "azure"
        raise ConfigurationError(
            f"{what}: Spark cannot reach {scheme}:// because its connector is not on the driver's "
            f"class path: run `python -m airflow_eod.spark.cloud_jars {store}` once on the worker "
            "(the task adds the jars it fetched when it starts Spark), or put the connector on "
            "spark.driver.extraClassPath yourself"
        ) from None
    apply_to_session(spark, conf)
    return conf.uri
