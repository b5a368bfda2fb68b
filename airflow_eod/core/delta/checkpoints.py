"""The checkpoints of a Delta log: which is the newest (``_last_checkpoint``, or a listing),
where its files are, and their ``metaData``, ``protocol`` and ``txn`` markers, read bounded."""

from __future__ import annotations

import errno
import os
import re
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_eod.core import bounded_json
from airflow_eod.core.delta.reading import LOG_DIR, LogReadStats, Unreadable, log_key
from airflow_eod.core.durations import parse_interval
from airflow_eod.core.errors import ConfigurationError, CorruptTableError
from airflow_eod.core.storage import NotFound, Storage
from airflow_eod.core.storage.object_file import open_object
from airflow_eod.core.table_ref import TableRef

CHECKPOINT_NAME = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")


# A checkpoint in more parts than this is no checkpoint a writer made (Delta's writers put a
# million actions or more in a part): `_last_checkpoint` saying so is corrupt, not a reason
# to build a list of a hundred million file names.
MAX_CHECKPOINT_PARTS = 10_000


def _cleanup_window(configuration: dict[str, str]) -> float | None:
    """Seconds after which a log cleanup may remove a commit file (``None``: never)."""
    if configuration.get("delta.enableExpiredLogCleanup", "true").lower() == "false":
        return None
    try:
        return parse_interval(
            configuration.get("delta.logRetentionDuration", "interval 30 days")
        ).total_seconds()
    except ConfigurationError:
        return 0.0  # unreadable: assume any commit may go at any time


def young(started: float, configuration: dict[str, str]) -> bool:
    """Whether no commit written since ``started`` can have been removed by a log cleanup yet:
    a cleanup removes only commits older than the window, so a commit written after a moment
    less than half a window ago (half: for clocks that disagree) is still there."""
    window = _cleanup_window(configuration)
    return window is None or time.time() - started < window / 2


def newest_checkpoint(
    log_dir: str, started: float, configuration: dict[str, str], *, store: Storage
) -> tuple[int, int | None] | None:
    """The newest checkpoint: ``_last_checkpoint``'s, or, unless every commit written since
    ``started`` is too young for a cleanup, the newest one a listing finds."""
    hint = last_checkpoint(log_dir, store=store)
    if young(started, configuration):
        return hint
    listed = newest_checkpoint_by_listing(log_dir, LogReadStats(), store=store)
    if hint is None or (listed is not None and listed[0] > hint[0]):
        return listed
    return hint


def present(log_dir: str, files: list[str], *, store: Storage) -> bool:
    """Whether every file of a checkpoint (``files``, from :func:`checkpoint_files`) is there.

    :param store: the table's storage.
    """
    return all(store.head(log_key(f)) is not None for f in files)


def checkpoint_files(log_dir: str, version: int, parts: int | None) -> list[str]:
    if not parts:
        return [os.path.join(log_dir, f"{version:020d}.checkpoint.parquet")]
    return [
        os.path.join(log_dir, f"{version:020d}.checkpoint.{i:010d}.{parts:010d}.parquet")
        for i in range(1, parts + 1)
    ]


def last_checkpoint(log_dir: str, *, store: Storage) -> tuple[int, int | None] | None:
    """``(version, parts)`` of ``_last_checkpoint``; ``None`` when there is none or it is not
    JSON (a write cut short: Delta's readers list the log then, and so does this one).

    :raises CorruptTableError: when it is JSON no writer makes: not an object, no integer
        version, a parts count that is not an integer in 1..:data:`MAX_CHECKPOINT_PARTS`,
        out of bounds (size, nesting, ``NaN``/``Infinity``), or not a regular file.
    :param store: the table's storage.
    """
    path = os.path.join(log_dir, "_last_checkpoint")
    try:
        body = bounded_json.loads(store.get(log_key(path), limit=bounded_json.MAX_SMALL_FILE))
    except (FileNotFoundError, NotADirectoryError):  # NotADirectory: the table path is a file
        return None
    except bounded_json.JsonBoundError as exc:
        raise CorruptTableError(os.path.dirname(log_dir), path, str(exc)) from None
    except IsADirectoryError:
        raise CorruptTableError(os.path.dirname(log_dir), path, "is a directory") from None
    except ValueError:
        return None
    table_path = os.path.dirname(log_dir)
    if not isinstance(body, dict):
        raise CorruptTableError(table_path, path, f"is not a JSON object but a {type(body).__name__}")
    if "v2Checkpoint" in body:
        raise Unreadable("a V2 checkpoint")
    version, parts = body.get("version"), body.get("parts")
    if type(version) is not int or version < 0:
        why = "has no version" if version is None else f"has a version that is no table version: {version!r}"
        raise CorruptTableError(table_path, path, why)
    if parts is not None and (type(parts) is not int or not 1 <= parts <= MAX_CHECKPOINT_PARTS):
        why = f"says the checkpoint has {parts!r} parts (a writer makes 1 to {MAX_CHECKPOINT_PARTS})"
        raise CorruptTableError(table_path, path, why)
    return version, parts


def newest_checkpoint_by_listing(
    log_dir: str, stats: LogReadStats, *, store: Storage
) -> tuple[int, int | None] | None:
    stats.listed = True
    complete: dict[int, set[int]] = {}
    parts_of: dict[int, int | None] = {}
    for name in store.list(LOG_DIR):
        m = CHECKPOINT_NAME.match(name)
        if m is None:
            if ".checkpoint." in name:
                raise Unreadable(f"a checkpoint file this reader does not know: {name}")
            continue
        v = int(m.group(1))
        n = int(m.group(3)) if m.group(3) else None
        parts_of[v] = n
        complete.setdefault(v, set()).add(int(m.group(2)) if m.group(2) else 1)
    usable = [v for v, got in complete.items() if len(got) == (parts_of[v] or 1)]
    return (max(usable), parts_of[max(usable)]) if usable else None


def open_checkpoint(path: str, store: Storage) -> pq.ParquetFile:
    """A checkpoint file of the log, opened only as a regular file: never through a link (it
    may lead out of the table), never a FIFO or device (whose read would never end, and hold
    a thread of the shared triggerer for good).

    Read through the storage seam, in ranges: the footer, then only the columns asked for.

    :raises CorruptTableError: when it is a link, a FIFO, a device.
    :param path: the checkpoint file (in ``_delta_log/``), named for messages and its key.
    :param store: the table's storage.
    :raises NotFound: when it is gone (a log cleanup removed it since it was named).
    """
    key = log_key(path)
    try:
        store.get_range(key, 0, 0)  # refused here, unread, when it is no plain object
        head = store.head(key)
        if head is None:
            raise NotFound(errno.ENOENT, "no checkpoint file", path)
        return pq.ParquetFile(open_object(store, key, head.size))
    except bounded_json.JsonBoundError as exc:
        raise CorruptTableError(os.path.dirname(os.path.dirname(path)), path, str(exc)) from None


def read_checkpoint(
    files: list[str], stats: LogReadStats, *, store: Storage
) -> tuple[dict[str, Any], pa.Table | None]:
    state: dict[str, Any] = {}
    markers: list[pa.Table] = []
    for path in files:
        stats.checkpoint_files_read += 1
        parquet = open_checkpoint(path, store)
        names = parquet.schema_arrow.names
        columns = [c for c in ("metaData", "protocol") if c in names]
        # Of a marker, only its app id and version: a third of the decoding at 10,000 markers.
        table = parquet.read(
            columns=columns + (["txn.appId", "txn.version"] if "txn" in names else []), use_threads=False
        )
        if "txn" in names:
            columns.append("txn")
        for name in ("metaData", "protocol"):
            if name in columns:
                rows = table.column(name).drop_null()
                if len(rows):
                    state[name] = rows[len(rows) - 1].as_py()
        if "txn" in columns:
            txn = table.column("txn").drop_null()
            if len(txn):
                flat = pa.Table.from_batches(
                    [pa.RecordBatch.from_struct_array(chunk) for chunk in txn.chunks if len(chunk)]
                )
                markers.append(_checked_markers(path, flat.select(["appId", "version"])))
    merged = pa.concat_tables(markers) if markers else None
    return state, merged


def _checked_markers(path: str, markers: pa.Table) -> pa.Table:
    """``markers`` (a checkpoint's ``appId``, ``version``) when every one is a string and an
    integer, as Delta writes them; :class:`CorruptTableError` for a null or another type,
    which no reader may take for a marker (nor crash on)."""
    ids, versions = markers.column("appId"), markers.column("version")
    if not (pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type)) or not pa.types.is_integer(
        versions.type
    ):
        why = f"has txn markers of type appId {ids.type}, version {versions.type} (not string, integer)"
    elif ids.null_count or versions.null_count:
        why = "has a txn marker without an appId or a version (null)"
    else:
        return markers
    table_path = os.path.dirname(os.path.dirname(path))
    raise CorruptTableError(table_path, path, why)


def checkpoint_path(ref: TableRef, version: int) -> str:
    """The single-file checkpoint of ``version`` (what ``deltalake`` writes)."""
    table_path = ref.path
    return checkpoint_files(os.path.join(table_path, LOG_DIR), version, None)[0]


def read_checkpoint_markers(files: list[str], store: Storage) -> tuple[dict[str, Any], dict[str, int]]:
    """A checkpoint's ``metaData``/``protocol`` actions and its markers (app id to version),
    read as a reading without an index reads them: what its index is made of."""
    state, markers = read_checkpoint(files, LogReadStats(), store=store)
    if markers is None:
        return state, {}
    ids, versions = markers.column("appId").to_pylist(), markers.column("version").to_pylist()
    return state, {str(a): int(v) for a, v in zip(ids, versions, strict=True)}
