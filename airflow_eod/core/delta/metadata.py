"""A Delta table's ``metaData`` and ``protocol`` actions, checked for the fields a reader
needs before any is used."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from airflow_eod.core import bounded_json
from airflow_eod.core.delta.reading import LOG_DIR
from airflow_eod.core.errors import CorruptTableError
from airflow_eod.core.table_ref import TableRef


@dataclass(frozen=True)
class TableMetadata:
    """The table's ``metaData`` action (attribute names as in ``deltalake.Metadata``)."""

    id: str
    name: str | None
    description: str | None
    schema_string: str
    partition_columns: list[str]
    created_time: int | None
    configuration: dict[str, str]


@dataclass(frozen=True)
class TableProtocol:
    """The table's ``protocol`` action (names as in ``deltalake.ProtocolVersions``)."""

    min_reader_version: int
    min_writer_version: int
    reader_features: list[str] | None
    writer_features: list[str] | None


def _metadata_from(body: dict[str, Any]) -> TableMetadata:
    return TableMetadata(
        id=str(body["id"]),
        name=body.get("name"),
        description=body.get("description"),
        schema_string=body["schemaString"],
        partition_columns=list(body.get("partitionColumns") or []),
        created_time=body.get("createdTime"),
        configuration=dict(body.get("configuration") or {}),
    )


def _protocol_from(body: dict[str, Any]) -> TableProtocol:
    return TableProtocol(
        int(body["minReaderVersion"]),
        int(body["minWriterVersion"]),
        body.get("readerFeatures"),
        body.get("writerFeatures"),
    )


def _as_dict(value: Any) -> dict[str, str]:
    # pyarrow returns a Parquet map as a list of (key, value) pairs.
    if isinstance(value, dict):
        return value
    return dict(value or [])


def _shapeless(ref: TableRef, action: str, exc: Exception) -> CorruptTableError:
    table_path = ref.path
    why = f"holds a {action} action without the fields every Delta table's has ({type(exc).__name__}: {exc})"
    return CorruptTableError(table_path, os.path.join(table_path, LOG_DIR), why)


def checked_metadata(ref: TableRef, action: Any) -> TableMetadata:
    """The ``metaData`` action the reading found, with the fields a reader needs:
    :class:`CorruptTableError` when it lacks them (a log made by hand, or by an attacker)."""
    try:
        body = dict(action)
        body["configuration"] = {str(k): str(v) for k, v in _as_dict(body.get("configuration")).items()}
        meta = _metadata_from(body)
        if not isinstance(meta.schema_string, str) or not all(
            isinstance(c, str) for c in meta.partition_columns
        ):
            raise TypeError("schemaString or partitionColumns is not text")
        # Parsed here, once per metaData read, so that every later parse of it (the schema
        # checks of a commit) meets a document of bounded size and nesting.
        schema = bounded_json.loads(meta.schema_string)
        if not isinstance(schema, dict) or not isinstance(schema.get("fields"), list):
            raise TypeError("schemaString is not a struct schema")
    except (KeyError, TypeError, ValueError) as exc:
        raise _shapeless(ref, "metaData", exc) from None
    return meta


def checked_protocol(ref: TableRef, action: Any) -> TableProtocol:
    """The ``protocol`` action the reading found (see :func:`checked_metadata`)."""
    try:
        proto = _protocol_from(action)
        for features in (proto.reader_features, proto.writer_features):
            if features is not None and not all(isinstance(f, str) for f in features):
                raise TypeError("readerFeatures or writerFeatures is not a list of names")
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise _shapeless(ref, "protocol", exc) from None
    return proto
