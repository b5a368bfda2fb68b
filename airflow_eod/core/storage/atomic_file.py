"""Put-if-absent files and private files at a local path, for the callers that hold a path
rather than a table (the operator's and the driver's spec files): the local backend's
functions (:mod:`airflow_eod.core.storage.local`), under their former names."""

from __future__ import annotations

from airflow_eod.core.storage.local import fsync_directory, put_if_absent, write_private

__all__ = ["fsync_directory", "put_if_absent", "write_private"]
