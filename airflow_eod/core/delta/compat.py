"""Checks that a target table is one the delta-rs commit engine can honour, and that a
batch's schema matches it.

The engine adds files that Spark wrote; it does not evaluate CHECK constraints, generated
or identity columns, or column mapping, so a table that uses them is refused instead of
being silently corrupted. :data:`TABLE_FEATURES` says, for every table feature Delta Spark
turns on today, whether the engine writes such a table and why (docs/reference.md, "Tables
with Delta table features", is the same table, and a test holds the two together).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from airflow_eod.core.delta.log import TableLog
from airflow_eod.core.errors import SchemaMismatchError, UnsupportedTableError
from airflow_eod.core.table_ref import TableRef


@dataclass(frozen=True)
class TableFeature:
    """What the delta-rs commit engine does with a table that has one Delta table feature.

    :param writes: whether its commits keep what the feature asks of a writer.
    :param why: what the feature asks of a writer, and how the engine keeps it (or why not).
    """

    writes: bool
    why: str


# Every table feature (a name in the protocol's readerFeatures/writerFeatures) the engine
# knows; a feature not named here is refused, as is every one with writes=False. The
# delta-spark engine leaves each feature to Delta Spark's own writer.
TABLE_FEATURES: dict[str, TableFeature] = {
    "appendOnly": TableFeature(
        True, "loads only add files; a restatement (it removes files) is refused before staging"
    ),
    "invariants": TableFeature(
        True,
        "the feature alone (Delta Spark lists it on every table) asks nothing; a column with a "
        "`delta.invariants` expression is refused, NOT NULL columns are checked on the staged "
        "files' statistics",
    ),
    "timestampNtz": TableFeature(True, "the batch's schema must match; nothing else is asked of a writer"),
    "changeDataFeed": TableFeature(
        True,
        "a load adds whole files and a restatement removes whole files, which change-data readers "
        "read as inserts and deletes: no change-data files are needed",
    ),
    "deletionVectors": TableFeature(
        True,
        "loads add files without deletion vectors; a restatement of a batch whose files another "
        "writer deleted rows from (a deletion vector) is refused, and `verify` counts rows net of them",
    ),
    "domainMetadata": TableFeature(
        True, "commits add no domains, and the engine's checkpoints keep every domain they find"
    ),
    "clustering": TableFeature(
        True,
        "loads add unclustered files (no `clusteringProvider`), as Delta Spark's own INSERT does; "
        "the clustering domain is kept; OPTIMIZE clusters them later",
    ),
    "inCommitTimestamp": TableFeature(
        True, "each commit opens with `commitInfo.inCommitTimestamp`, later than its predecessor's"
    ),
    "typeWidening": TableFeature(
        True, "the engine never changes a column's type (a batch of another type is a schema mismatch)"
    ),
    "vacuumProtocolCheck": TableFeature(
        True, "asks only that VACUUM checks the protocol; the engine never vacuums"
    ),
    "columnMapping": TableFeature(
        False,
        "Spark stages files with the logical column names, while the table reads physical names "
        "(mode name) or field ids (mode id): the rows would read back as nulls",
    ),
    "rowTracking": TableFeature(
        False, "new files need `baseRowId`, `defaultRowCommitVersion` and a new row-id high-water mark"
    ),
    "v2Checkpoint": TableFeature(
        False, "the engine writes classic checkpoints, and its log reader does not follow V2 sidecars"
    ),
    "checkConstraints": TableFeature(False, "the engine does not evaluate CHECK constraints on the rows"),
    "generatedColumns": TableFeature(False, "the engine does not compute generated columns"),
    "identityColumns": TableFeature(
        False, "the engine does not assign identity values or move the high-water mark"
    ),
    "variantType": TableFeature(False, "the engine's statistics and checks do not cover VARIANT columns"),
}

# Writer features whose rules an append (and a file swap) by this engine keeps.
SUPPORTED_WRITER_FEATURES = frozenset(n for n, f in TABLE_FEATURES.items() if f.writes)


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


def features_in_use(table: TableLog) -> set[str]:
    """The table's features: those its protocol lists, and those a table of a legacy protocol
    version (no feature lists) uses, told by its metadata (a CHECK constraint, column
    mapping, a generated or an identity column)."""
    protocol = table.protocol()
    features = set(protocol.writer_features or []) | set(protocol.reader_features or [])
    config = table.metadata().configuration
    if any(k.startswith("delta.constraints.") for k in config):
        features.add("checkConstraints")
    if config.get("delta.columnMapping.mode") not in (None, "none"):
        features.add("columnMapping")
    for _, meta in _walk_metadata(_fields(table.schema_json())):
        if "delta.generationExpression" in meta:
            features.add("generatedColumns")
        if any(k.startswith("delta.identity.") for k in meta):
            features.add("identityColumns")
    return features


def unsupported_features(table: TableLog) -> list[str]:
    """Why the engine cannot write ``table``, one reason per item; empty if it can."""
    reasons: list[str] = []
    for name in sorted(features_in_use(table) - SUPPORTED_WRITER_FEATURES):
        known = TABLE_FEATURES.get(name)
        why = known.why if known else "a feature airflow-eod does not know"
        reasons.append(f"table feature {name} ({why})")
    config = table.metadata().configuration
    constraints = sorted(k for k in config if k.startswith("delta.constraints."))
    if constraints:
        reasons.append(f"CHECK constraints ({', '.join(c.split('.', 2)[2] for c in constraints)})")
    mode = config.get("delta.columnMapping.mode")
    if mode not in (None, "none"):
        reasons.append(f"column mapping (mode {mode})")
    for name, meta in _walk_metadata(_fields(table.schema_json())):
        if "delta.generationExpression" in meta:
            reasons.append(f"generated column {name}")
        if any(k.startswith("delta.identity.") for k in meta):
            reasons.append(f"identity column {name}")
        if "delta.invariants" in meta:
            reasons.append(f"column invariant on {name}")
    return reasons


def check_writable(table: TableLog, ref: TableRef) -> None:
    """Raise :class:`UnsupportedTableError` if the engine cannot honour ``table``."""
    reasons = unsupported_features(table)
    if reasons:
        raise UnsupportedTableError(
            f"table {ref} uses {'; '.join(reasons)}; the delta-rs commit engine cannot keep "
            "that, so nothing was read or staged: use engine='delta-spark' for this table "
            "(Delta Spark's writer keeps every feature it turned on), or drop the feature"
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


SCHEMA_FAIL = "fail"
SCHEMA_ADD_COLUMNS = "add_columns"


def schema_differences(table_schema_json: str, batch_schema_json: str) -> list[str]:
    """Human-readable differences between the table's and the batch's columns."""
    new, missing, changed = _diff(table_schema_json, batch_schema_json)
    return (
        [f"new column {f['name']} ({json.dumps(_strip(f['type']))})" for f in new]
        + [f"missing column {c}" for c in missing]
        + changed
    )


def _diff(
    table_schema_json: str, batch_schema_json: str
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    table_cols = {f["name"]: _strip(f["type"]) for f in _fields(table_schema_json)}
    batch_fields = _fields(batch_schema_json)
    batch_cols = {f["name"]: _strip(f["type"]) for f in batch_fields}
    new = [f for f in batch_fields if f["name"] not in table_cols]
    missing = [c for c in table_cols if c not in batch_cols]
    changed = [
        f"column {c} is {json.dumps(batch_cols[c])} in the batch but {json.dumps(table_cols[c])} in the table"
        for c in batch_cols
        if c in table_cols and batch_cols[c] != table_cols[c]
    ]
    return new, missing, changed


def check_schema(
    table: TableLog,
    batch_schema_json: str,
    partition_by: list[str],
    batch_label: str,
    policy: str = SCHEMA_FAIL,
    *,
    computed: frozenset[str] = frozenset(),
) -> str | None:
    """Check the batch's schema against the table's.

    :param computed: top-level columns the writer fills itself (Delta Spark computes
        generated and identity columns, :func:`computed_columns`): a batch need not carry them.
    :returns: ``None`` when the batch fits the table as it is, or the widened table schema
        (JSON) when the policy is ``add_columns`` and the batch only brings new columns.
    :raises SchemaMismatchError: for any other difference; type changes always fail.
    """
    table_json = table.schema_json()
    compared = _without(table_json, computed) if computed else table_json
    new, missing, changed = _diff(compared, batch_schema_json)
    table_parts = list(table.metadata().partition_columns)
    problems = schema_differences(compared, batch_schema_json)
    if partition_by and list(partition_by) != table_parts:
        problems.append(f"partition columns {partition_by} but the table has {table_parts}")
    if not problems:
        return None
    evolvable = new and not changed and not _other_partitions(partition_by, table_parts)
    if policy == SCHEMA_ADD_COLUMNS and evolvable:
        features = set(table.protocol().writer_features or [])
        if "timestamp_ntz" in json.dumps(new) and "timestampNtz" not in features:
            raise SchemaMismatchError(
                batch_label,
                "new timestamp_ntz columns need the table feature timestampNtz, which the table "
                "lacks; add the column with ALTER TABLE first",
            )
        body = json.loads(table_json)
        body["fields"] += [dict(f, nullable=True) for f in new]
        return json.dumps(body)
    if policy == SCHEMA_ADD_COLUMNS and not changed and missing and not new:
        return None  # columns the batch lacks are read back as nulls
    hint = _way_out(
        table, new, missing, changed, partitions_match=not _other_partitions(partition_by, table_parts)
    )
    raise SchemaMismatchError(
        batch_label, "schema does not match the target table: " + "; ".join(problems) + hint
    )


def computed_columns(table: TableLog) -> frozenset[str]:
    """Top-level columns whose values the table's writer computes: generated columns
    (``delta.generationExpression``) and identity columns (``delta.identity.*``)."""
    return frozenset(
        f["name"]
        for f in _fields(table.schema_json())
        if "delta.generationExpression" in (f.get("metadata") or {})
        or any(k.startswith("delta.identity.") for k in (f.get("metadata") or {}))
    )


def _without(schema_json: str, names: frozenset[str]) -> str:
    body = json.loads(schema_json)
    body["fields"] = [f for f in body["fields"] if f["name"] not in names]
    return json.dumps(body)


def _other_partitions(partition_by: list[str], table_parts: list[str]) -> bool:
    """Whether the batch asks for partition columns other than the table's."""
    return bool(partition_by) and list(partition_by) != table_parts


def _way_out(
    table: TableLog,
    new: list[dict[str, Any]],
    missing: list[str],
    changed: list[str],
    *,
    partitions_match: bool,
) -> str:
    """The way out of a schema mismatch that fits it, as the end of the error message.

    A column only the table has is most often another writer's ``ALTER TABLE ADD COLUMNS``:
    ``add_columns`` loads this pipeline's rows with it null, unless the table declares it
    NOT NULL; then only a batch that carries it (the operator's schema, or the transform) fits.
    """
    if changed or not partitions_match:
        return ""
    if new and not missing:
        return "; set schema_drift='add_columns' to add the new nullable columns in the batch's commit"
    if not missing:
        return ""
    names = ", ".join(missing)
    required = [c for c in missing if c in set(not_null_columns(table))]
    carry = (
        f"declare {names} in the operator's schema (if the source carries it) or add it in the "
        "transform, so that the batch has the table's columns"
    )
    if required:
        return (
            f"; the table has column(s) {names} that the batch lacks (another writer's ALTER TABLE "
            f"ADD COLUMNS?), and {', '.join(required)} is NOT NULL in the table, so "
            f"schema_drift='add_columns' cannot fill it with nulls: {carry}"
        )
    also = " and to add the batch's new columns in its commit" if new else ""
    return (
        f"; the table has column(s) {names} that the batch lacks (another writer's ALTER TABLE "
        f"ADD COLUMNS?): set schema_drift='add_columns' to load this pipeline's rows with "
        f"{names} null{also}, or {carry}"
    )


def variant_columns(schema_json: str) -> list[str]:
    """The columns of a batch's Spark schema that are or hold a VARIANT: a table of them
    needs table feature variantType, which this engine does not write (TABLE_FEATURES)."""

    def holds(t: Any) -> bool:
        if t == "variant":
            return True
        if isinstance(t, dict):
            kind = t.get("type")
            if kind == "struct":
                return any(holds(f["type"]) for f in t["fields"])
            if kind == "array":
                return holds(t["elementType"])
            if kind == "map":
                return holds(t["keyType"]) or holds(t["valueType"])
        return False

    return [f["name"] for f in _fields(schema_json) if holds(f["type"])]


def not_null_columns(table: TableLog) -> list[str]:
    """Top-level columns the table declares NOT NULL."""
    return [f["name"] for f in _fields(table.schema_json()) if not f.get("nullable", True)]
