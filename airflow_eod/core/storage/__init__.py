"""Where airflow-eod's own bytes live: the storage seam and its local backend."""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
from collections.abc import Iterator, Mapping

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.storage.base import (
    BoundError,
    Head,
    NotFound,
    Storage,
    UnknownOutcome,
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

    :param root: a local path, or an object store URI (``s3://bucket/prefix``).
    :param options: the store's storage options, named as delta-rs names them.
    :raises ConfigurationError: for a scheme no backend serves, or when the backend's
        package (``obstore``, the ``s3`` extra) is not installed.
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
}


@functools.lru_cache(maxsize=64)
def _object_storage(root: str, options: tuple[tuple[str, str], ...]) -> Storage:
    scheme = root.split("://", 1)[0]
    if scheme not in _BACKENDS:
        raise ConfigurationError(f"{root}: no storage backend serves {scheme}:// in this release")
    module_name, class_name = _BACKENDS[scheme]
    try:
        module = importlib.import_module(f"airflow_eod.core.storage.{module_name}")
    except ImportError as exc:
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
    return storage
