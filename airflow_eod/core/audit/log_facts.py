"""What a table's ``_delta_log/`` holds up to a version, read without trusting any writer.

Every JSON commit still in the log (adds with their ``dataChange`` and row counts, removes,
``txn`` markers, manifests, operations and their metrics, deletion vectors) and the markers
of the newest complete checkpoint: :class:`LogFacts`. The log is listed and read only through
the table's storage (:meth:`~airflow_eod.core.table_ref.TableRef.storage`): commits line by
line in ranges, each line bounded, and checkpoints as seekable objects (their footer, then
the ``txn`` column), so a link, a FIFO or a device in the log is refused unread.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq

from airflow_eod.core import bounded_json
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.delta.checkpoints import open_checkpoint
from airflow_eod.core.delta.commits import commit_lines
from airflow_eod.core.delta.reading import LOG_DIR
from airflow_eod.core.errors import CorruptTableError
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.storage import Storage
from airflow_eod.core.table_ref import TableRef

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")


@dataclass
class LogFacts:
    """The newest checkpoint's markers and what the JSON commits up to a version hold.

    :param checkpoint: the version of the newest complete checkpoint (``-1``: none).
    :param adds: decoded path -> (version, dataChange, numRecords) of its newest add.
    :param removes: decoded path -> (version, dataChange) of its newest remove.
    :param markers: appId -> (version, lastUpdated in ms) of the live ``txn`` markers.
    :param commits: version -> the (appId, version) markers that commit set.
    :param landed: (appId, version) -> (commit version, manifest rows, files it added).
    :param operations: version -> the commit's ``commitInfo.operation`` (``WRITE``, ``DELETE``...).
    :param changes: version -> (the files it added, the files it removed).
    :param metrics: version -> the commit's ``commitInfo.operationMetrics`` (Delta Spark's
        counts of the rows it updated, deleted, inserted...), empty when it has none.
    :param extras: (appId, version) -> the ``extra`` of the manifest of the commit that set it.
    :param hidden: version -> the files it removed and added back in place with a new deletion
        vector (a DELETE, UPDATE or MERGE on a table with deletion vectors) -> how many more rows
        that vector hides than the one it replaced.
    :param foreign: the (appId, version) markers of airflow-eod batches that a commit set
        without a manifest of that batch (another writer's idempotent write with its app id)
        -> that commit; only while no commit of the batch's own set the same marker.
    :param owned: the (appId, version) markers a commit with the batch's manifest set.
    :param removed_hidden: version -> the files it removed (not in place) that a deletion
        vector had rows of hidden -> how many.
    :param partitions: decoded path -> the partition values its newest add or remove gives
        (``None`` when that action gives none).
    :param set_by: appId -> (version, whether it carries a manifest of that batch) of the
        newest commit in the log that set its marker.
    """

    checkpoint: int = -1
    adds: dict[str, tuple[int, bool, int | None]] = field(default_factory=dict)
    removes: dict[str, tuple[int, bool]] = field(default_factory=dict)
    markers: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    commits: dict[int, set[tuple[str, int]]] = field(default_factory=dict)
    landed: dict[tuple[str, int], tuple[int, int | None, list[str]]] = field(default_factory=dict)
    operations: dict[int, str] = field(default_factory=dict)
    changes: dict[int, tuple[list[str], list[str]]] = field(default_factory=dict)
    metrics: dict[int, dict[str, Any]] = field(default_factory=dict)
    extras: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    hidden: dict[int, dict[str, int]] = field(default_factory=dict)
    foreign: dict[tuple[str, int], int] = field(default_factory=dict)
    owned: set[tuple[str, int]] = field(default_factory=set)
    removed_hidden: dict[int, dict[str, int]] = field(default_factory=dict)
    partitions: dict[str, frozenset[tuple[str, Any]] | None] = field(default_factory=dict)
    set_by: dict[str, tuple[int, bool]] = field(default_factory=dict)


def _partition_values(action: dict[str, Any]) -> frozenset[tuple[str, Any]] | None:
    values = action.get("partitionValues")
    return frozenset(values.items()) if isinstance(values, dict) else None


def _dv_rows(action: dict[str, Any]) -> int:
    """The rows the deletion vector of an ``add`` or ``remove`` hides (0: none)."""
    dv = action.get("deletionVector")
    return int(dv.get("cardinality") or 0) if isinstance(dv, dict) else 0


def _parts(name: str) -> int:
    m = _CHECKPOINT.match(name)
    return int(m.group(3)) if m and m.group(3) else 1


def _open_checkpoint(ref: TableRef, store: Storage, name: str) -> pq.ParquetFile:
    """The checkpoint file ``name`` of the log, as the log's reader opens it (through the
    storage, never through a link, never a FIFO or device)."""
    return open_checkpoint(os.path.join(ref.path, LOG_DIR, name), store)


def _checkpoint_markers(ref: TableRef, store: Storage, names: list[str], version: int, out: LogFacts) -> None:
    parts: dict[int, list[str]] = {}
    for n in names:
        if (m := _CHECKPOINT.match(n)) and int(m.group(1)) <= version:
            parts.setdefault(int(m.group(1)), []).append(n)
    # A multi-part checkpoint counts only with every part written (its writer may have died).
    complete = [v for v, ns in parts.items() if len(ns) == _parts(ns[0])]
    if not complete:
        return
    out.checkpoint = max(complete)
    for n in parts[out.checkpoint]:
        for t in _open_checkpoint(ref, store, n).read(columns=["txn"]).column("txn").to_pylist():
            if t:
                if not isinstance(t.get("appId"), str) or type(t.get("version")) is not int:
                    why = "has a txn marker without a string appId and an integer version"
                    raise CorruptTableError(ref.path, os.path.join(ref.path, LOG_DIR, n), why)
                out.markers[t["appId"]] = (t["version"], t.get("lastUpdated"))


def read_log_facts(ref: TableRef, version: int) -> LogFacts:
    """The facts of the table ``ref`` up to ``version`` (later commits are ignored, so that
    they agree with a snapshot read at ``version``).

    :param ref: the table.
    :param version: the table version the audit reads.
    """
    table_path, store, out = ref.path, ref.storage(), LogFacts()
    names = store.list(LOG_DIR)
    _checkpoint_markers(ref, store, names, version, out)
    for v in sorted(int(n[:20]) for n in names if _COMMIT.match(n) and int(n[:20]) <= version):
        name = f"{v:020d}.json"
        try:
            _commit_facts(v, _commit_actions(store, f"{LOG_DIR}/{name}"), out)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # ValueError: BoundError too
            why = f"is not a Delta commit ({type(exc).__name__}: {exc})"
            raise CorruptTableError(table_path, os.path.join(table_path, LOG_DIR, name), why) from None
    return out


def _commit_actions(store: Storage, key: str) -> list[dict[str, Any]]:
    """Every action of the commit at ``key``, read in ranges up to its size when looked at,
    each line bounded (see bounded_json); a link, a FIFO or a device is refused unread."""
    head = store.head(key)
    # Size 0 (or gone since listed): object_lines still asks the storage, which refuses a
    # FIFO, or raises NotFound.
    lines = commit_lines(store, key, head.size if head else 0)
    actions = [bounded_json.loads(line) for line in lines if line.strip()]
    if not all(isinstance(a, dict) for a in actions):
        raise TypeError("an action is not a JSON object")
    return actions


def _commit_facts(v: int, actions: list[dict[str, Any]], out: LogFacts) -> None:
    """Take what commit ``v`` (its ``actions``) holds into ``out``."""
    adds: list[str] = []
    removes: list[str] = []
    txns: set[tuple[str, int]] = set()
    manifest = None
    dv_added: dict[str, int] = {}
    dv_removed: dict[str, int] = {}
    for a in actions:
        if "add" in a:
            # Paths in the log are URIs: decoded, they are the file names on disk.
            adds.append(unquote(a["add"]["path"]))
            rows = bounded_json.loads(a["add"].get("stats") or "{}").get("numRecords")
            out.adds[adds[-1]] = (v, bool(a["add"].get("dataChange", True)), rows)
            out.partitions[adds[-1]] = _partition_values(a["add"])
            dv_added[adds[-1]] = _dv_rows(a["add"])
        elif "remove" in a:
            removes.append(unquote(a["remove"]["path"]))
            out.removes[removes[-1]] = (v, bool(a["remove"].get("dataChange", True)))
            out.partitions.setdefault(removes[-1], _partition_values(a["remove"]))
            dv_removed[removes[-1]] = _dv_rows(a["remove"])
        elif "txn" in a:
            txn = a["txn"]
            txns.add((txn["appId"], int(txn["version"])))
            # A commit at or below the checkpoint may sit in a hole a log cleanup left:
            # the checkpoint, not that file, holds the table's markers up to there.
            if v > out.checkpoint:
                out.markers[txn["appId"]] = (int(txn["version"]), txn.get("lastUpdated"))
        elif "commitInfo" in a:
            manifest = Manifest.from_user_metadata(a["commitInfo"].get("userMetadata"))
            out.operations[v] = str(a["commitInfo"].get("operation") or "unknown operation")
            metrics = a["commitInfo"].get("operationMetrics")
            out.metrics[v] = dict(metrics) if isinstance(metrics, dict) else {}
    out.commits[v], out.changes[v] = txns, (adds, removes)
    # A file removed and added back by one commit is the same file with a new deletion vector.
    in_place = {f: dv_added[f] - dv_removed[f] for f in dv_added if f in dv_removed}
    if in_place:
        out.hidden[v] = in_place
    if gone := {f: n for f, n in dv_removed.items() if n and f not in in_place}:
        out.removed_hidden[v] = gone
    for txn_key in txns:
        batch = BatchKey.from_app_id(txn_key[0])
        own = batch is not None and manifest is not None and manifest.batch_key == batch.key
        out.set_by[txn_key[0]] = (v, own)
        if batch is not None and (manifest is None or manifest.batch_key != batch.key):
            # Another writer's write with a batch's app id: never the batch's landing, and
            # foreign only while no commit of the batch's own set the same marker.
            if txn_key not in out.owned:
                out.foreign[txn_key] = v
                out.landed.setdefault(txn_key, (v, None, sorted(adds)))
            continue
        out.landed[txn_key] = (v, manifest.rows if manifest else None, sorted(adds))
        if manifest is not None:
            out.extras[txn_key] = dict(manifest.extra)
        if batch is not None:
            out.owned.add(txn_key)
            out.foreign.pop(txn_key, None)
