"""Rows that deletion vectors hide: another writer's DELETE, UPDATE or MERGE on a table with
the ``deletionVectors`` feature leaves the data file live and marks rows of it deleted.

``deltalake`` reports such a file's ``numRecords`` (what its statistics say, deleted rows
included) and no deletion vector, so whoever counts a file's rows, or removes the file,
asks here too: the audit counts rows net of them, and a restatement refuses to remove a
file with one (a ``remove`` that does not name the file's deletion vector removes nothing
for Delta Spark).
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse

import pyarrow as pa
from deltalake import DeltaTable

from airflow_eod.core.table_ref import TableRef


def has_deletion_vectors(table: DeltaTable) -> bool:
    """Whether the table's protocol lets writers add deletion vectors."""
    return "deletionVectors" in (table.protocol().reader_features or [])


def deleted_rows(ref: TableRef, table: DeltaTable) -> dict[str, int]:
    """Table-relative (decoded) path -> rows its deletion vector hides, for the snapshot's
    files that have one."""
    table_path = ref.path
    if not has_deletion_vectors(table):
        return {}
    if ref.is_local:
        roots = {os.path.abspath(table_path) + "/", os.path.realpath(table_path) + "/"}
    else:
        roots = {ref.location + "/"}
    out: dict[str, int] = {}
    for row in pa.table(table.deletion_vectors()).to_pylist():
        where = unquote(urlparse(row["filepath"]).path if ref.is_local else row["filepath"])
        rel = next((where[len(r) :] for r in roots if where.startswith(r)), where)
        hidden = sum(1 for keep in row["selection_vector"] if not keep)
        if hidden:
            out[rel] = hidden
    return out
