"""A bounded reading of a Delta table's log: what the ask and the commit need, and no more.

Opening a table with ``deltalake`` replays the newest checkpoint in full, every data file
included, so its cost grows with the table (about 30 ms at 10,000 files here) and every
ask paid it. The ask and the commit need only the table's version, its metadata and
protocol, and the ``txn`` markers. So this module reads, from ``_last_checkpoint`` on:

- the newest checkpoint: its index (:mod:`airflow_eod.core.delta.checkpoint_index`) where
  airflow-eod wrote one, else only its ``txn``, ``metaData`` and ``protocol`` columns;
- the commits after it, one file each, parsing only their ``txn``, ``metaData`` and
  ``protocol`` lines.

A writer that checkpoints every N commits bounds the second part (our commit engine
checkpoints every ``delta.checkpointInterval`` commits, 100 by default); the first part
holds one row per live marker, which the transaction-retention window bounds.

The newest version is found by probing ``<v+1>.json`` forward from the checkpoint, not by
listing ``_delta_log/`` (whose size grows with the history). Anything this reader does not
understand (no ``_last_checkpoint``, a checkpoint file named there that is gone, a V2
checkpoint) falls back to listing the log directory, and, past that, to ``deltalake``.

This module holds the reading itself (and its cache); its parts live beside it, one job
each: :mod:`~airflow_eod.core.delta.commits` (commit files), :mod:`~airflow_eod.core.delta.checkpoints`
(``_last_checkpoint`` and checkpoint files), :mod:`~airflow_eod.core.delta.metadata`,
:mod:`~airflow_eod.core.delta.snapshot` (the :class:`TableLog` it returns) and
:mod:`~airflow_eod.core.delta.checkpoint_search`. Their public names are importable from here too.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from typing import Any

from deltalake import DeltaTable

from airflow_eod.core import bounded_json
from airflow_eod.core.delta.checkpoint_index import read_index
from airflow_eod.core.delta.checkpoint_search import checkpoint_holds, checkpoint_paths_under
from airflow_eod.core.delta.checkpoints import (
    CHECKPOINT_NAME,
    MAX_CHECKPOINT_PARTS,
    checkpoint_files,
    checkpoint_path,
    last_checkpoint,
    newest_checkpoint,
    newest_checkpoint_by_listing,
    open_checkpoint,
    present,
    read_checkpoint,
    read_checkpoint_markers,
    young,
)
from airflow_eod.core.delta.commits import COMMIT_NAME, commit_lines, commit_path, read_commit_actions
from airflow_eod.core.delta.metadata import TableMetadata, TableProtocol, checked_metadata, checked_protocol
from airflow_eod.core.delta.reading import (
    LOG_DIR,
    REREADS,
    LogReadStats,
    Overtaken,
    Unreadable,
    log_key,
)
from airflow_eod.core.delta.snapshot import Markers, TableLog, TableMarkers
from airflow_eod.core.errors import CorruptTableError, EodError, UnsupportedTableError
from airflow_eod.core.storage import Storage
from airflow_eod.core.table_ref import TableRef

log = logging.getLogger(__name__)

_WANTED = {"txn", "metaData", "protocol"}


def _complete(
    log_dir: str, version: int, newest_read: str | None, configuration: dict[str, str], store: Storage
) -> bool:
    """Whether a reading that found commits up to ``version`` (and ``<version+1>.json``
    missing) saw the table's newest version.

    A missing ``<v+1>.json`` may be "not written yet" or "removed by a log cleanup that
    followed a newer checkpoint"; a commit put there would be seen by no reader. A writer
    announces its checkpoint in ``_last_checkpoint`` before its cleanup, so a hint past
    ``version`` says the reading stopped in such a hole. The hint can be stale (two writers
    checkpointing at once may leave the older one there), so unless the newest commit read
    (``newest_read``) is too young for any cleanup to have removed the one after it, the
    log is listed too: a cost only tables idle for half their log retention pay.
    """
    hint = last_checkpoint(log_dir, store=store)
    if (
        hint is not None
        and hint[0] > version
        and present(log_dir, checkpoint_files(log_dir, *hint), store=store)
    ):
        return False
    head = store.head(log_key(newest_read)) if newest_read else None
    written = head.mtime if head is not None else 0.0
    if young(written, configuration):
        return True
    for name in store.list(LOG_DIR):
        m = COMMIT_NAME.match(name) or CHECKPOINT_NAME.match(name)
        if m is not None and int(m.group(1)) > version:
            return False
    return True


def _refuse_links_in_log(ref: TableRef) -> None:
    """Before ``deltalake`` replays a log (which follows links and bounds nothing we chose):
    a link or a FIFO anywhere under ``_delta_log/`` is refused, as this reader refuses it."""
    table_path = ref.path
    log_dir = os.path.join(table_path, LOG_DIR)
    for folder, dirs, files in os.walk(log_dir):
        for name in dirs + files:
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise CorruptTableError(
                    table_path, path, "is a symbolic link, a FIFO or a device, which is not read"
                )


# The newest reading of each table in this process. A commit asks, commits, records and
# asks again: each later reading only reads the commits that landed since. Keyed by the
# location and the storage options: one URI names other tables on other stores (another
# endpoint, another Azure account), and a reading of one must never answer for the other.
_CACHE: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[TableLog, str]] = {}


def clear_cache() -> None:
    """Forget earlier readings (a benchmark measuring a fresh process, a test counting reads)."""
    _CACHE.clear()


def read_log(ref: TableRef) -> TableLog | None:
    """The table at its newest version, or ``None`` when its log holds no commit.

    :param ref: the table.
    """
    cached = _CACHE.get((ref.location, ref.options))
    if cached is not None:
        try:
            extended = _extend(cached[0], cached[1])
        except Unreadable:
            extended = None
        if extended is not None:
            return extended
    table: TableLog | None = None
    listing = False
    for _ in range(REREADS):
        try:
            table = _read_log(ref, listing=listing)
            break
        except Overtaken:
            listing = True  # the hint may be the stale one: start from what the log holds
            continue
        except Unreadable:
            table = _from_deltalake(ref)
            break
    else:
        # Checkpoints keep overtaking the reading (a very busy writer): read it all once.
        table = _from_deltalake(ref)
    _remember(table)
    return table


def _signature(table: TableLog, store: Storage | None = None) -> str | None:
    """What identifies the newest file the reading rests on: a table deleted and re-created
    at the same path has other files there."""
    if table.table_version > table.checkpoint_version:
        path = commit_path(table.ref, table.table_version)
    else:
        path = checkpoint_files(os.path.join(table.path, LOG_DIR), table.checkpoint_version, None)[0]
    head = (store or table.ref.storage()).head(log_key(path))
    return None if head is None else head.tag


def _remember(table: TableLog | None) -> None:
    if table is None or table.stats.fell_back:
        return
    signature = _signature(table)
    if signature is not None:
        _CACHE[(table.ref.location, table.ref.options)] = (table, signature)


def _extend(cached: TableLog, signature: str) -> TableLog | None:
    """``cached`` plus the commits after it, or ``None`` when it cannot be trusted any more:
    its newest file changed (the table was re-created) or a newer checkpoint exists (log
    cleanup may have removed commits after it)."""
    # One storage for the whole reading: the way to ``_delta_log/`` is checked for links
    # once (as the reading's first step), not by every file it opens (issue 20's ask cost).
    store = cached.ref.storage()
    hint = last_checkpoint(os.path.join(cached.path, LOG_DIR), store=store)
    if (hint[0] if hint is not None else -1) != cached.checkpoint_version:
        return None
    if _signature(cached, store) != signature:
        return None
    stats = LogReadStats()
    tail = dict(cached._tail_markers)
    state: dict[str, Any] = {}
    version = cached.table_version
    started = time.time()
    version = _read_tail(cached.ref, version, tail, state, stats, store)
    meta, proto = cached.metadata(), cached.protocol()
    if "metaData" in state:
        meta = checked_metadata(cached.ref, state["metaData"])
    if "protocol" in state:
        proto = checked_protocol(cached.ref, state["protocol"])
    if not _complete(
        os.path.join(cached.path, LOG_DIR),
        version,
        commit_path(cached.ref, version),
        meta.configuration,
        store,
    ):
        return None
    table = TableLog(
        cached.ref,
        version,
        cached.checkpoint_version,
        meta,
        proto,
        tail,
        cached._checkpoint_markers,
        stats,
        read_at=started,
        checkpoint_parts=cached.checkpoint_parts,
    )
    if version != cached.table_version:
        _remember(table)
    return table


def _read_tail(
    ref: TableRef,
    version: int,
    tail: dict[str, tuple[int, int]],
    state: dict[str, Any],
    stats: LogReadStats,
    store: Storage,
) -> int:
    """Read the commits after ``version`` into ``tail`` (app id -> (marker, commit version))
    and ``state`` (the newest ``metaData``/``protocol``); the newest version found."""
    table_path = ref.path
    while True:
        actions = read_commit_actions(ref, version + 1, _WANTED, store=store)
        if actions is None:
            return version
        version += 1
        stats.commits_read += 1
        for action in actions:
            if "txn" in action:
                app_id, marker = action["txn"].get("appId"), action["txn"].get("version")
                if not isinstance(app_id, str) or type(marker) is not int:
                    why = "has a txn action without a string appId and an integer version"
                    raise CorruptTableError(table_path, commit_path(ref, version), why)
                tail[app_id] = (marker, version)
            else:
                state.update(action)


def _read_log(ref: TableRef, *, listing: bool = False) -> TableLog | None:
    """One reading from the newest checkpoint (``_last_checkpoint``'s, or with ``listing``
    the newest one in the log directory) on; :class:`Overtaken` when it stopped short."""
    table_path = ref.path
    log_dir = os.path.join(table_path, LOG_DIR)
    stats = LogReadStats()
    started = time.time()
    # One storage for the whole reading (see _extend).
    store = ref.storage()
    start = None if listing else last_checkpoint(log_dir, store=store)
    files = checkpoint_files(log_dir, *start) if start else []
    if start is None or not present(log_dir, files, store=store):
        # No hint, or a hint whose checkpoint is gone: find the newest checkpoint by listing.
        # No log, or the table path is a file (a store has no folders: is anything under it?)
        if (store.head(LOG_DIR) is None) if ref.is_local else not store.has_prefix(LOG_DIR):
            return None
        start = newest_checkpoint_by_listing(log_dir, stats, store=store)
        files = checkpoint_files(log_dir, *start) if start else []
    state: dict[str, Any] = {}
    markers: Markers | None = None
    version = -1
    if start is not None:
        indexed = read_index(ref, start[0], files)
        if indexed is not None:
            stats.index_files_read += 1
            state, markers = indexed
        else:
            state, decoded = read_checkpoint(files, stats, store=store)
            markers = TableMarkers(decoded)
        version = start[0]
    checkpoint_version = version
    tail: dict[str, tuple[int, int]] = {}
    version = _read_tail(ref, version, tail, state, stats, store)
    if version < 0:
        if any(COMMIT_NAME.match(n) for n in store.list(LOG_DIR)):
            raise Unreadable("commits with no checkpoint before them and no commit 0")
        return None
    if "metaData" not in state or "protocol" not in state:
        raise Unreadable("no metaData or protocol in the checkpoint and commits read")
    meta = checked_metadata(ref, state["metaData"])
    proto = checked_protocol(ref, state["protocol"])
    if "v2Checkpoint" in (proto.reader_features or []):
        # Its checkpoints may keep their actions in sidecar files this reader does not follow.
        raise Unreadable("a table with V2 checkpoints")
    if not _complete(log_dir, version, commit_path(ref, version), meta.configuration, store):
        raise Overtaken(version)
    return TableLog(
        ref,
        version,
        checkpoint_version,
        meta,
        proto,
        tail,
        markers,
        stats,
        read_at=started,
        checkpoint_parts=start[1] if start is not None else None,
    )


def _unparseable(ref: TableRef) -> str:
    """`` (<commit file> is not JSON)`` for the first commit that does not parse, if any."""
    store = ref.storage()
    for name in store.list(LOG_DIR):
        if COMMIT_NAME.match(name):
            key = f"{LOG_DIR}/{name}"
            try:
                head = store.head(key)
                for line in commit_lines(store, key, head.size if head else 0):
                    if line.strip():
                        bounded_json.loads(line)
            except OSError:
                continue  # removed meanwhile (a log cleanup): not a broken commit
            except ValueError:  # JsonBoundError too: a link, a device, a line out of bounds
                return f" ({name} is not a Delta commit: a line of it is not JSON)"
    return ""


def _from_deltalake(ref: TableRef) -> TableLog:
    """The same view, read through ``deltalake`` (every file replayed): for logs this reader
    does not know how to read in a bounded way."""
    table_path = ref.path
    if ref.is_local:  # an object store has no links
        _refuse_links_in_log(ref)
    try:
        table = DeltaTable(table_path, storage_options=ref.storage_options)
    except Exception as exc:  # deltalake's errors carry a Rust backtrace, not the file
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        where = _unparseable(ref)
        # A commit that is not JSON stays so; anything else (I/O) may pass on a retry.
        error = UnsupportedTableError if where else EodError
        raise error(f"the Delta log of {table_path} cannot be read{where}: {first}") from exc
    meta = table.metadata()
    proto = table.protocol()
    return TableLog(
        ref,
        table.version(),
        -1,
        TableMetadata(
            str(meta.id),
            meta.name,
            meta.description,
            table.schema().to_json(),
            list(meta.partition_columns),
            meta.created_time,
            dict(meta.configuration or {}),
        ),
        TableProtocol(
            proto.min_reader_version, proto.min_writer_version, proto.reader_features, proto.writer_features
        ),
        {},
        None,
        LogReadStats(fell_back=True),
        table,
    )


# Names the readers of this module (and tests) knew before the log's reading was split by job.
_Unreadable = Unreadable
__all__ = [
    "MAX_CHECKPOINT_PARTS",
    "LogReadStats",
    "TableLog",
    "TableMetadata",
    "TableProtocol",
    "checkpoint_holds",
    "checkpoint_path",
    "checkpoint_paths_under",
    "clear_cache",
    "commit_path",
    "newest_checkpoint",
    "open_checkpoint",
    "read_checkpoint_markers",
    "read_commit_actions",
    "read_log",
]
