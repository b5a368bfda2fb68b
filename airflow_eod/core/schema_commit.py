"""The schema-widening commit: a batch's files, its marker and a widened ``metaData`` in
one Delta commit, written by airflow-eod itself.

delta-rs's append cannot carry a ``metaData`` action (its overwrite mode would remove
files), so this one commit is written here, put-if-absent into ``_delta_log/<v+1>.json`` as
the local log store does. ``add.path`` is a URI in the Delta protocol, so it is
percent-encoded the way delta-rs encodes it.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any
from urllib.parse import quote

from deltalake import DeltaTable
from deltalake.transaction import AddAction

from airflow_eod.core.atomic_file import put_if_absent
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.manifest import Manifest

# RFC 3986 path characters that need no escaping; the Delta protocol stores ``add.path`` as
# a URI, so '%', ' ', '#', '?', '[', non-ASCII, ... are percent-encoded, as delta-rs does.
_URI_SAFE = "/!$&'()*+,;=:@"


def uri_path(path: str) -> str:
    """A table-relative file path as the Delta log stores it (percent-encoded)."""
    return quote(path, safe=_URI_SAFE)


def commit_with_new_schema(
    path: str,
    table: DeltaTable,
    schema_json: str,
    adds: list[AddAction],
    manifest: Manifest,
    batch: BatchKey,
    generation: int,
) -> bool:
    """Write the next commit of ``table`` with a widened ``metaData``, the files and the marker.

    delta-rs's append cannot carry a ``metaData`` action (its overwrite mode would remove
    files), so this one commit is written here, with the same put-if-absent link the local
    log store uses: if another writer took the version, nothing is written and the caller
    goes back to the ask. Returns whether the commit was written.
    """
    meta = table.metadata()
    now = int(time.time() * 1000)
    actions: list[Any] = [
        {
            "commitInfo": {
                "timestamp": now,
                "operation": "WRITE",
                "operationParameters": {"mode": "Append", "schemaEvolution": "addColumns"},
                "userMetadata": manifest.to_user_metadata(),
                "engineInfo": "airflow-eod",
                "isBlindAppend": True,
            }
        },
        {
            "metaData": {
                "id": meta.id,
                "name": meta.name,
                "description": meta.description,
                "format": {"provider": "parquet", "options": {}},
                "schemaString": schema_json,
                "partitionColumns": list(meta.partition_columns),
                "createdTime": meta.created_time,
                "configuration": dict(meta.configuration or {}),
            }
        },
        *(
            {
                "add": {
                    "path": uri_path(a.path),
                    "partitionValues": dict(a.partition_values),
                    "size": a.size,
                    "modificationTime": a.modification_time,
                    "dataChange": True,
                    "stats": a.stats,
                }
            }
            for a in adds
        ),
        {"txn": {"appId": batch.app_id, "version": generation, "lastUpdated": now}},
    ]
    target = os.path.join(path, "_delta_log", f"{table.version() + 1:020d}.json")
    return put_if_absent(target, "\n".join(json.dumps(a) for a in actions) + "\n")
