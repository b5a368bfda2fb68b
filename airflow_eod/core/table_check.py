"""Checks that a target table is one the delta-rs commit engine can honour, and that a
batch's schema matches it.

The engine adds files that Spark wrote; it does not evaluate CHECK constraints, generated
or identity columns, or column mapping, so a table that uses them is refused instead of
being silently corrupted.
"""

from __future__ import annotations

import json
from typing import Any

from deltalake import DeltaTable

from airflow_eod.core.errors import SchemaMismatchError, UnsupportedTableError

# Writer features whose rules an append (and a file swap) by this engine keeps.
SUPPORTED_WRITER_FEATURES = frozenset({"appendOnly", "invariants", "timestampNtz"})


def _fields(schema_json: str) -> list[dict[str, Any]]:
    fields: list[dict[str, Any]] = json.loads(schema_json)["fields"]
    return fields


def _walk_metadata(fields: list[dict[str, Any]], prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for f in fields:
        name = prefix + f["name"]
        out.append((name, f.get("metadata") or {}))
        t = f["type"]
        if isinstance(t, dict) and t.get("type") == "struct":
            out.extend(_walk_metadata(t["fields"], name + "."))
    return out


def unsupported_features(table: DeltaTable) -> list[str]:
    """Why the engine cannot write ``table``, one reason per item; empty if it can."""
    reasons: list[str] = []
    protocol = table.protocol()
    features = set(protocol.writer_features or [])
    unknown = sorted(features - SUPPORTED_WRITER_FEATURES)
    if unknown:
        reasons.append(f"writer features {', '.join(unknown)}")
    config = table.metadata().configuration or {}
    constraints = sorted(k for k in config if k.startswith("delta.constraints."))
    if constraints:
        reasons.append(f"CHECK constraints ({', '.join(c.split('.', 2)[2] for c in constraints)})")
    mode = config.get("delta.columnMapping.mode")
    if mode not in (None, "none"):
        reasons.append(f"column mapping (mode {mode})")
    for name, meta in _walk_metadata(_fields(table.schema().to_json())):
        if "delta.generationExpression" in meta:
            reasons.append(f"generated column {name}")
        if any(k.startswith("delta.identity.") for k in meta):
            reasons.append(f"identity column {name}")
        if "delta.invariants" in meta:
            reasons.append(f"column invariant on {name}")
    return reasons


def check_writable(table: DeltaTable, table_uri: str) -> None:
    """Raise :class:`UnsupportedTableError` if the engine cannot honour ``table``."""
    reasons = unsupported_features(table)
    if reasons:
        raise UnsupportedTableError(
            f"table {table_uri} uses {'; '.join(reasons)}, which the delta-rs commit engine "
            "cannot enforce on files written by Spark; use engine='delta-spark' for this "
            "table, or drop the feature"
        )


def _strip(t: Any) -> Any:
    """A type with nullability and field metadata removed, for comparison."""
    if isinstance(t, dict):
        kind = t.get("type")
        if kind == "struct":
            return {"struct": [(f["name"], _strip(f["type"])) for f in t["fields"]]}
        if kind == "array":
            return {"array": _strip(t["elementType"])}
        if kind == "map":
            return {"map": (_strip(t["keyType"]), _strip(t["valueType"]))}
    return t


def schema_differences(table_schema_json: str, batch_schema_json: str) -> list[str]:
    """Human-readable differences between the table's and the batch's columns."""
    table_cols = {f["name"]: _strip(f["type"]) for f in _fields(table_schema_json)}
    batch_cols = {f["name"]: _strip(f["type"]) for f in _fields(batch_schema_json)}
    diffs = [f"new column {c} ({json.dumps(batch_cols[c])})" for c in batch_cols if c not in table_cols]
    diffs += [f"missing column {c}" for c in table_cols if c not in batch_cols]
    diffs += [
        f"column {c} is {json.dumps(batch_cols[c])} in the batch but {json.dumps(table_cols[c])} in the table"
        for c in batch_cols
        if c in table_cols and batch_cols[c] != table_cols[c]
    ]
    return diffs


def check_schema(
    table: DeltaTable, batch_schema_json: str, partition_by: list[str], batch_label: str
) -> None:
    """Raise :class:`SchemaMismatchError` unless the batch fits the table exactly."""
    diffs = schema_differences(table.schema().to_json(), batch_schema_json)
    table_parts = list(table.metadata().partition_columns)
    if partition_by and list(partition_by) != table_parts:
        diffs.append(f"partition columns {partition_by} but the table has {table_parts}")
    if diffs:
        raise SchemaMismatchError(batch_label, "schema does not match the target table: " + "; ".join(diffs))


def not_null_columns(table: DeltaTable) -> list[str]:
    """Top-level columns the table declares NOT NULL."""
    return [f["name"] for f in _fields(table.schema().to_json()) if not f.get("nullable", True)]
