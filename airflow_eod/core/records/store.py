"""The durable commit record: what the table holds of a batch, for as long as it holds it.

The ``txn`` marker fences racing commits, but it expires
(``delta.setTransactionRetentionDuration``, and delta-rs hides expired markers on read), and
the commit that carried the manifest ages out of the log (``delta.logRetentionDuration``).
Neither may be the only memory of a committed batch: an idle pipeline would re-load its
newest batch, and a restatement would not know which files to replace.

So every commit of a batch generation leaves a record in the plan log,
``batches/<batch key>/g<N>.<table id>.json``: the table's id, the version that landed it, the manifest
and the batch's files. The committing attempt writes it right after the commit; any ask that
finds a marker without a record writes it from the commit in the log, so the record is there
long before the marker can expire. A record is believed only when it fits the table: the
same table id (not a table re-created at the same path) and a version the table has reached.
And it is judged by the table: while the commit it names is in the log, that commit must
carry the batch's marker at the record's generation, and while the marker lives it must not
be older than the record. A record the table contradicts is corrupt, and reported as such.
"""

from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.delta.commit_writer import uri_path
from airflow_eod.core.delta.commits import commit_exists
from airflow_eod.core.delta.log import (
    TableLog,
    checkpoint_holds,
    checkpoint_paths_under,
    commit_path,
    read_commit_actions,
)
from airflow_eod.core.errors import CorruptRecordError, CorruptTableError
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.records.record_files import RecordStore
from airflow_eod.core.table_layout import batch_dir
from airflow_eod.core.table_ref import TableRef

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitRecord:
    """One committed generation of a batch.

    :param batch_key: the batch.
    :param generation: the generation committed.
    :param table_id: the Delta table's ``metaData.id`` when it was committed.
    :param table_version: the table version that landed it.
    :param manifest: the manifest of that commit (as a dict).
    :param files: the batch's data files, table-relative paths as on disk (not URI-encoded).
    :param committed_at: when the record was written (ISO 8601, UTC).
    """

    batch_key: str
    generation: int
    table_id: str
    table_version: int
    manifest: dict[str, Any]
    files: list[str]
    committed_at: str = ""

    @property
    def manifest_obj(self) -> Manifest:
        return Manifest.from_dict(self.manifest)

    def fits(self, table: TableLog) -> bool:
        """Whether this record describes ``table`` (not an older table at the same path)."""
        return self.table_id == str(table.metadata().id) and self.table_version <= table.version()


_RECORD_TYPES: dict[str, type | tuple[type, ...]] = {
    "batch_key": str,
    "generation": int,
    "table_id": str,
    "table_version": int,
    "manifest": dict,
    "files": list,
    "committed_at": str,
}
_REQUIRED = {f.name for f in fields(CommitRecord) if f.name != "committed_at"}


def _shape_error(body: dict[str, Any]) -> str | None:
    """What makes ``body`` no commit record airflow-eod writes, or ``None``. Its checksum
    does not vouch for it (a public SHA-256 of the body: whoever can write the table can
    forge one), so every key and type is checked before any field is used."""
    if not isinstance(body, dict):
        return f"is a {type(body).__name__}, not an object"
    if extra := sorted(set(body) - set(_RECORD_TYPES)):
        return f"has keys no commit record has: {', '.join(map(repr, extra))}"
    if missing := sorted(_REQUIRED - set(body)):
        return f"lacks the key(s) {', '.join(map(repr, missing))}"
    for key, want in _RECORD_TYPES.items():
        value = body.get(key, "")
        # bool is an int to Python, never to a record.
        if not isinstance(value, want) or isinstance(value, bool):
            return f"has a {key} of type {type(value).__name__}"
    if body["generation"] < 0 or body["table_version"] < 0:
        return "has a negative generation or table version"
    if not all(isinstance(f, str) for f in body["files"]):
        return "has a file path that is no string"
    try:
        Manifest.from_dict(body["manifest"])
    except ValueError as exc:
        return f"has a manifest that {exc}"
    return None


def _from_body(plan_log: PlanLog, where: str, body: dict[str, Any]) -> CommitRecord:
    """The record in ``body`` (read from ``where``); :class:`CorruptTableError` when it is
    not of the shape airflow-eod writes (the CLI exits 2, the sensor ends at once)."""
    why = _shape_error(body)
    if why is not None:
        raise CorruptTableError(plan_log.table_path, where, f"{why} (a commit record of the wrong shape)")
    return CommitRecord(**body)


def write_record(plan_log: PlanLog, record: CommitRecord) -> None:
    """Store ``record`` (put-if-absent: a racer that wrote it first described the same commit)."""
    body = asdict(record)
    if not body["committed_at"]:
        body["committed_at"] = datetime.now(UTC).isoformat()
    records = RecordStore(plan_log=plan_log)
    records.put_commit_record(record.batch_key, record.generation, record.table_id, body)


def judge(plan_log: PlanLog, table: TableLog, batch: BatchKey, record: CommitRecord) -> CommitRecord:
    """``record`` if the table does not contradict it; :class:`CorruptRecordError` if it does.

    Reads one commit file at most: the record's own commit, while the log holds it.
    """
    where = RecordStore(plan_log=plan_log).commit_record_path(batch.key, record.generation, record.table_id)
    # A commit file at or below the checkpoint the reading started from is not the table's
    # word: the table is that checkpoint, and a stale writer may have put a commit of its own
    # into the hole a log cleanup left there. The checkpoint's marker judges those.
    actions = (
        read_commit_actions(table.ref, record.table_version, {"txn"})
        if record.table_version > table.checkpoint_version
        else None
    )
    if actions is not None:
        carried = [int(a["txn"]["version"]) for a in actions if a["txn"].get("appId") == batch.app_id]
        if record.generation not in carried:
            found = f"marker version(s) {carried}" if carried else "no marker of the batch"
            raise CorruptRecordError(
                f"batch {batch.label}: commit record {where} says generation {record.generation} landed "
                f"at table version {record.table_version}, but that commit "
                f"({commit_path(table.ref, record.table_version)}) carries {found}. The table is the "
                "truth: move the record aside and run the batch again (see the runbook, 'a corrupt "
                "commit record')"
            )
        return record
    marker = table.transaction_version(batch.app_id)
    if marker is not None and marker < record.generation and not _set_back(table, batch, record, marker):
        raise CorruptRecordError(
            f"batch {batch.label}: commit record {where} says generation {record.generation} landed at "
            f"table version {record.table_version}, but the table's marker of the batch is at "
            f"generation {marker}. The table is the truth: move the record aside and run the batch "
            "again (see the runbook, 'a corrupt commit record')"
        )
    return record


def _set_back(table: TableLog, batch: BatchKey, record: CommitRecord, marker: int) -> bool:
    """Whether the table's marker of ``batch`` (``marker``, below ``record``'s generation) is
    one another writer set back after ``record``'s commit, which the table holds: its first
    file is in the checkpoint (live, or removed since), or the log shows that other writer.
    A stale writer's commit in a hole below the checkpoint has neither."""
    first = uri_path(record.files[0]) if record.files else None
    if checkpoint_holds(table, record.table_version, first, batch.app_id, record.generation) is True:
        return True
    return foreign_marker(table, batch, marker) is not None


def newest_record(plan_log: PlanLog, table: TableLog, batch: BatchKey) -> CommitRecord | None:
    """The newest record of ``batch`` that fits ``table``, or ``None``."""
    table_id = str(table.metadata().id)
    body = RecordStore(plan_log=plan_log).newest_commit_record(batch.key, table_id)
    if body is None:
        return None
    gen = body.get("generation") if isinstance(body, dict) else None
    where = (
        RecordStore(plan_log=plan_log).commit_record_path(batch.key, gen, table_id)
        if type(gen) is int and gen >= 0
        else f"the newest commit record in {RecordStore(plan_log=plan_log).record_dir(batch.key)}"
    )
    record = _from_body(plan_log, where, body)
    if not record.fits(table):
        log.warning(
            "batch %s: ignoring commit record g%d: it describes table %s at version %d, the table "
            "here is %s at version %d (re-created at the same path?)",
            batch,
            record.generation,
            record.table_id,
            record.table_version,
            table.metadata().id,
            table.version(),
        )
        return None
    return judge(plan_log, table, batch, record)


def record_at(plan_log: PlanLog, table: TableLog, batch: BatchKey, generation: int) -> CommitRecord | None:
    """The record of ``batch`` at exactly ``generation`` that fits ``table``, or ``None``."""
    table_id = str(table.metadata().id)
    body = RecordStore(plan_log=plan_log).commit_record(batch.key, generation, table_id)
    if body is None:
        return None
    where = RecordStore(plan_log=plan_log).commit_record_path(batch.key, generation, table_id)
    record = _from_body(plan_log, where, body)
    if not record.fits(table):
        return None
    return judge(plan_log, table, batch, record)


def _landed(table: TableLog, batch: BatchKey, generation: int, version: int) -> Manifest | None:
    actions = read_commit_actions(table.ref, version, {"txn", "commitInfo"})
    if not actions or not any(
        a["txn"].get("appId") == batch.app_id and int(a["txn"]["version"]) == generation
        for a in actions
        if "txn" in a
    ):
        return None
    for a in actions:
        if "commitInfo" in a:
            manifest = Manifest.from_user_metadata(a["commitInfo"].get("userMetadata"))
            if manifest is not None and manifest.batch_key == batch.key:
                return manifest
    return None


def foreign_marker(table: TableLog, batch: BatchKey, generation: int) -> tuple[int, str] | None:
    """(version, operation) of the newest commit in the log that set ``batch``'s marker at
    ``generation`` without a manifest of the batch (another writer's idempotent write with the
    pipeline's app id). Asked only when no commit of the batch's own that sets it is found;
    ``None`` when no commit that set it is left in the log (then nothing tells, and the
    marker is taken as the table's word).

    The commit after the checkpoint that set the marker last is read first; else the whole
    log is searched, newest first (a marker in a checkpoint has no commit named)."""
    known = table.marker_commit(batch.app_id)
    newest_first = range(table.version(), -1, -1) if known is None else [known]
    for version in newest_first:
        if not commit_exists(table.ref, version):
            break  # older commits have aged out too
        actions = read_commit_actions(table.ref, version, {"txn", "commitInfo"}) or []
        if not any(
            a["txn"].get("appId") == batch.app_id and a["txn"].get("version") == generation
            for a in actions
            if "txn" in a
        ):
            continue
        if _landed(table, batch, generation, version) is not None:
            return None  # the batch's own commit
        info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        return version, str(info.get("operation") or "no commitInfo")
    return None


def own_commit(
    plan_log: PlanLog, table: TableLog, batch: BatchKey, top: int, floor: int
) -> tuple[int, CommitRecord | None] | None:
    """The newest generation above ``floor`` and up to ``top`` that a commit of ``batch``'s
    own landed although its committer died before its record, with that record (repaired
    from the log), or with ``None`` when a log cleanup took the commit and only the newest
    checkpoint still holds its files. ``None`` when the table shows no such commit.

    Asked only where the marker does not tell (another writer set it, or it expired); reads
    the log once per generation, and the checkpoint once.
    """
    for generation in range(top, floor, -1):
        record = repair_record(plan_log, table, batch, generation)
        if record is not None:
            return generation, record
    if top <= floor:
        return None
    # Staged files reach a checkpoint only through a commit of the batch's own: their
    # attempt folder names the generation.
    folder = batch_dir(batch) + "/g"
    held = set()
    for path in checkpoint_paths_under(table, uri_path(folder)):
        m = _GENERATION_DIR.match(unquote(path)[len(folder) - 1 :])
        if m and floor < int(m.group(1)) <= top:
            held.add(int(m.group(1)))
    return (max(held), None) if held else None


_GENERATION_DIR = re.compile(r"g(\d+)-[^/]+/")


def find_commit(table: TableLog, batch: BatchKey, generation: int) -> tuple[int, Manifest] | None:
    """The (version, manifest) of the commit that landed ``batch`` at ``generation``; ``None``
    once that commit has aged out of the log.

    Only a committer that died before its record sends an ask here. A marker set after the
    newest checkpoint names its commit; otherwise the log is searched newest first.
    """
    known = table.marker_commit(batch.app_id)
    # The commit that set the marker last may be another writer's with the same app id
    # (delta-rs sets a marker again where Delta Spark skips): then the log is searched too.
    candidates = [known] if known is not None else []
    candidates += [v for v in range(table.version(), -1, -1) if v != known]
    for version in candidates:
        if not commit_exists(table.ref, version):
            break  # older commits have aged out too
        manifest = _landed(table, batch, generation, version)
        if manifest is None:
            continue
        if version > table.checkpoint_version or _part_of_table(table, batch, generation, version):
            return version, manifest
    return None


def _part_of_table(table: TableLog, batch: BatchKey, generation: int, version: int) -> bool:
    """Whether a commit at or below the checkpoint is the table's, not a stale writer's commit
    put into a hole a log cleanup left (it may even have taken the file name of the commit the
    cleanup removed; see :func:`airflow_eod.core.delta.log.checkpoint_holds`).

    The table's own commit left a trace: the checkpoint holds its first file (live, or as a
    tombstone) or, for a commit without files, its marker at ``generation``; or, once the
    tombstone expired, a later commit still in the log removed that file (an OPTIMIZE). A
    stale writer's files were never in the table, so neither holds for them.
    """
    actions = read_commit_actions(table.ref, version, {"add"}) or []
    first = next((a["add"]["path"] for a in actions), None)
    if checkpoint_holds(table, version, first, batch.app_id, generation) is True:
        return True
    if first is None:
        return False
    for later in range(version + 1, table.version() + 1):
        removes = read_commit_actions(table.ref, later, {"remove"})
        if removes is None:
            return False  # aged out: no trace left to tell
        if any(r["remove"].get("path") == first for r in removes):
            return True
    return False


def commit_files(ref: TableRef, version: int) -> list[str] | None:
    """Every file added by commit ``version`` (decoded paths), or ``None`` when the commit
    file is gone. A commit that carries a batch's marker lands that batch and nothing else,
    so these are the batch's files, wherever the engine put them (Delta Spark writes them
    at the table root, not under the batch's directory)."""
    actions = read_commit_actions(ref, version, {"add"})
    if actions is None:
        return None
    return sorted(unquote(a["add"]["path"]) for a in actions)


def repair_record(
    plan_log: PlanLog, table: TableLog, batch: BatchKey, generation: int
) -> CommitRecord | None:
    """Write the missing record of a generation whose marker the table holds, from the commit
    in the log (an attempt died between its commit and its record). ``None`` when that commit
    has aged out of the log too."""
    found = find_commit(table, batch, generation)
    if found is None:
        return None
    version, manifest = found
    files = commit_files(plan_log.ref, version)
    if files is None:
        return None
    record = CommitRecord(batch.key, generation, str(table.metadata().id), version, asdict(manifest), files)
    try:
        write_record(plan_log, record)
        log.info(
            "batch %s: wrote the missing commit record of generation %d (version %d)",
            batch,
            generation,
            version,
        )
    except OSError as exc:  # a read-only mount: the answer stands, the record waits for a writer
        log.warning("batch %s: cannot write the commit record of generation %d: %s", batch, generation, exc)
    return record
