"""The quarantine outbox: a batch's malformed records reach the quarantine table only
after, and exactly as, the main table's commit says.

The quarantine table must always describe the same generation of a batch as the main
table, which is the authority. So the malformed records are staged (written, not committed)
into the quarantine table's attempt directory before the main commit, and the staged batch
rides as the *outbox* in the main commit's manifest (``Manifest.extra["quarantine"]``),
atomically with the data. Once the main commit has landed (by this attempt, or found
already there by a retry or a zombie), the outbox of the committed manifest is *delivered*:
committed to the quarantine table under the same batch key and generation, which the ask
inside :func:`~airflow_eod.core.load_commit.commit_batch` makes idempotent. A refused main commit
therefore leaves the quarantine table untouched, and a crash between the two commits is
healed by the next attempt's delivery.

A restatement whose corrected files have no malformed records delivers an *empty* outbox,
so the old generation's rejects are removed in one quarantine commit. A first load
(generation 0) with none delivers nothing: no extra commit per clean batch.

This module owns staging, the outbox's plain-data form, delivery, and the quarantine
table's cleanup; :mod:`airflow_eod.spark.load_job` calls it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from airflow_eod.core.ask import BatchStatus, ask_table
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.cleanup import remove_uncommitted_attempts
from airflow_eod.core.delta import compat as table_compat
from airflow_eod.core.delta.binding import check_table_identity
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import BatchError, BatchRefusedError
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.replaced_files import replaced_files
from airflow_eod.core.staged_files import StagedBatch, StagedFile
from airflow_eod.core.table_layout import attempt_dir, local_path, normalise
from airflow_eod.spark.bad_records import RAW_RECORD_COLUMN, SOURCE_FILE_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

OUTBOX_KEY = "quarantine"
# The quarantine table's fixed schema (see bad_records.split_malformed). An empty outbox
# carries it, so delivering "no rejects" needs no Spark DataFrame.
QUARANTINE_SCHEMA_JSON = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": SOURCE_FILE_COLUMN, "type": "string", "nullable": True, "metadata": {}},
            {"name": RAW_RECORD_COLUMN, "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)


@dataclass(frozen=True)
class Outbox:
    """A staged quarantine batch waiting for the main commit that carries it.

    :param table_uri: the quarantine table (as normalised when staged).
    :param replace_previous: the delivery removes the batch's rejects of earlier
        generations (a restatement) in the same quarantine commit.
    :param staged: the staged files; none for an empty outbox.
    """

    table_uri: str
    replace_previous: bool
    staged: StagedBatch = field(default_factory=lambda: StagedBatch(QUARANTINE_SCHEMA_JSON, [], ""))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outbox:
        staged = dict(data["staged"])
        files = [StagedFile(**f) for f in staged.pop("files", [])]
        return cls(data["table_uri"], bool(data["replace_previous"]), StagedBatch(**staged, files=files))


def _check_quarantine_table(
    quarantine_uri: str, batch: BatchKey, generation: int, replace_previous: bool, main_table_uri: str
) -> None:
    """Refuse, before the main commit, a quarantine table the delivery could never commit to:
    otherwise the main commit would land and every delivery after it would fail. That
    includes a replacement the quarantine table would refuse (append-only, or old rejects
    that another writer's OPTIMIZE rewrote)."""
    table = open_table(quarantine_uri)  # a foreign, non-Delta directory raises here
    check_table_identity(local_path(quarantine_uri), None if table is None else str(table.metadata().id))
    if table is None:
        return
    table_compat.check_writable(table, quarantine_uri)
    table_compat.check_schema(table, QUARANTINE_SCHEMA_JSON, [], batch.label)
    status = ask_table(table, batch, generation)
    owner = (status.manifest.extra or {}).get("quarantine_of") if status.manifest else None
    if owner is not None and owner != normalise(main_table_uri):
        # Deliveries are fenced by the batch's marker in the quarantine table; a second main
        # table with the same pipeline id and batch key would find it taken and drop its rejects.
        raise BatchRefusedError(
            batch.label,
            f"the quarantine table {quarantine_uri} already holds this batch for the table {owner}; "
            "a quarantine table serves one main table per pipeline id: give this load its own "
            "quarantine_table_uri or its own pipeline_id",
        )
    if replace_previous and not status.committed:
        replaced_files(table, batch, status, f"{batch.label} (quarantine table {quarantine_uri})")


def stage_outbox(
    quarantine_uri: str,
    batch: BatchKey,
    generation: int,
    attempt_id: str,
    bad: DataFrame | None,
    *,
    replace_previous: bool,
    main_table_uri: str,
) -> Outbox | None:
    """Stage the batch's malformed records in the quarantine table, uncommitted.

    :param quarantine_uri: the quarantine table.
    :param batch: the batch.
    :param generation: the generation being loaded.
    :param attempt_id: this attempt (names the staging directory).
    :param bad: the malformed records, or ``None`` when there are none.
    :param replace_previous: whether delivery replaces earlier generations' rejects.
    :param main_table_uri: the table the rejects belong to.
    :returns: the outbox to put in the main manifest, or ``None`` when nothing needs to
        reach the quarantine table (no malformed records and nothing to replace).
    """
    if bad is None and not replace_previous:
        return None
    _check_quarantine_table(quarantine_uri, batch, generation, replace_previous, main_table_uri)
    q_uri = normalise(quarantine_uri)
    if bad is None:
        empty = StagedBatch(QUARANTINE_SCHEMA_JSON, [], attempt_dir(batch, generation, attempt_id))
        return Outbox(q_uri, replace_previous, empty)
    from airflow_eod.spark.staging import stage_dataframe

    staged = stage_dataframe(bad, q_uri, batch, generation, attempt_id, [])
    log.info(
        "batch %s: staged %d malformed record(s) in %d file(s) for the quarantine table %s; "
        "they are committed there only after the main commit",
        batch,
        staged.rows,
        len(staged.files),
        q_uri,
    )
    return Outbox(q_uri, replace_previous, staged)


def with_outbox(manifest: Manifest, outbox: Outbox | None) -> Manifest:
    """``manifest`` carrying ``outbox``, so the main commit lands it atomically with the data."""
    if outbox is None:
        return manifest
    return replace(manifest, extra={**manifest.extra, OUTBOX_KEY: outbox.to_dict()})


def outbox_of(manifest: Manifest | None) -> Outbox | None:
    """The outbox a committed manifest carries, or ``None``."""
    if manifest is None or not isinstance(manifest.extra.get(OUTBOX_KEY), dict):
        return None
    return Outbox.from_dict(manifest.extra[OUTBOX_KEY])


def deliver_outbox(
    table_uri: str, status: BatchStatus, *, try_number: int | None = None
) -> BatchStatus | None:
    """Commit the outbox of the batch's committed generation to the quarantine table, then
    remove the quarantine table's uncommitted attempts of that generation.

    Runs after every main commit and on every path that finds the batch already committed,
    so a crash between the two commits is healed by the next attempt. Delivering twice
    commits once: the quarantine commit asks for the batch's marker first.

    :param table_uri: the main table.
    :param status: the main table's answer, for a committed batch.
    :param try_number: this attempt's try number (for the fault points).
    :returns: the quarantine table's answer, or ``None`` when there was nothing to deliver.
    """
    main = status.manifest
    outbox = outbox_of(main)
    gen = status.committed_generation
    if outbox is None or main is None or gen is None:
        return None
    batch = status.batch
    staged = outbox.staged
    if not staged.files and open_table(outbox.table_uri) is None:
        # Nothing to remove and no table made only to hold an empty marker.
        log.info(
            "batch %s: generation %d has no malformed records and the quarantine table %s does "
            "not exist; nothing to deliver",
            batch,
            gen,
            outbox.table_uri,
        )
        return None
    q_manifest = replace(
        main,
        rows=staged.rows,
        files=len(staged.files),
        extra={"quarantine_of": normalise(table_uri), "main_table_version": status.table_version},
    )
    try:
        ours, q_status = commit_batch(
            outbox.table_uri,
            batch,
            gen,
            staged,
            q_manifest,
            try_number=try_number,
            replace_previous=outbox.replace_previous,
        )
    except Exception as exc:
        text = str(exc).strip()
        cause = (
            exc.cause
            if isinstance(exc, BatchError)
            else (text.splitlines()[0] if text else type(exc).__name__)
        )
        raise BatchError(
            batch.label,
            f"generation {gen} is committed to the table {normalise(table_uri)} (version "
            f"{status.table_version}), but its {staged.rows} malformed record(s) could not be "
            f"delivered to the quarantine table {outbox.table_uri}: {cause}; "
            "the next attempt of the task delivers them",
        ) from exc
    log.warning(
        "batch %s: generation %d of the table %s (version %s): %d malformed record(s) %s the "
        "quarantine table %s (version %s)",
        batch,
        gen,
        normalise(table_uri),
        status.table_version,
        staged.rows,
        "committed to" if ours else "already in",
        outbox.table_uri,
        q_status.table_version,
    )
    # Only now: before delivery, the outbox's files are an uncommitted attempt's files.
    remove_uncommitted_attempts(outbox.table_uri, q_status)
    return q_status
