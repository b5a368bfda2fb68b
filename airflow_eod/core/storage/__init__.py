"""Where airflow-eod's own bytes live: the storage seam and its local backend."""

from __future__ import annotations

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
    "settle_put",
    "storage_at",
]


def storage_at(root: str) -> Storage:
    """The storage of the table (or directory) at ``root``: the one place that picks a
    backend (a local path today; an object store's URI next)."""
    return LocalStorage(root=root)
