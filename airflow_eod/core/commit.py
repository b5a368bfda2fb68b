"""The delta-rs commit engine: one Delta commit that holds a batch's data files, its
``txn`` marker and its manifest.

The marker check and the commit run against the same snapshot, read in a bounded way
(:mod:`airflow_eod.core.delta_log`), and the commit takes exactly the version after it
(:mod:`airflow_eod.core.delta_commit`). A racing commit that took that version makes ours
fail; the loser goes back to the ask and never blindly retries the commit.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Schema, Transaction
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

from airflow_eod.core import table_check
from airflow_eod.core.ask import BatchStatus, ask_table, open_table
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.commit_record import CommitRecord, write_record
from airflow_eod.core.delta_commit import checkpoint_due, uri_path, write_checkpoint, write_commit
from airflow_eod.core.delta_log import TableLog, checkpoint_holds
from airflow_eod.core.errors import BatchError, BatchRefusedError
from airflow_eod.core.faults import fault_point
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.plan_log import PlanLog
from airflow_eod.core.retention import DEFAULT_RETENTION, RETENTION_KEY
from airflow_eod.core.table_binding import check_table_identity
from airflow_eod.core.table_layout import batch_dir, local_path

log = logging.getLogger(__name__)

# Rounds of "ask, commit, lose a race" before giving up; each lost round backs off a little.
MAX_COMMIT_ROUNDS = 50


@dataclass(frozen=True)
class StagedFile:
    """A Parquet file written for a batch attempt, not yet part of the table.

    :param path: the path relative to the table root, with ``/`` separators.
    :param size: bytes.
    :param modification_time: milliseconds since the epoch.
    :param partition_values: Delta partition values (strings, ``None`` for null).
    :param num_records: rows in the file.
    :param stats: the Delta stats JSON.
    """

    path: str
    size: int
    modification_time: int
    partition_values: Mapping[str, str | None]
    num_records: int
    stats: str

    def add_action(self) -> AddAction:
        return AddAction(
            self.path, self.size, dict(self.partition_values), self.modification_time, True, self.stats
        )


@dataclass(frozen=True)
class StagedBatch:
    """The files one attempt wrote for a batch, and the schema they share.

    :param schema_json: the Delta (Spark) schema JSON of the batch, partition columns
        included.
    :param partition_by: partition columns, in order.
    :param attempt_dir: the attempt's directory, relative to the table root.
    :param files: the Parquet files.
    """

    schema_json: str
    partition_by: list[str]
    attempt_dir: str
    files: list[StagedFile] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(f.num_records for f in self.files)


def _back_off(round_no: int) -> None:
    """Sleep a little, more with every lost round, so racing writers stop colliding."""
    time.sleep(random.uniform(0, 0.02 * min(round_no, 25)))


def _table_schema(schema_json: str) -> Schema:
    """The schema a new table is created with: every top-level column nullable, so that a
    table this engine creates never carries NOT NULL rules it would not enforce."""
    body = json.loads(schema_json)
    for f in body["fields"]:
        f["nullable"] = True
    return Schema.from_json(json.dumps(body))


def _check_not_nulls(table: TableLog, staged: StagedBatch, label: str) -> None:
    for column in table_check.not_null_columns(table):
        for f in staged.files:
            nulls = json.loads(f.stats).get("nullCount", {}).get(column)
            if nulls is None or nulls > 0:
                raise BatchRefusedError(
                    label,
                    f"column {column} is NOT NULL in the table but file {f.path} "
                    f"has {'unknown' if nulls is None else nulls} nulls in it",
                )


def _partition_string(value: object) -> str | None:
    """A partition value as the string Delta keeps in the log."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


def live_files(table: DeltaTable) -> list[dict[str, Any]]:
    """The snapshot's add actions, with ``path`` decoded to the file's path on disk."""
    adds = pa.table(table.get_add_actions(flatten=False)).to_pylist()
    for a in adds:
        # delta-rs hands back the log's percent-encoded path, and encodes whatever it is
        # given: a remove built from the raw value would name another file and remove nothing.
        a["path"] = unquote(a["path"])
    return adds


def batch_files(table: DeltaTable, batch: BatchKey, extra: Sequence[str] = ()) -> list[RemoveAction]:
    """Remove actions for every file of ``batch`` that the snapshot holds, at any generation:
    those under the batch's directory, and the live ones among ``extra`` (the files its
    commit record lists, wherever they are)."""
    prefix = batch_dir(batch) + "/"
    wanted = set(extra)
    now = int(time.time() * 1000)
    removes = []
    for a in live_files(table):
        if not a["path"].startswith(prefix) and a["path"] not in wanted:
            continue
        parts = {k: _partition_string(v) for k, v in (a.get("partition_values") or {}).items()}
        removes.append(RemoveAction(a["path"], True, now, a["size_bytes"], parts or None))
    return removes


def _refuse_dropping_landed_files(status: BatchStatus, manifest: Manifest, label: str) -> None:
    """A re-freeze of a batch nobody had committed may leave out planned files that were
    gone. If an older attempt committed the batch meanwhile (a zombie that read them before
    they went), swapping it out would remove rows that landed and were reported."""
    dropped = manifest.boundary.get("dropped") or []
    if dropped and status.committed_generation is not None:
        raise BatchRefusedError(
            label,
            f"generation {status.committed_generation} of the batch was committed while this re-freeze "
            f"was planned, and it holds {len(dropped)} file(s) the re-freeze left out as gone (e.g. "
            f"{dropped[0]}); committing would remove their rows. Nothing was committed: restate the "
            "batch again (it is committed now), after restoring the files if they should stay",
        )


def replaced_files(table: TableLog, batch: BatchKey, status: BatchStatus, label: str) -> list[RemoveAction]:
    """The files a restatement removes, checked against what the table says it holds.

    Every file of the generation being replaced must still be live: a file that another
    writer's OPTIMIZE rewrote has moved its rows into a file outside the batch's directory,
    and removing the rest would leave those rows beside the new generation's.
    """
    if table.metadata().configuration.get("delta.appendOnly") == "true":
        raise BatchRefusedError(
            label, "the table is append-only (delta.appendOnly=true): a batch cannot be restated"
        )
    gen = status.committed_generation
    # The swap needs the live files, which only the full snapshot knows; restatements are rare.
    snapshot = table.snapshot()
    if gen is None:
        # Never committed (a re-freeze): replace whatever a zombie may have landed.
        return batch_files(snapshot, batch)
    if status.record is None:
        raise BatchRefusedError(
            label,
            f"the table holds generation {gen} of the batch, but its commit record and the commit "
            "itself are gone from the log, so which files hold its rows cannot be proven; it "
            "cannot be restated without risking duplicate rows (see the runbook, 'restating')",
        )
    if not status.record.files and status.manifest is not None and status.manifest.rows > 0:
        raise BatchRefusedError(
            label,
            f"the commit record of generation {gen} lists no files for its {status.manifest.rows} rows, "
            "so they cannot be swapped out; it cannot be restated without risking duplicate rows",
        )
    removes = batch_files(snapshot, batch, status.record.files)
    live = {r.path for r in removes}
    gone = [f for f in status.record.files if f not in live]
    if gone:
        raise BatchRefusedError(
            label,
            f"{len(gone)} of the {len(status.record.files)} file(s) of generation {gen} are no longer "
            f"live (e.g. {gone[0]}): another writer rewrote them (OPTIMIZE?), so their rows now sit in "
            "files outside the batch and restating would duplicate them; nothing was committed",
        )
    return removes


def _record_commit(
    path: str,
    table_id: str,
    batch: BatchKey,
    generation: int,
    version: int,
    manifest: Manifest,
    staged: StagedBatch,
) -> None:
    check_table_identity(path, table_id)
    record = CommitRecord(
        batch.key,
        generation,
        table_id,
        version,
        asdict(manifest),
        sorted(f.path for f in staged.files),
    )
    write_record(PlanLog(path, batch.pipeline_id), record)


def _create_table(
    path: str,
    batch: BatchKey,
    generation: int,
    staged: StagedBatch,
    manifest: Manifest,
    config: Mapping[str, str],
    adds: list[AddAction],
    try_number: int | None,
) -> bool:
    """Create the table with the batch as its first commit; ``False`` if another writer
    created it first (the caller asks again)."""
    props = CommitProperties(
        custom_metadata={"userMetadata": manifest.to_user_metadata()},
        app_transactions=[Transaction(batch.app_id, generation, int(time.time() * 1000))],
        # delta-rs's own retry re-commits a table creation that lost as the next version,
        # marker included, without any check: the batch would land twice.
        max_commit_retries=0,
    )
    fault_point("before_commit", try_number=try_number)
    try:
        create_table_with_add_actions(
            path,
            _table_schema(staged.schema_json),
            adds,
            mode="error",
            partition_by=staged.partition_by or None,
            configuration=dict(config),
            commit_properties=props,
        )
    except DeltaError as exc:
        if open_table(path) is not None:
            return False
        raise BatchError(batch.label, f"the Delta commit that creates the table failed: {exc}") from exc
    return True


def _created_id(path: str) -> str:
    table = open_table(path)
    assert table is not None  # we just created it
    return str(table.metadata().id)


def commit_batch(
    table_uri: str,
    batch: BatchKey,
    generation: int,
    staged: StagedBatch,
    manifest: Manifest,
    *,
    table_configuration: Mapping[str, str] | None = None,
    try_number: int | None = None,
    replace_previous: bool = False,
    schema_policy: str = table_check.SCHEMA_FAIL,
) -> tuple[bool, BatchStatus]:
    """Commit ``staged`` as ``batch`` at ``generation`` unless the table already has it.

    :param replace_previous: a restatement: the batch's files of earlier generations are
        removed in the same commit that adds the new ones.
    :param schema_policy: ``fail``, or ``add_columns`` to add new nullable columns in the
        same commit as the data.
    :returns: ``(we_committed, status)`` where ``status`` is the table's answer after the
        commit (or the answer that showed the batch was already there).
    """
    path = local_path(table_uri)
    config = {RETENTION_KEY: DEFAULT_RETENTION, **(table_configuration or {})}
    missing = [f.path for f in staged.files if not os.path.isfile(os.path.join(path, f.path))]
    if missing:
        # A VACUUM (or a person) removed staged files that were waiting for their commit: a
        # commit of them would make every later read of the table fail.
        raise BatchError(
            batch.label,
            f"{len(missing)} staged file(s) of generation {generation} are gone before their commit "
            f"(e.g. {missing[0]}; VACUUM?); nothing was committed. Restate the batch to stage it again",
        )
    adds = [f.add_action() for f in staged.files]
    for round_no in range(1, MAX_COMMIT_ROUNDS + 1):
        table = open_table(path)
        check_table_identity(path, None if table is None else str(table.metadata().id))
        status = ask_table(table, batch, generation)
        if status.committed:
            return False, status
        try:
            if table is None:
                if not _create_table(path, batch, generation, staged, manifest, config, adds, try_number):
                    log.info("batch %s: another attempt created the table first; asking again", batch)
                    continue
                version, checkpoint = 0, False
            else:
                table_check.check_writable(table, path)
                widened = table_check.check_schema(
                    table, staged.schema_json, staged.partition_by, batch.label, schema_policy
                )
                _check_not_nulls(table, staged, batch.label)
                removes: list[RemoveAction] = []
                if replace_previous:
                    _refuse_dropping_landed_files(status, manifest, batch.label)
                    removes = replaced_files(table, batch, status, batch.label)
                    if widened is not None:
                        raise BatchRefusedError(
                            batch.label,
                            "a restatement cannot add columns in the same commit; add them with a "
                            "normal load first, or alter the table",
                        )
                fault_point("before_commit", try_number=try_number)
                if not write_commit(table, batch, generation, manifest, adds, removes, schema_json=widened):
                    log.info(
                        "batch %s: commit lost a race for version %d; asking again",
                        batch,
                        table.version() + 1,
                    )
                    _back_off(round_no)
                    continue
                version = table.version() + 1
                first = uri_path(adds[0].path) if adds else None
                if checkpoint_holds(table, version, first, batch.app_id, generation) is not True:
                    # Our reading was overtaken by a checkpoint and its log cleanup between
                    # the probe and the put: the commit sits where no reader looks.
                    log.warning(
                        "batch %s: commit %d landed below a newer checkpoint, where no reader sees "
                        "it; asking again",
                        batch,
                        version,
                    )
                    _back_off(round_no)
                    continue
                checkpoint = checkpoint_due(table, version)
        except OSError as exc:
            raise BatchError(batch.label, f"the Delta commit failed: {exc}") from exc
        table_id = str(table.metadata().id) if table is not None else _created_id(path)
        # Our commit is exactly the version after the snapshot's; the record makes the
        # batch answerable after its marker expires.
        fault_point("before_record", try_number=try_number)
        _record_commit(path, table_id, batch, generation, version, manifest, staged)
        if checkpoint:
            assert table is not None
            write_checkpoint(path, version, table.metadata().configuration)
        after = ask_table(open_table(path), batch, generation)
        if not after.committed:
            raise BatchError(batch.label, "the commit returned but the table has no marker for it")
        ours = after.manifest is not None and after.manifest.attempt_id == manifest.attempt_id
        log.info("batch %s: committed at table version %s (round %d)", batch, after.table_version, round_no)
        return ours, after
    raise BatchError(
        batch.label,
        f"gave up after {MAX_COMMIT_ROUNDS} commit rounds lost to concurrent writers; "
        "nothing was committed, the next attempt will ask and try again",
    )
