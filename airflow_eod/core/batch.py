"""Batch identity: pipeline ids, batch keys and the Delta ``txn`` appId derived from them.

A batch key is derived from the pipeline and the batch's boundary (a data interval or a
frozen offset range), never from a try number, the wall clock or a run id, so every
retry of a batch computes the same key.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_eod.core.errors import ConfigurationError

APP_ID_PREFIX = "eod"
_PIPELINE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$")
_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$")


def validate_pipeline_id(pipeline_id: str) -> str:
    """Return ``pipeline_id`` if it is usable in an appId and a path, else raise.

    :param pipeline_id: the stable name of one load into one table.
    """
    if not isinstance(pipeline_id, str) or not _PIPELINE_RE.match(pipeline_id):
        raise ConfigurationError(
            f"pipeline id {pipeline_id!r} is not valid: use 1-200 characters from "
            "letters, digits, '_', '.', '-', starting with a letter or digit"
        )
    return pipeline_id


def _utc(ts: datetime) -> datetime:
    if ts.tzinfo is None:
        raise ConfigurationError(f"interval bound {ts!r} has no time zone; pass an aware datetime")
    return ts.astimezone(UTC)


def _fmt(ts: datetime) -> str:
    u = _utc(ts)
    base = u.strftime("%Y%m%dT%H%M%S")
    return f"{base}{u.microsecond:06d}Z" if u.microsecond else f"{base}Z"


@dataclass(frozen=True)
class BatchKey:
    """The identity of one batch of one pipeline.

    :param pipeline_id: the pipeline (dedup namespace) the batch belongs to.
    :param key: the batch key inside the pipeline.
    """

    pipeline_id: str
    key: str

    def __post_init__(self) -> None:
        validate_pipeline_id(self.pipeline_id)
        if not _KEY_RE.match(self.key):
            raise ConfigurationError(f"batch key {self.key!r} is not valid")

    @property
    def app_id(self) -> str:
        """The Delta ``txn`` appId that marks this batch as committed."""
        return f"{APP_ID_PREFIX}:{self.pipeline_id}:{self.key}"

    @property
    def label(self) -> str:
        """``pipeline/key``, the name used in logs and errors."""
        return f"{self.pipeline_id}/{self.key}"

    def __str__(self) -> str:
        return self.label

    @classmethod
    def for_interval(cls, pipeline_id: str, start: datetime, end: datetime) -> BatchKey:
        """The key of the batch bounded by a DAG run's data interval ``[start, end)``."""
        if _utc(end) < _utc(start):
            raise ConfigurationError(f"data interval end {end} is before its start {start}")
        return cls(pipeline_id, f"i-{_fmt(start)}-{_fmt(end)}")

    @classmethod
    def for_offsets(cls, pipeline_id: str, seq: int, offsets: Any) -> BatchKey:
        """The key of the ``seq``-th offset batch; a fingerprint of the offsets is part of it."""
        if seq < 0:
            raise ConfigurationError(f"offset batch sequence {seq} is negative")
        return cls(pipeline_id, f"o-{seq:08d}-{fingerprint(offsets)[:12]}")

    @classmethod
    def from_app_id(cls, app_id: str) -> BatchKey | None:
        """Parse an appId written by airflow-eod; ``None`` for foreign appIds."""
        if not isinstance(app_id, str):
            return None
        parts = app_id.split(":")
        if len(parts) != 3 or parts[0] != APP_ID_PREFIX:
            return None
        try:
            return cls(parts[1], parts[2])
        except ConfigurationError:
            return None


def fingerprint(value: Any) -> str:
    """A stable SHA-256 of a JSON-serialisable value (keys sorted, no whitespace)."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()
