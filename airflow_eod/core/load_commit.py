"""The delta-rs commit engine: one Delta commit that holds a batch's data files, its
``txn`` marker and its manifest.

The marker check and the commit run against the same snapshot, read in a bounded way
(:mod:`airflow_eod.core.delta.log`), and the commit takes exactly the version after it
(:mod:`airflow_eod.core.delta.commit_writer`). A racing commit that took that version makes ours
fail; the loser goes back to the ask and never blindly retries the commit.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import asdict

from deltalake import CommitProperties, Schema, Transaction
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

from airflow_eod.core.ask import BatchStatus, ask_table
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.delta import compat as table_compat
from airflow_eod.core.delta.binding import check_table_identity
from airflow_eod.core.delta.commit_writer import checkpoint_due, uri_path, write_checkpoint, write_commit
from airflow_eod.core.delta.log import TableLog, checkpoint_holds
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import BatchError, BatchRefusedError
from airflow_eod.core.faults import fault_point
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.merge_files import MergeBase, MergeConflict, conflict, merge_live_files
from airflow_eod.core.planlog.retention import DEFAULT_RETENTION, RETENTION_KEY
from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.records.compaction import maybe_compact
from airflow_eod.core.records.store import CommitRecord, write_record
from airflow_eod.core.replaced_files import refuse_dropping_landed_files, replaced_files
from airflow_eod.core.staged_files import StagedBatch
from airflow_eod.core.storage import requests_logged
from airflow_eod.core.table_ref import TableRef

log = logging.getLogger(__name__)

# Rounds of "ask, commit, lose a race" before giving up; each lost round backs off a little.
MAX_COMMIT_ROUNDS = 50


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


def _column_nulls(entry: object) -> int | None:
    """A top-level column's null count from its ``nullCount`` entry, or ``None`` when unknown.

    A struct's entry holds its leaves' counts, not its own: a null struct makes each of its
    leaves null, so a leaf without nulls says the struct has none; otherwise it is unknown.
    """
    if isinstance(entry, dict):
        return 0 if any(_column_nulls(v) == 0 for v in entry.values()) else None
    return entry if isinstance(entry, int) and not isinstance(entry, bool) else None


def _check_not_nulls(table: TableLog, staged: StagedBatch, label: str) -> None:
    for column in table_compat.not_null_columns(table):
        for f in staged.files:
            nulls = _column_nulls(json.loads(f.stats).get("nullCount", {}).get(column))
            if nulls is None or nulls > 0:
                raise BatchRefusedError(
                    label,
                    f"column {column} is NOT NULL in the table but file {f.path} "
                    f"has {'unknown' if nulls is None else nulls} nulls in it",
                )


def _record_commit(
    ref: TableRef,
    table_id: str,
    batch: BatchKey,
    generation: int,
    version: int,
    manifest: Manifest,
    staged: StagedBatch,
) -> None:
    check_table_identity(ref, table_id)
    record = CommitRecord(
        batch.key,
        generation,
        table_id,
        version,
        asdict(manifest),
        sorted(f.path for f in staged.files),
    )
    write_record(PlanLog(ref, batch.pipeline_id), record)


def _create_table(
    ref: TableRef,
    batch: BatchKey,
    generation: int,
    staged: StagedBatch,
    manifest: Manifest,
    config: Mapping[str, str],
    adds: list[AddAction],
) -> bool:
    """Create the table with the batch as its first commit; ``False`` if another writer
    created it first (the caller asks again)."""
    variant = table_compat.variant_columns(staged.schema_json)
    if variant:
        # The engine refuses a table with table feature variantType (compat.TABLE_FEATURES):
        # it must not create one, which its next load would refuse.
        raise BatchRefusedError(
            batch.label,
            f"column(s) {', '.join(variant)} hold VARIANT values: a table of them needs table feature "
            "variantType, which the delta-rs engine does not write (its statistics and checks do not "
            "cover VARIANT columns; Spark writes them shredded); nothing was committed. Load this "
            "pipeline with engine='delta-spark'",
        )
    props = CommitProperties(
        custom_metadata={"userMetadata": manifest.to_user_metadata()},
        app_transactions=[Transaction(batch.app_id, generation, int(time.time() * 1000))],
        # delta-rs's own retry re-commits a table creation that lost as the next version,
        # marker included, without any check: the batch would land twice.
        max_commit_retries=0,
    )
    fault_point("before_commit")
    try:
        create_table_with_add_actions(
            ref.path,
            _table_schema(staged.schema_json),
            adds,
            mode="error",
            partition_by=staged.partition_by or None,
            configuration=dict(config),
            storage_options=ref.storage_options or None,
            commit_properties=props,
        )
    except DeltaError as exc:
        if open_table(ref) is not None:
            return False
        raise BatchError(batch.label, f"the Delta commit that creates the table failed: {exc}") from exc
    return True


def _created_id(ref: TableRef) -> str:
    table = open_table(ref)
    assert table is not None  # we just created it
    return str(table.metadata().id)


def commit_batch(
    ref: TableRef,
    batch: BatchKey,
    generation: int,
    staged: StagedBatch,
    manifest: Manifest,
    *,
    table_configuration: Mapping[str, str] | None = None,
    replace_previous: bool = False,
    schema_policy: str = table_compat.SCHEMA_FAIL,
    merge: MergeBase | None = None,
) -> tuple[bool, BatchStatus]:
    """Commit ``staged`` as ``batch`` at ``generation`` unless the table already has it.

    :param replace_previous: a restatement: the batch's files of earlier generations are
        removed in the same commit that adds the new ones.
    :param schema_policy: ``fail``, or ``add_columns`` to add new nullable columns in the
        same commit as the data.
    :param merge: a merge load's read (:mod:`airflow_eod.spark.merge_job`): the files it
        rewrote are removed in the commit, which is refused with
        :class:`~airflow_eod.core.merge_files.MergeConflict` once another writer changed
        them (or added a file that may hold the batch's keys) since the read.
    :returns: ``(we_committed, status)`` where ``status`` is the table's answer after the
        commit (or the answer that showed the batch was already there).
    """
    with requests_logged(None if ref.is_local else ref.storage(), log, "the commit", batch):
        return _commit_batch(
            ref,
            batch,
            generation,
            staged,
            manifest,
            table_configuration=table_configuration,
            replace_previous=replace_previous,
            schema_policy=schema_policy,
            merge=merge,
        )


def _merge_removes(table: TableLog | None, merge: MergeBase, label: str) -> list[RemoveAction]:
    """The removes of a merge's commit on ``table``, or :class:`MergeConflict` when another
    writer's commit since the merge's read touched what it rewrote."""
    if table is not None and table.version() == merge.version:
        return merge.removes
    # Another writer committed since the read: only the full snapshot tells which files changed.
    why = conflict(merge, None if table is None else merge_live_files(table.ref, table.snapshot()))
    if why is not None:
        raise MergeConflict(label, f"{why}; nothing was committed")
    return merge.removes


def _commit_batch(
    ref: TableRef,
    batch: BatchKey,
    generation: int,
    staged: StagedBatch,
    manifest: Manifest,
    *,
    table_configuration: Mapping[str, str] | None = None,
    replace_previous: bool = False,
    schema_policy: str = table_compat.SCHEMA_FAIL,
    merge: MergeBase | None = None,
) -> tuple[bool, BatchStatus]:
    config = {RETENTION_KEY: DEFAULT_RETENTION, **(table_configuration or {})}
    store = ref.storage()
    missing = [f.path for f in staged.files if store.head(f.path) is None]
    if missing:
        # A VACUUM (or a person) removed staged files that were waiting for their commit: a
        # commit of them would make every later read of the table fail.
        raise BatchError(
            batch.label,
            f"{len(missing)} staged file(s) of generation {generation} are gone before their commit "
            f"(e.g. {missing[0]}; VACUUM?); nothing was committed. A retry stages the batch's data "
            "again; staged quarantine rejects of an earlier attempt come back only with a restatement",
        )
    adds = [f.add_action() for f in staged.files]
    for round_no in range(1, MAX_COMMIT_ROUNDS + 1):
        table = open_table(ref)
        check_table_identity(ref, None if table is None else str(table.metadata().id))
        status = ask_table(table, batch, generation)
        if status.committed:
            return False, status
        try:
            if table is None:
                if merge is not None:
                    _merge_removes(table, merge, batch.label)
                if not _create_table(ref, batch, generation, staged, manifest, config, adds):
                    log.info("batch %s: another attempt created the table first; asking again", batch)
                    continue
                version, checkpoint = 0, False
            else:
                table_compat.check_writable(table, ref)
                widened = table_compat.check_schema(
                    table, staged.schema_json, staged.partition_by, batch.label, schema_policy
                )
                _check_not_nulls(table, staged, batch.label)
                removes: list[RemoveAction] = []
                if merge is not None:
                    removes = _merge_removes(table, merge, batch.label)
                if replace_previous:
                    refuse_dropping_landed_files(status, manifest, batch.label)
                    removes = replaced_files(table, batch, status, batch.label)
                    if widened is not None:
                        raise BatchRefusedError(
                            batch.label,
                            "a restatement cannot add columns in the same commit; add them with a "
                            "normal load first, or alter the table",
                        )
                fault_point("before_commit")
                operation = "MERGE" if merge is not None else "WRITE"
                if not write_commit(
                    table,
                    batch,
                    generation,
                    manifest,
                    adds,
                    removes,
                    schema_json=widened,
                    operation=operation,
                ):
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
        table_id = str(table.metadata().id) if table is not None else _created_id(ref)
        # Our commit is exactly the version after the snapshot's; the record makes the
        # batch answerable after its marker expires.
        fault_point("before_record")
        _record_commit(ref, table_id, batch, generation, version, manifest, staged)
        if checkpoint:
            assert table is not None
            write_checkpoint(ref, version, table.metadata().configuration)
        after = ask_table(open_table(ref), batch, generation)
        if not after.committed:
            raise BatchError(batch.label, "the commit returned but the table has no marker for it")
        ours = after.manifest is not None and after.manifest.attempt_id == manifest.attempt_id
        # Every so many versions the plan log's settled entries move into segments (best effort).
        maybe_compact(ref, batch.pipeline_id, version)
        log.info("batch %s: committed at table version %s (round %d)", batch, after.table_version, round_no)
        return ours, after
    raise BatchError(
        batch.label,
        f"gave up after {MAX_COMMIT_ROUNDS} commit rounds lost to concurrent writers; "
        "nothing was committed, the next attempt will ask and try again",
    )
