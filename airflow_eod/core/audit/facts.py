"""What a table's log and plan log hold, read without trusting any writer's summary of it.

:mod:`airflow_eod.core.audit.verify` judges these facts; this module only reads them, and
reads all of them (an audit is not the hot path): the live files with their statistics as
delta-rs reports them, every JSON commit still in ``_delta_log/`` (adds with their
``dataChange`` and row counts, removes, ``txn`` markers, manifests), the markers of the
newest checkpoint, and every commit record and plan in the plan log. Unlike the ask
(:mod:`airflow_eod.core.ask`) it neither repairs nor judges anything. It opens a data file
only for the Parquet footer of a file without statistics and, in :func:`same_bytes`, for the
bytes of files the audit suspects to be copies; and only through :func:`open_in_table`, which
follows no link and opens nothing but a regular file under the table's directory (a live
file that is a link to ``/dev/zero`` would otherwise be hashed forever).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Any, BinaryIO
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from airflow_eod.core import bounded_json
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.delta.deletion_vectors import deleted_rows
from airflow_eod.core.delta.log import open_checkpoint
from airflow_eod.core.errors import CorruptTableError, EodError, UnsafePathError
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.records.record_files import RecordStore
from airflow_eod.core.table_layout import DATA_DIR, META_DIR, path_part

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")
_PLAN = re.compile(r"^(.+?)(?:\.g(\d+))?\.json$")
_ATTEMPT = re.compile(r"^g(\d+)-")  # an attempt directory: g<generation>-<attempt>


@dataclass(frozen=True)
class LiveFile:
    """A file of the table's snapshot.

    :param path: the table-relative path as on disk (decoded from the log's URI form).
    :param rows: ``numRecords`` from its statistics, else from its footer, less the rows its
        deletion vector hides (``None``: unknown).
    :param on_disk: whether the file exists.
    :param batch: the batch whose directory (``eod_data/<pipeline>/<key>/``) holds it, if any.
    :param generation: the generation of the attempt directory (``g<N>-<attempt>``) holding it.
    :param refused: why the audit does not open it (a link, a path out of the table, not a
        regular file), or ``None``.
    """

    path: str
    rows: int | None
    on_disk: bool
    batch: BatchKey | None = None
    generation: int | None = None
    refused: str | None = None


def _place(rel: str) -> tuple[BatchKey | None, int | None]:
    parts = rel.split("/")
    if len(parts) < 4 or parts[0] != DATA_DIR:
        return None, None
    try:
        batch = BatchKey(parts[1], parts[2])
    except EodError:
        return None, None
    attempt = _ATTEMPT.match(parts[3]) if len(parts) > 4 else None
    return batch, int(attempt[1]) if attempt else None


def local_file(table_path: str, rel: str) -> str:
    """Where the table's file ``rel`` (relative, absolute or a ``file:`` URI) is on disk."""
    if rel.startswith("file:"):
        return unquote(urlparse(rel).path)
    return rel if os.path.isabs(rel) else os.path.join(table_path, rel)


class NotInTable(Exception):
    """A path the audit does not open: a link, out of the table, or not a regular file."""


def _table_relative(table_path: str, rel: str) -> str:
    """``rel`` (relative, absolute or a ``file:`` URI) as a path under the table's directory
    made of plain names; :class:`NotInTable` when it leads elsewhere."""
    where = local_file(table_path, rel)
    if "://" in rel and not rel.startswith("file:"):
        raise NotInTable("is on another file system (a URI), outside the table's directory")
    root = os.path.normpath(table_path)
    if not os.path.isabs(rel) and not rel.startswith("file:"):
        parts = rel.split("/")
    elif os.path.normpath(where).startswith(root + os.sep):
        parts = os.path.normpath(where)[len(root) + 1 :].split("/")
    else:
        raise NotInTable("is outside the table's directory")
    if any(p in ("", ".", "..") for p in parts):
        raise NotInTable("leads out of the table's directory (a '..', '.' or empty part)")
    return "/".join(parts)


def open_in_table(table_path: str, rel: str) -> BinaryIO:
    """Open the table's file ``rel`` for reading, name by name from the table's directory
    and following no symbolic link, and only if it is a regular file.

    :raises NotInTable: a link on the way, a path out of the table, a device or FIFO.
    :raises OSError: the file is not there (``FileNotFoundError``) or cannot be opened.
    """
    parts = _table_relative(table_path, rel).split("/")
    fd = os.open(table_path, os.O_RDONLY | os.O_DIRECTORY)  # the table's own path may be a link
    try:
        for i, name in enumerate(parts):
            last = i == len(parts) - 1
            # O_NONBLOCK: opening a FIFO must not wait for a writer.
            flags = os.O_RDONLY | os.O_NOFOLLOW | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            try:
                nxt = os.open(name, flags, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(
                    os.lstat(name, dir_fd=fd).st_mode
                ):
                    at = "/".join(parts[: i + 1])
                    raise NotInTable(f"is a symbolic link (at {at}), which is not followed") from None
                raise
            os.close(fd)
            fd = nxt
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotInTable("is not a regular file (a device, a FIFO or a directory)")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def probe(table_path: str, rel: str) -> tuple[bool, str | None]:
    """``(on disk, why the audit does not open it)`` of the table's file ``rel``."""
    try:
        with open_in_table(table_path, rel):
            return True, None
    except NotInTable as exc:
        return True, str(exc)
    except OSError:
        return False, None


def file_rows(table_path: str, rel: str, stats_rows: int | None) -> int | None:
    """``stats_rows``, or the row count in the file's footer (``None``: unreadable)."""
    if stats_rows is not None:
        return int(stats_rows)
    try:  # no statistics: the footer says, without reading the data
        with open_in_table(table_path, rel) as fh:
            return int(pq.ParquetFile(fh).metadata.num_rows)
    except (OSError, ValueError, NotInTable):  # gone, not Parquet (ArrowInvalid), a link
        return None


def read_live_files(table_path: str, table: DeltaTable) -> dict[str, LiveFile]:
    """The live files of ``table``'s snapshot, by decoded path."""
    out = {}
    hidden = deleted_rows(table_path, table)  # rows another writer deleted in place
    for a in pa.table(table.get_add_actions(flatten=False)).to_pylist():
        rel = unquote(a["path"])
        rows = file_rows(table_path, rel, a.get("num_records"))
        if rows is not None and rel in hidden:
            rows -= hidden[rel]
        on_disk, refused = probe(table_path, rel)
        out[rel] = LiveFile(rel, rows, on_disk, *_place(rel), refused=refused)
    return out


_CHUNK = 1 << 20


def _digest(fh: BinaryIO) -> str:
    """SHA-256 of ``fh`` up to the size it had when opened: a file that grows while it is
    read is not read without end."""
    left, digest = os.fstat(fh.fileno()).st_size, hashlib.sha256()
    while left > 0:
        chunk = fh.read(min(_CHUNK, left))
        if not chunk:
            break
        digest.update(chunk)
        left -= len(chunk)
    return digest.hexdigest()


def same_bytes(table_path: str, paths: list[str]) -> list[list[str]]:
    """Groups of two or more of ``paths`` (table-relative) whose bytes are equal. Only files of
    equal size are read, so a table without copies costs almost no read at all. Sizes, not
    statistics: a copy added with other statistics, or none, holds the same rows. Only regular
    files under the table's directory are read (:func:`open_in_table`), each up to its size."""
    by_size: dict[int, list[str]] = {}
    for rel in paths:
        try:
            with open_in_table(table_path, rel) as fh:
                by_size.setdefault(os.fstat(fh.fileno()).st_size, []).append(rel)
        except (OSError, NotInTable):
            continue  # gone (reported as missing), or not read (reported by check_files)
    out = []
    for candidates in (c for c in by_size.values() if len(c) > 1):
        by_hash: dict[str, list[str]] = {}
        for rel in candidates:
            try:
                with open_in_table(table_path, rel) as fh:
                    by_hash.setdefault(_digest(fh), []).append(rel)
            except (OSError, NotInTable):
                continue
        out += [sorted(same) for same in by_hash.values() if len(same) > 1]
    return out


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


def _checkpoint_markers(log_dir: str, names: list[str], version: int, out: LogFacts) -> None:
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
        for t in open_checkpoint(os.path.join(log_dir, n)).read(columns=["txn"]).column("txn").to_pylist():
            if t:
                if not isinstance(t.get("appId"), str) or type(t.get("version")) is not int:
                    why = "has a txn marker without a string appId and an integer version"
                    raise CorruptTableError(os.path.dirname(log_dir), os.path.join(log_dir, n), why)
                out.markers[t["appId"]] = (t["version"], t.get("lastUpdated"))


def read_log_facts(table_path: str, version: int) -> LogFacts:
    """The facts of the table at ``table_path`` up to ``version`` (later commits are ignored,
    so that they agree with a snapshot read at ``version``).

    :param table_path: the table's local path.
    :param version: the table version the audit reads.
    """
    log_dir, out = os.path.join(table_path, "_delta_log"), LogFacts()
    names = os.listdir(log_dir)
    _checkpoint_markers(log_dir, names, version, out)
    for v in sorted(int(n[:20]) for n in names if _COMMIT.match(n) and int(n[:20]) <= version):
        path = os.path.join(log_dir, f"{v:020d}.json")
        try:
            _commit_facts(v, _commit_actions(path), out)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # ValueError: JsonBoundError too
            why = f"is not a Delta commit ({type(exc).__name__}: {exc})"
            raise CorruptTableError(table_path, path, why) from None
    return out


def _commit_actions(path: str) -> list[dict[str, Any]]:
    """Every action of the commit at ``path``, each line bounded (see bounded_json)."""
    with bounded_json.open_regular(path) as fh:
        actions = [bounded_json.loads(line) for line in bounded_json.json_lines(fh) if line.strip()]
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


@dataclass
class PlanLogFacts:
    """Every commit record and plan in a table's plan log.

    :param records: batch -> generation -> (table-relative path, record body) of the records
        named with the table's id (records of another id are of a table once at this path).
    :param plans: batch -> the plan of its newest planned generation.
    :param unreadable: (table-relative path, error) of entries that do not parse or fail
        their checksum.
    """

    records: dict[BatchKey, dict[int, tuple[str, dict[str, Any]]]] = field(default_factory=dict)
    plans: dict[BatchKey, Plan] = field(default_factory=dict)
    unreadable: list[tuple[str, str]] = field(default_factory=list)


def _records(plan_log: PlanLog, table_path: str, table_id: str, out: PlanLogFacts) -> None:
    try:
        path_part(table_id, "table id (metaData.id)")
    except UnsafePathError as exc:
        # No record was ever written under such a name: say so once, read nothing.
        out.unreadable.append((os.path.relpath(plan_log.root, table_path), str(exc)))
        return
    suffix = f".{table_id}.json"
    records = RecordStore(plan_log=plan_log)
    try:
        keys = records.recorded_batches()
    except UnsafePathError as exc:  # the plan log's batches/ is a link leading out
        out.unreadable.append((os.path.relpath(plan_log.root, table_path), str(exc)))
        return
    for key in keys:
        try:
            folder = records.record_dir(key)
        except UnsafePathError as exc:  # a link leading out of the table
            out.unreadable.append((os.path.relpath(plan_log.root, table_path), str(exc)))
            continue
        names = os.listdir(folder) if os.path.isdir(folder) else []
        gens = [n[1 : -len(suffix)] for n in names if n.startswith("g") and n.endswith(suffix)]
        for gen in sorted(int(g) for g in gens if g.isdigit()):
            where = os.path.relpath(records.commit_record_path(key, gen, table_id), table_path)
            try:
                batch = BatchKey(plan_log.pipeline_id, key)
                body = records.commit_record(key, gen, table_id) or {}
            except EodError as exc:
                out.unreadable.append((where, f"{exc}; every ask of this batch fails until it is fixed"))
                continue
            if (body.get("batch_key"), body.get("generation"), body.get("table_id")) != (key, gen, table_id):
                out.unreadable.append((where, f"commit record {where} describes another batch or table"))
            elif (
                isinstance(body.get("files"), list)
                and isinstance(body.get("table_version"), int)
                and isinstance(body.get("manifest"), dict)
            ):
                out.records.setdefault(batch, {})[gen] = (where, body)
            else:
                out.unreadable.append((where, f"commit record {where} has an unexpected shape"))


def _plans(plan_log: PlanLog, table_path: str, out: PlanLogFacts) -> None:
    for sub in ("offsets", "intervals"):
        folder = os.path.join(plan_log.root, sub)
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            m = _PLAN.match(name)
            if m is None or (sub == "offsets" and not m.group(1).isdigit()):
                continue
            try:
                # An offset plan's file is named by its sequence number, its key is inside.
                key = plan_log.get_offset_plan(int(m.group(1))).batch_key if sub == "offsets" else m.group(1)
                plan = plan_log.get_plan(key, int(m.group(2) or 0))
                batch = plan.key if plan else None
            except EodError as exc:
                out.unreadable.append((os.path.relpath(os.path.join(folder, name), table_path), str(exc)))
                continue
            if plan is None or batch is None:
                continue
            if batch not in out.plans or plan.generation > out.plans[batch].generation:
                out.plans[batch] = plan


def read_plan_log_facts(table_path: str, table_id: str) -> PlanLogFacts:
    """Every record (of table ``table_id``) and plan of every pipeline of the table.

    :param table_path: the table's local path.
    :param table_id: the table's ``metaData.id``.
    """
    out = PlanLogFacts()
    root = os.path.join(table_path, META_DIR, "pipelines")
    for pipeline in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if not os.path.isdir(os.path.join(root, pipeline)):
            continue  # a file someone left there: no pipeline
        try:
            plan_log = PlanLog(table_path, pipeline)
        except EodError:
            continue  # not a directory airflow-eod made
        _records(plan_log, table_path, table_id, out)
        _plans(plan_log, table_path, out)
    return out
