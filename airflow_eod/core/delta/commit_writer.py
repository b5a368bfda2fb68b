"""The Delta commit, written by airflow-eod itself: a batch's files, its ``txn`` marker, its
manifest (and a widened ``metaData`` or a restatement's removes) in one log entry.

``deltalake``'s write transaction needs a snapshot with every live file loaded, and its
cost grows with the table. A commit needs far less: the version it follows and the table's
metadata, both of which :mod:`airflow_eod.core.delta.log` reads in a bounded way. The entry
goes to ``_delta_log/<v+1>.json`` with a put-if-absent link, as the local log store does: if
another writer took the version, nothing is written and the caller goes back to the ask.

Every ``delta.checkpointInterval`` commits (100 by default, as in ``deltalake``) the
committer writes a checkpoint, so that readers after it read few commits, and then removes
log entries past ``delta.logRetentionDuration`` unless ``delta.enableExpiredLogCleanup``
is false: what ``deltalake``'s own post-commit hook did.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from deltalake import DeltaTable
from deltalake.transaction import AddAction, RemoveAction

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.delta.checkpoint_index import index_after_checkpoint
from airflow_eod.core.delta.log import (
    TableLog,
    checkpoint_path,
    commit_path,
    read_checkpoint_markers,
    read_commit_actions,
)
from airflow_eod.core.delta.reading import log_key
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.storage import put_settled
from airflow_eod.core.table_ref import TableRef

log = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_INTERVAL = 100
# RFC 3986 path characters that need no escaping; the Delta protocol stores ``add.path`` as
# a URI, so '%', ' ', '#', '?', '[', non-ASCII, ... are percent-encoded, as delta-rs does.
# The paths this engine commits hold only letters, digits and "._-=%/" (see
# airflow_eod.spark.staging._ascii_partition_dirs): every writer spells those alike.
_URI_SAFE = "/!$&'()*+,;=:@"


def uri_path(path: str) -> str:
    """A table-relative file path as the Delta log stores it (percent-encoded)."""
    return quote(path, safe=_URI_SAFE)


def _add(a: AddAction) -> dict[str, Any]:
    return {
        "add": {
            "path": uri_path(a.path),
            "partitionValues": dict(a.partition_values),
            "size": a.size,
            "modificationTime": a.modification_time,
            "dataChange": True,
            "stats": a.stats,
        }
    }


def _remove(r: RemoveAction, now: int) -> dict[str, Any]:
    """A ``remove`` of the file whose ``add`` spells its path ``r.path`` (verbatim: see
    :func:`airflow_eod.core.replaced_files.batch_files`)."""
    body: dict[str, Any] = {
        "path": r.path,
        "deletionTimestamp": r.deletion_timestamp or now,
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": dict(r.partition_values or {}),
    }
    if r.size is not None:
        body["size"] = r.size
    return {"remove": body}


def in_commit_timestamp(table: TableLog, now: int) -> int | None:
    """The ``inCommitTimestamp`` the commit after ``table`` carries, or ``None`` when the
    table does not use in-commit timestamps.

    The protocol asks for one in the first action (``commitInfo``) of every commit once
    ``delta.enableInCommitTimestamps`` is on, each later than its predecessor's, whatever
    the clocks say: readers and time travel order versions by it.
    """
    features = table.protocol().writer_features or []
    enabled = table.metadata().configuration.get("delta.enableInCommitTimestamps", "false")
    if "inCommitTimestamp" not in features or enabled.lower() != "true":
        return None
    previous = read_commit_actions(table.ref, table.version(), {"commitInfo"}) or []
    before = [a["commitInfo"].get("inCommitTimestamp") for a in previous]
    stamps = [t for t in before if type(t) is int]
    return max([now, *(t + 1 for t in stamps)])


def write_commit(
    table: TableLog,
    batch: BatchKey,
    generation: int,
    manifest: Manifest,
    adds: Sequence[AddAction],
    removes: Sequence[RemoveAction] = (),
    *,
    schema_json: str | None = None,
    operation: str = "WRITE",
) -> bool:
    """Write the commit that follows ``table``'s version; ``False`` if another writer took it.

    :param table: the snapshot the marker was checked against.
    :param schema_json: a widened table schema, carried in a ``metaData`` action.
    :param operation: the ``commitInfo`` operation: ``WRITE``, or ``MERGE`` for a merge load.
    """
    now = int(time.time() * 1000)
    params: dict[str, Any] = {"mode": "Append"} if operation == "WRITE" else {}
    if schema_json is not None:
        params["schemaEvolution"] = "addColumns"
    info: dict[str, Any] = {}
    stamp = in_commit_timestamp(table, now)
    if stamp is not None:
        info["inCommitTimestamp"] = stamp
    actions: list[dict[str, Any]] = [
        {
            "commitInfo": {
                **info,
                "timestamp": now if stamp is None else stamp,
                "operation": operation,
                "operationParameters": params,
                "readVersion": table.version(),
                "userMetadata": manifest.to_user_metadata(),
                "engineInfo": "airflow-eod",
                "isBlindAppend": not removes,
            }
        }
    ]
    if schema_json is not None:
        meta = table.metadata()
        actions.append(
            {
                "metaData": {
                    "id": meta.id,
                    "name": meta.name,
                    "description": meta.description,
                    "format": {"provider": "parquet", "options": {}},
                    "schemaString": schema_json,
                    "partitionColumns": list(meta.partition_columns),
                    "createdTime": meta.created_time,
                    "configuration": dict(meta.configuration),
                }
            }
        )
    actions += [_add(a) for a in adds]
    actions += [_remove(r, now) for r in removes]
    actions.append({"txn": {"appId": batch.app_id, "version": generation, "lastUpdated": now}})
    target = commit_path(table.ref, table.version() + 1)
    data = ("\n".join(json.dumps(a) for a in actions) + "\n").encode()
    # The attempt id, which the manifest in the body carries: a write whose reply was lost is
    # known for this attempt's by reading it back (never through a link out of the table).
    attempt = manifest.attempt_id if manifest.attempt_id and manifest.attempt_id.encode() in data else None
    return put_settled(table.ref.storage(), log_key(target), data, attempt=attempt)


def checkpoint_due(table: TableLog, committed: int) -> bool:
    """Whether the commit at version ``committed`` (which followed ``table``) should be
    followed by a checkpoint: the newest one is an interval or more behind."""
    raw = table.metadata().configuration.get("delta.checkpointInterval")
    try:
        interval = max(1, int(raw)) if raw else DEFAULT_CHECKPOINT_INTERVAL
    except ValueError:
        interval = DEFAULT_CHECKPOINT_INTERVAL
    return committed - max(table.checkpoint_version, 0) >= interval


def write_checkpoint(ref: TableRef, version: int, configuration: dict[str, str]) -> None:
    """Checkpoint the table at ``version`` and clean up expired log entries, best effort.

    A failure here loses nothing: the commit has landed, and the next commit tries again
    (the checkpoint is due for as long as the newest one is an interval behind).
    """
    table_path = ref.path
    try:
        snapshot = DeltaTable(table_path, version=version, storage_options=ref.storage_options)
        snapshot.create_checkpoint()
        written = checkpoint_path(ref, version)
        if ref.storage().head(log_key(written)) is not None:
            index_after_checkpoint(ref, version, [written], read_checkpoint_markers)
        if configuration.get("delta.enableExpiredLogCleanup", "true").lower() != "false":
            snapshot.cleanup_metadata()
    except Exception as exc:
        log.warning(
            "could not checkpoint %s at version %d (the next commit retries): %s", table_path, version, exc
        )
