"""Where airflow-eod's own bytes live: the storage seam and its local backend."""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import re
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.storage.base import (
    BoundError,
    Head,
    NotFound,
    Storage,
    UnknownOutcome,
    UnlistableKey,
    object_lines,
    put_settled,
    settle_put,
)
from airflow_eod.core.storage.local import LocalStorage

__all__ = [
    "BoundError",
    "Head",
    "LocalStorage",
    "NotFound",
    "Storage",
    "UnknownOutcome",
    "UnlistableKey",
    "is_panic",
    "object_lines",
    "put_settled",
    "requests_logged",
    "settle_put",
    "storage_at",
]


@contextlib.contextmanager
def requests_logged(store: Storage | None, log: logging.Logger, what: str, label: object) -> Iterator[None]:
    """Log at debug level how many requests ``what`` (an ask, a commit, a planning) made to an
    object store (``store``; ``None`` for a local table, which makes none; ``label``: the
    batch or the pipeline it was for). The count is of this process's storage for the table,
    shared by threads: a figure for the operator's eye and the benchmarks, not an exact meter
    under concurrency."""
    counter = getattr(store, "requests", None)
    before = sum(counter.values()) if counter is not None else 0
    try:
        yield
    finally:
        if counter is not None and log.isEnabledFor(logging.DEBUG):
            made = sum(counter.values()) - before
            log.debug("%s: %s made %d requests to %s", label, what, made, store.where(""))  # type: ignore[union-attr]


def storage_at(root: str, options: Mapping[str, str] | None = None) -> Storage:
    """The storage of the table (or directory) at ``root``: the one place that picks a
    backend, by the root's URI scheme (none: the local file system).

    A local storage is new on each call (it remembers which directories it found to be no
    link, which must not outlive one use). An object store's is shared by every call with
    the same root and options (an HTTP client and its connections; a store has no links),
    so its request counts add up per process.

    :param root: a local path, or an object store URI (``s3://bucket/prefix``), or an HDFS
        one (``hdfs://namenode:port/path``).
    :param options: the store's storage options, named as delta-rs names them.
    :raises ConfigurationError: for a scheme no backend serves, or when the backend's
        package (``obstore``, the ``s3`` extra; ``hdfs-native``, the ``hdfs`` extra) is not
        installed.
    """
    if "://" not in root:
        return LocalStorage(root=root)
    return _object_storage(root, tuple(sorted((options or {}).items())))


# The module and class of each object store's backend, by URI scheme (imported when used:
# each needs obstore, an extra).
_BACKENDS = {
    "s3": ("object_store", "S3Storage"),
    "s3a": ("object_store", "S3Storage"),
    "az": ("azure_store", "AzureStorage"),
    "abfs": ("azure_store", "AzureStorage"),
    "abfss": ("azure_store", "AzureStorage"),
    "gs": ("gcs_store", "GCSStorage"),
    "hdfs": ("hdfs_store", "HdfsStorage"),
}
# The package each backend needs, and the extra that installs it.
_PACKAGES = {"hdfs_store": ("hdfs-native", "hdfs")}


# Storage options that name a URL the store's client sends requests to.
_URL_OPTION = re.compile(r"(^|_)(ENDPOINT(_URL)?(_S3)?|BASE_URL)$")


def _check_urls(root: str, options: tuple[tuple[str, str], ...]) -> None:
    """Refuse an endpoint that is no ``http(s)://host`` URL before any request: obstore takes
    it as given and panics in its first request (a ``PanicException``, which no ``except
    Exception`` catches), naming no option. The value is not echoed (it may hold a password)."""
    for name, value in options:
        upper = name.upper()
        if not _URL_OPTION.search(upper) or "_USE_" in upper:  # AZURE_USE_FABRIC_ENDPOINT: a flag
            continue
        text = str(value)
        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018 -- raises ValueError for a port that is no number
            ok = parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
        except ValueError:
            ok = False
        if not ok or any(c.isspace() or not c.isprintable() for c in text):
            raise ConfigurationError(
                f"{root}: the storage option {name} is no http:// or https:// URL with a host "
                "(a typo in the connection's host or extra?)"
            )


@functools.lru_cache(maxsize=64)
def _object_storage(root: str, options: tuple[tuple[str, str], ...]) -> Storage:
    scheme = root.split("://", 1)[0]
    if scheme not in _BACKENDS:
        raise ConfigurationError(f"{root}: no storage backend serves {scheme}:// in this release")
    _check_urls(root, options)
    module_name, class_name = _BACKENDS[scheme]
    try:
        module = importlib.import_module(f"airflow_eod.core.storage.{module_name}")
    except ImportError as exc:
        if module_name in _PACKAGES:
            package, extra = _PACKAGES[module_name]
            raise ConfigurationError(
                f"{root} is on {scheme}://, and reading it needs {package}: "
                f"pip install 'airflow-eod[{extra}]'"
            ) from exc
        raise ConfigurationError(
            f"{root} is on an object store, and reading it needs obstore: "
            "pip install 'airflow-eod[s3]' (or [azure], [gcs])"
        ) from exc
    try:
        storage: Storage = getattr(module, class_name).from_url(root, dict(options))
    except ValueError as exc:
        raise ConfigurationError(f"{root}: {exc}") from None
    except Exception as exc:
        # obstore refuses a malformed option (a flag that is no boolean, a key that is no
        # base64) when it builds the store: no retry mends that. Its message names the
        # option, not its value (checked for every store: no secret is echoed).
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigurationError(f"{root}: the storage options are refused: {first}") from None
    except BaseException as exc:
        if not is_panic(exc):
            raise
        raise ConfigurationError(f"{root}: the storage options made the store's client fail: {exc}") from None
    return storage


def is_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a panic of obstore's Rust code (pyo3's ``PanicException``, which
    derives from ``BaseException``: a bad option it took as given, met at the first request)."""
    return type(exc).__name__ == "PanicException"
