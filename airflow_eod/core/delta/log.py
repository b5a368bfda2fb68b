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
"""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from airflow_eod.core import bounded_json
from airflow_eod.core.delta.checkpoint_index import IndexMismatch, read_index
from airflow_eod.core.durations import parse_interval
from airflow_eod.core.errors import ConfigurationError, CorruptTableError, EodError, UnsupportedTableError

log = logging.getLogger(__name__)

_LOG = "_delta_log"
_ACTION_BYTES = re.compile(rb'^\s*\{\s*"(\w+)"')
_WANTED = {"txn", "metaData", "protocol"}
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")
_COMMIT = re.compile(r"^(\d{20})\.json$")
# A checkpoint in more parts than this is no checkpoint a writer made (Delta's writers put a
# million actions or more in a part): `_last_checkpoint` saying so is corrupt, not a reason
# to build a list of a hundred million file names.
MAX_CHECKPOINT_PARTS = 10_000
# Commits up to this size are read whole (and skipped at once when they hold no wanted
# action); larger ones line by line, each line bounded.
_WHOLE_COMMIT = 16 << 20


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


@dataclass
class LogReadStats:
    """What one reading of the log opened: the shape test pins these, whatever the history."""

    commits_read: int = 0
    checkpoint_files_read: int = 0
    index_files_read: int = 0  # a checkpoint's index (checkpoint_index), instead of the checkpoint
    listed: bool = False
    fell_back: bool = False


class _Markers(Protocol):
    def lookup(self, app_id: str) -> int | None: ...


class _TableMarkers:
    """A checkpoint's markers as decoded from the checkpoint (``appId``, ``version``)."""

    def __init__(self, markers: pa.Table | None) -> None:
        self._markers = markers

    def lookup(self, app_id: str) -> int | None:
        markers = self._markers
        if markers is None or markers.num_rows == 0:
            return None
        hit = markers.filter(pc.equal(markers.column("appId"), app_id))
        return int(hit.column("version")[0].as_py()) if hit.num_rows else None


@dataclass
class TableLog:
    """A Delta table at one version, as far as markers, metadata and protocol go.

    :param path: the table's local path.
    :param table_version: the version read.
    :param checkpoint_version: the version of the checkpoint the reading started from
        (``-1``: none).
    """

    path: str
    table_version: int
    checkpoint_version: int
    _metadata: TableMetadata
    _protocol: TableProtocol
    _tail_markers: dict[str, tuple[int, int]] = field(default_factory=dict)
    _checkpoint_markers: _Markers | None = None
    stats: LogReadStats = field(default_factory=LogReadStats)
    _full: DeltaTable | None = None
    read_at: float = 0.0  # when the probing that found the newest version began (time.time())
    checkpoint_parts: int | None = None

    @property
    def table_uri(self) -> str:
        return self.path

    def version(self) -> int:
        return self.table_version

    def metadata(self) -> TableMetadata:
        return self._metadata

    def protocol(self) -> TableProtocol:
        return self._protocol

    def schema_json(self) -> str:
        return self._metadata.schema_string

    def transaction_version(self, app_id: str) -> int | None:
        """The ``txn`` version of ``app_id`` while the log holds it.

        Unlike ``deltalake``, a marker past ``delta.setTransactionRetentionDuration`` still
        counts until a checkpoint drops it: a batch that may have landed is never forgotten
        sooner than it must be.
        """
        if self._full is not None:
            return self._full.transaction_version(app_id)
        found = self._tail_markers.get(app_id)
        if found is not None:
            return found[0]
        markers = self._checkpoint_markers
        if markers is None:
            return None
        try:
            return markers.lookup(app_id)
        except IndexMismatch as exc:
            log.warning(
                "the index of checkpoint %d of %s is unusable (%s): reading the checkpoint",
                self.checkpoint_version,
                self.path,
                exc,
            )
            files = _checkpoint_files(
                os.path.join(self.path, _LOG), self.checkpoint_version, self.checkpoint_parts
            )
            self._checkpoint_markers = _TableMarkers(_read_checkpoint(files, self.stats)[1])
            return self._checkpoint_markers.lookup(app_id)

    def marker_commit(self, app_id: str) -> int | None:
        """The version of the commit after the checkpoint that set ``app_id``'s marker, if any."""
        found = self._tail_markers.get(app_id)
        return found[1] if found is not None and found[1] >= 0 else None

    def snapshot(self) -> DeltaTable:
        """The full ``deltalake`` snapshot at this version (every live file): for the few
        steps that need the files, such as a restatement's swap."""
        return DeltaTable(self.path, version=self.table_version)


def commit_path(table_path: str, version: int) -> str:
    return os.path.join(table_path, _LOG, f"{version:020d}.json")


def read_commit_actions(table_path: str, version: int, wanted: set[str]) -> list[dict[str, Any]] | None:
    """The actions named in ``wanted`` of commit ``version`` (others are not parsed), or
    ``None`` when the commit file is gone.

    :raises CorruptTableError: when the commit is not a regular file, has a line longer than
        :data:`~airflow_eod.core.bounded_json.MAX_ACTION_LINE`, or a wanted action that is
        not a bounded JSON object.
    """
    path = commit_path(table_path, version)
    try:
        fh = bounded_json.open_regular(path)
    except FileNotFoundError:
        return None
    except bounded_json.JsonBoundError as exc:
        raise CorruptTableError(table_path, path, str(exc)) from None
    out: list[dict[str, Any]] = []
    try:
        with fh:
            lines: Any
            if os.fstat(fh.fileno()).st_size <= _WHOLE_COMMIT:
                data = fh.read(_WHOLE_COMMIT + 1)
                # Most commits of a loaded table are a batch's adds and its marker: only lines
                # that can hold a wanted action are split out and matched (bytes: no decoding).
                if not any(b'"' + name.encode() + b'"' in data for name in wanted):
                    return []
                lines = data.splitlines()
            else:
                lines = bounded_json.json_lines(fh)
            for raw in lines:
                m = _ACTION_BYTES.match(raw)
                if m is not None and m.group(1).decode() in wanted:
                    action, name = bounded_json.loads(raw), m.group(1).decode()
                    if not isinstance(action, dict) or not isinstance(action.get(name), dict):
                        raise bounded_json.JsonBoundError(f"has a {name} action that is not an object")
                    out.append(action)
    except ValueError as exc:  # JsonBoundError, or a line that is not JSON
        raise CorruptTableError(table_path, path, f"is not a Delta commit ({exc})") from None
    return out


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


def _shapeless(table_path: str, action: str, exc: Exception) -> CorruptTableError:
    why = f"holds a {action} action without the fields every Delta table's has ({type(exc).__name__}: {exc})"
    return CorruptTableError(table_path, os.path.join(table_path, _LOG), why)


def _checked_metadata(table_path: str, action: Any) -> TableMetadata:
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
        raise _shapeless(table_path, "metaData", exc) from None
    return meta


def _checked_protocol(table_path: str, action: Any) -> TableProtocol:
    """The ``protocol`` action the reading found (see :func:`_checked_metadata`)."""
    try:
        proto = _protocol_from(action)
        for features in (proto.reader_features, proto.writer_features):
            if features is not None and not all(isinstance(f, str) for f in features):
                raise TypeError("readerFeatures or writerFeatures is not a list of names")
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise _shapeless(table_path, "protocol", exc) from None
    return proto


class _Unreadable(Exception):
    """This reader cannot take the log from here; fall back."""


class _Overtaken(Exception):
    """A checkpoint newer than the commits read was announced while they were read."""


# Readings started again because a newer checkpoint overtook them, before falling back.
_REREADS = 5


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


def _young(started: float, configuration: dict[str, str]) -> bool:
    """Whether no commit written since ``started`` can have been removed by a log cleanup yet:
    a cleanup removes only commits older than the window, so a commit written after a moment
    less than half a window ago (half: for clocks that disagree) is still there."""
    window = _cleanup_window(configuration)
    return window is None or time.time() - started < window / 2


def _complete(log_dir: str, version: int, newest_read: str | None, configuration: dict[str, str]) -> bool:
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
    hint = _hint(log_dir)
    if (
        hint is not None
        and hint[0] > version
        and all(os.path.exists(f) for f in _checkpoint_files(log_dir, *hint))
    ):
        return False
    try:
        written = os.stat(newest_read).st_mtime if newest_read else 0.0
    except FileNotFoundError:
        written = 0.0
    if _young(written, configuration):
        return True
    for name in os.listdir(log_dir):
        m = _COMMIT.match(name) or _CHECKPOINT.match(name)
        if m is not None and int(m.group(1)) > version:
            return False
    return True


def newest_checkpoint(
    log_dir: str, started: float, configuration: dict[str, str]
) -> tuple[int, int | None] | None:
    """The newest checkpoint: ``_last_checkpoint``'s, or, unless every commit written since
    ``started`` is too young for a cleanup, the newest one a listing finds."""
    hint = _hint(log_dir)
    if _young(started, configuration):
        return hint
    listed = _newest_checkpoint_by_listing(log_dir, LogReadStats())
    if hint is None or (listed is not None and listed[0] > hint[0]):
        return listed
    return hint


def _checkpoint_files(log_dir: str, version: int, parts: int | None) -> list[str]:
    if not parts:
        return [os.path.join(log_dir, f"{version:020d}.checkpoint.parquet")]
    return [
        os.path.join(log_dir, f"{version:020d}.checkpoint.{i:010d}.{parts:010d}.parquet")
        for i in range(1, parts + 1)
    ]


def _hint(log_dir: str) -> tuple[int, int | None] | None:
    """``(version, parts)`` of ``_last_checkpoint``; ``None`` when there is none or it is not
    JSON (a write cut short: Delta's readers list the log then, and so does this one).

    :raises CorruptTableError: when it is JSON no writer makes: not an object, no integer
        version, a parts count that is not an integer in 1..:data:`MAX_CHECKPOINT_PARTS`,
        out of bounds (size, nesting, ``NaN``/``Infinity``), or not a regular file.
    """
    path = os.path.join(log_dir, "_last_checkpoint")
    try:
        body = bounded_json.read(path)
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
        raise _Unreadable("a V2 checkpoint")
    version, parts = body.get("version"), body.get("parts")
    if type(version) is not int or version < 0:
        why = "has no version" if version is None else f"has a version that is no table version: {version!r}"
        raise CorruptTableError(table_path, path, why)
    if parts is not None and (type(parts) is not int or not 1 <= parts <= MAX_CHECKPOINT_PARTS):
        why = f"says the checkpoint has {parts!r} parts (a writer makes 1 to {MAX_CHECKPOINT_PARTS})"
        raise CorruptTableError(table_path, path, why)
    return version, parts


def _newest_checkpoint_by_listing(log_dir: str, stats: LogReadStats) -> tuple[int, int | None] | None:
    stats.listed = True
    complete: dict[int, set[int]] = {}
    parts_of: dict[int, int | None] = {}
    for name in os.listdir(log_dir):
        m = _CHECKPOINT.match(name)
        if m is None:
            if ".checkpoint." in name:
                raise _Unreadable(f"a checkpoint file this reader does not know: {name}")
            continue
        v = int(m.group(1))
        n = int(m.group(3)) if m.group(3) else None
        parts_of[v] = n
        complete.setdefault(v, set()).add(int(m.group(2)) if m.group(2) else 1)
    usable = [v for v, got in complete.items() if len(got) == (parts_of[v] or 1)]
    return (max(usable), parts_of[max(usable)]) if usable else None


def open_checkpoint(path: str) -> pq.ParquetFile:
    """A checkpoint file of the log, opened only as a regular file: never through a link (it
    may lead out of the table), never a FIFO or device (whose read would never end, and hold
    a thread of the shared triggerer for good).

    :raises CorruptTableError: when it is a link, a FIFO, a device.
    """
    try:
        return bounded_json.open_parquet(path)
    except bounded_json.JsonBoundError as exc:
        raise CorruptTableError(os.path.dirname(os.path.dirname(path)), path, str(exc)) from None


def _refuse_links_in_log(table_path: str) -> None:
    """Before ``deltalake`` replays a log (which follows links and bounds nothing we chose):
    a link or a FIFO anywhere under ``_delta_log/`` is refused, as this reader refuses it."""
    log_dir = os.path.join(table_path, _LOG)
    for folder, dirs, files in os.walk(log_dir):
        for name in dirs + files:
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise CorruptTableError(
                    table_path, path, "is a symbolic link, a FIFO or a device, which is not read"
                )


def _read_checkpoint(files: list[str], stats: LogReadStats) -> tuple[dict[str, Any], pa.Table | None]:
    state: dict[str, Any] = {}
    markers: list[pa.Table] = []
    for path in files:
        stats.checkpoint_files_read += 1
        parquet = open_checkpoint(path)
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


def checkpoint_path(table_path: str, version: int) -> str:
    """The single-file checkpoint of ``version`` (what ``deltalake`` writes)."""
    return _checkpoint_files(os.path.join(table_path, _LOG), version, None)[0]


def read_checkpoint_markers(files: list[str]) -> tuple[dict[str, Any], dict[str, int]]:
    """A checkpoint's ``metaData``/``protocol`` actions and its markers (app id to version),
    read as a reading without an index reads them: what its index is made of."""
    state, markers = _read_checkpoint(files, LogReadStats())
    if markers is None:
        return state, {}
    ids, versions = markers.column("appId").to_pylist(), markers.column("version").to_pylist()
    return state, {str(a): int(v) for a, v in zip(ids, versions, strict=True)}


def checkpoint_holds(
    table: TableLog, version: int, add_path: str | None, app_id: str, generation: int
) -> bool | None:
    """Whether the commit just written at ``version`` is part of the table as readers see it.

    ``True`` when no announced checkpoint reaches ``version`` (readers read the commit after
    the checkpoint) or when the checkpoint that does holds the commit's first file (live, or
    removed since) or, for a commit without files, its marker at ``generation`` (an older
    generation's marker says nothing of this commit). ``False``: the commit landed
    in a hole a log cleanup left below a checkpoint, and no reader will ever see it.
    ``None``: checkpoints kept replacing each other while this looked.

    :param table: the reading the commit followed.
    :param add_path: the commit's first file as the log stores it (percent-encoded).
    """
    log_dir = os.path.join(table.path, _LOG)
    configuration = table.metadata().configuration
    for _ in range(_REREADS):
        hint = newest_checkpoint(log_dir, table.read_at, configuration)
        if hint is None or hint[0] < version:
            return True
        try:
            for path in _checkpoint_files(log_dir, *hint):
                parquet = open_checkpoint(path)
                names = set(parquet.schema_arrow.names)
                if add_path is None:
                    if "txn" in names:
                        txn = parquet.read(columns=["txn.appId", "txn.version"], use_threads=False)
                        ids = pc.struct_field(txn.column("txn"), [0])
                        versions = pc.struct_field(txn.column("txn"), [1])
                        hit = pc.and_(pc.equal(ids, app_id), pc.equal(versions, generation))
                        if pc.any(hit).as_py():
                            return True
                    continue
                for action in ("add", "remove"):
                    if action in names:
                        col = parquet.read(columns=[f"{action}.path"], use_threads=False).column(action)
                        if pc.any(pc.equal(pc.struct_field(col, [0]), add_path)).as_py():
                            return True
            return False
        except FileNotFoundError:
            continue  # a newer checkpoint's cleanup removed it meanwhile: look again
    return None


def checkpoint_paths_under(table: TableLog, prefix: str) -> list[str]:
    """The paths (as the log stores them) of the newest checkpoint's adds and removes that
    start with ``prefix``: files that were part of the table, live or removed since,
    whose commits a log cleanup may have taken. Empty when there is no checkpoint."""
    log_dir = os.path.join(table.path, _LOG)
    configuration = table.metadata().configuration
    for _ in range(_REREADS):
        hint = newest_checkpoint(log_dir, table.read_at, configuration)
        if hint is None:
            return []
        found: list[str] = []
        try:
            for path in _checkpoint_files(log_dir, *hint):
                parquet = open_checkpoint(path)
                names = set(parquet.schema_arrow.names)
                for action in ("add", "remove"):
                    if action not in names:
                        continue
                    col = parquet.read(columns=[f"{action}.path"], use_threads=False).column(action)
                    paths = pc.struct_field(col, [0])
                    hit = pc.fill_null(pc.starts_with(paths, prefix), False)
                    found += [p for p in pc.filter(paths, hit).to_pylist() if p is not None]
            return found
        except FileNotFoundError:
            continue  # a newer checkpoint's cleanup removed it meanwhile: look again
    return []


# The newest reading of each table in this process. A commit asks, commits, records and
# asks again: each later reading only reads the commits that landed since.
_CACHE: dict[str, tuple[TableLog, tuple[int, int, int]]] = {}


def clear_cache() -> None:
    """Forget earlier readings (a benchmark measuring a fresh process, a test counting reads)."""
    _CACHE.clear()


def read_log(table_path: str) -> TableLog | None:
    """The table at its newest version, or ``None`` when its log holds no commit.

    :param table_path: the table's local path.
    """
    cached = _CACHE.get(table_path)
    if cached is not None:
        try:
            extended = _extend(cached[0], cached[1])
        except _Unreadable:
            extended = None
        if extended is not None:
            return extended
    table: TableLog | None = None
    listing = False
    for _ in range(_REREADS):
        try:
            table = _read_log(table_path, listing=listing)
            break
        except _Overtaken:
            listing = True  # the hint may be the stale one: start from what the log holds
            continue
        except _Unreadable:
            table = _from_deltalake(table_path)
            break
    else:
        # Checkpoints keep overtaking the reading (a very busy writer): read it all once.
        table = _from_deltalake(table_path)
    _remember(table)
    return table


def _signature(table: TableLog) -> tuple[int, int, int] | None:
    """What identifies the newest file the reading rests on: a table deleted and re-created
    at the same path has other files there."""
    if table.table_version > table.checkpoint_version:
        path = commit_path(table.path, table.table_version)
    else:
        path = _checkpoint_files(os.path.join(table.path, _LOG), table.checkpoint_version, None)[0]
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _remember(table: TableLog | None) -> None:
    if table is None or table.stats.fell_back:
        return
    signature = _signature(table)
    if signature is not None:
        _CACHE[table.path] = (table, signature)


def _extend(cached: TableLog, signature: tuple[int, int, int]) -> TableLog | None:
    """``cached`` plus the commits after it, or ``None`` when it cannot be trusted any more:
    its newest file changed (the table was re-created) or a newer checkpoint exists (log
    cleanup may have removed commits after it)."""
    hint = _hint(os.path.join(cached.path, _LOG))
    if (hint[0] if hint is not None else -1) != cached.checkpoint_version:
        return None
    if _signature(cached) != signature:
        return None
    stats = LogReadStats()
    tail = dict(cached._tail_markers)
    state: dict[str, Any] = {}
    version = cached.table_version
    started = time.time()
    version = _read_tail(cached.path, version, tail, state, stats)
    meta, proto = cached.metadata(), cached.protocol()
    if "metaData" in state:
        meta = _checked_metadata(cached.path, state["metaData"])
    if "protocol" in state:
        proto = _checked_protocol(cached.path, state["protocol"])
    if not _complete(
        os.path.join(cached.path, _LOG), version, commit_path(cached.path, version), meta.configuration
    ):
        return None
    table = TableLog(
        cached.path,
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
    table_path: str,
    version: int,
    tail: dict[str, tuple[int, int]],
    state: dict[str, Any],
    stats: LogReadStats,
) -> int:
    """Read the commits after ``version`` into ``tail`` (app id -> (marker, commit version))
    and ``state`` (the newest ``metaData``/``protocol``); the newest version found."""
    while True:
        actions = read_commit_actions(table_path, version + 1, _WANTED)
        if actions is None:
            return version
        version += 1
        stats.commits_read += 1
        for action in actions:
            if "txn" in action:
                app_id, marker = action["txn"].get("appId"), action["txn"].get("version")
                if not isinstance(app_id, str) or type(marker) is not int:
                    why = "has a txn action without a string appId and an integer version"
                    raise CorruptTableError(table_path, commit_path(table_path, version), why)
                tail[app_id] = (marker, version)
            else:
                state.update(action)


def _read_log(table_path: str, *, listing: bool = False) -> TableLog | None:
    """One reading from the newest checkpoint (``_last_checkpoint``'s, or with ``listing``
    the newest one in the log directory) on; :class:`_Overtaken` when it stopped short."""
    log_dir = os.path.join(table_path, _LOG)
    stats = LogReadStats()
    started = time.time()
    start = None if listing else _hint(log_dir)
    files = _checkpoint_files(log_dir, *start) if start else []
    if start is None or not all(os.path.exists(f) for f in files):
        # No hint, or a hint whose checkpoint is gone: find the newest checkpoint by listing.
        try:
            start = _newest_checkpoint_by_listing(log_dir, stats)
        except (FileNotFoundError, NotADirectoryError):  # no log, or the table path is a file
            return None
        files = _checkpoint_files(log_dir, *start) if start else []
    state: dict[str, Any] = {}
    markers: _Markers | None = None
    version = -1
    if start is not None:
        indexed = read_index(table_path, start[0], files)
        if indexed is not None:
            stats.index_files_read += 1
            state, markers = indexed
        else:
            state, decoded = _read_checkpoint(files, stats)
            markers = _TableMarkers(decoded)
        version = start[0]
    checkpoint_version = version
    tail: dict[str, tuple[int, int]] = {}
    version = _read_tail(table_path, version, tail, state, stats)
    if version < 0:
        if os.path.isdir(log_dir) and any(_COMMIT.match(n) for n in os.listdir(log_dir)):
            raise _Unreadable("commits with no checkpoint before them and no commit 0")
        return None
    if "metaData" not in state or "protocol" not in state:
        raise _Unreadable("no metaData or protocol in the checkpoint and commits read")
    meta = _checked_metadata(table_path, state["metaData"])
    proto = _checked_protocol(table_path, state["protocol"])
    if "v2Checkpoint" in (proto.reader_features or []):
        # Its checkpoints may keep their actions in sidecar files this reader does not follow.
        raise _Unreadable("a table with V2 checkpoints")
    if not _complete(log_dir, version, commit_path(table_path, version), meta.configuration):
        raise _Overtaken(version)
    return TableLog(
        table_path,
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


def _unparseable(table_path: str) -> str:
    """`` (<commit file> is not JSON)`` for the first commit that does not parse, if any."""
    log_dir = os.path.join(table_path, _LOG)
    for name in sorted(os.listdir(log_dir)) if os.path.isdir(log_dir) else []:
        if _COMMIT.match(name):
            try:
                with bounded_json.open_regular(os.path.join(log_dir, name)) as fh:
                    for line in bounded_json.json_lines(fh):
                        if line.strip():
                            bounded_json.loads(line)
            except OSError:
                continue  # removed meanwhile (a log cleanup): not a broken commit
            except ValueError:  # JsonBoundError too: a link, a device, a line out of bounds
                return f" ({name} is not a Delta commit: a line of it is not JSON)"
    return ""


def _from_deltalake(table_path: str) -> TableLog:
    """The same view, read through ``deltalake`` (every file replayed): for logs this reader
    does not know how to read in a bounded way."""
    _refuse_links_in_log(table_path)
    try:
        table = DeltaTable(table_path)
    except Exception as exc:  # deltalake's errors carry a Rust backtrace, not the file
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        where = _unparseable(table_path)
        # A commit that is not JSON stays so; anything else (I/O) may pass on a retry.
        error = UnsupportedTableError if where else EodError
        raise error(f"the Delta log of {table_path} cannot be read{where}: {first}") from exc
    meta = table.metadata()
    proto = table.protocol()
    return TableLog(
        table_path,
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
