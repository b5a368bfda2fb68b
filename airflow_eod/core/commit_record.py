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
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from deltalake import DeltaTable

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.plan_log import PlanLog

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
        return Manifest(**self.manifest)

    def fits(self, table: DeltaTable) -> bool:
        """Whether this record describes ``table`` (not an older table at the same path)."""
        return self.table_id == str(table.metadata().id) and self.table_version <= table.version()


def _from_body(body: dict[str, Any] | None) -> CommitRecord | None:
    if body is None:
        return None
    return CommitRecord(**body)


def write_record(plan_log: PlanLog, record: CommitRecord) -> None:
    """Store ``record`` (put-if-absent: a racer that wrote it first described the same commit)."""
    body = asdict(record)
    if not body["committed_at"]:
        body["committed_at"] = datetime.now(UTC).isoformat()
    plan_log.put_commit_record(record.batch_key, record.generation, record.table_id, body)


def newest_record(plan_log: PlanLog, table: DeltaTable, batch: BatchKey) -> CommitRecord | None:
    """The newest record of ``batch`` that fits ``table``, or ``None``."""
    record = _from_body(plan_log.newest_commit_record(batch.key, str(table.metadata().id)))
    if record is None:
        return None
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
    return record


def record_at(plan_log: PlanLog, table: DeltaTable, batch: BatchKey, generation: int) -> CommitRecord | None:
    """The record of ``batch`` at exactly ``generation`` that fits ``table``, or ``None``."""
    record = _from_body(plan_log.commit_record(batch.key, generation, str(table.metadata().id)))
    return record if record is not None and record.fits(table) else None


def find_commit(table: DeltaTable, batch: BatchKey, generation: int) -> tuple[int, Manifest] | None:
    """The (version, manifest) of the commit that landed ``batch`` at ``generation``, from
    the log's commit infos, newest first; ``None`` once that commit has aged out."""
    for info in table.history():
        manifest = Manifest.from_user_metadata(info.get("userMetadata"))
        if (
            manifest is not None
            and manifest.pipeline_id == batch.pipeline_id
            and manifest.batch_key == batch.key
            and manifest.generation == generation
        ):
            return int(info["version"]), manifest
    return None


def commit_files(table_path: str, version: int) -> list[str] | None:
    """Every file added by commit ``version`` (decoded paths), or ``None`` when the commit
    file is gone. A commit that carries a batch's marker lands that batch and nothing else,
    so these are the batch's files, wherever the engine put them (Delta Spark writes them
    at the table root, not under the batch's directory)."""
    path = os.path.join(table_path, "_delta_log", f"{version:020d}.json")
    try:
        with open(path) as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        return None
    files = []
    for line in lines:
        add = json.loads(line).get("add") if line.strip() else None
        if add is not None:
            files.append(unquote(add["path"]))
    return sorted(files)


def repair_record(
    plan_log: PlanLog, table: DeltaTable, batch: BatchKey, generation: int
) -> CommitRecord | None:
    """Write the missing record of a generation whose marker the table holds, from the commit
    in the log (an attempt died between its commit and its record). ``None`` when that commit
    has aged out of the log too."""
    found = find_commit(table, batch, generation)
    if found is None:
        return None
    version, manifest = found
    files = commit_files(plan_log.table_path, version)
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
