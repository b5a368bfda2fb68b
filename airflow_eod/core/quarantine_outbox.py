"""The quarantine outbox: a batch's malformed records reach the quarantine table only
after, and exactly as, the main table's commit says.

The quarantine table must always describe the same generation of a batch as the main
table, which is the authority. So the malformed records are staged (written, not committed)
into the quarantine table's attempt directory before the main commit
(:func:`airflow_eod.spark.quarantine.stage_outbox`), and the staged batch rides as the
*outbox* in the main commit's manifest (``Manifest.extra["quarantine"]``), atomically with
the data. Once the main commit has landed (by this attempt, or found already there by a
retry or a zombie), the outbox of the committed manifest is *delivered*: committed to the
quarantine table under the same batch key and generation, which the ask inside
:func:`~airflow_eod.core.load_commit.commit_batch` makes idempotent. A refused main commit
therefore leaves the quarantine table untouched, and a crash between the two commits is
healed by the next attempt's delivery.

A restatement whose corrected files have no malformed records delivers an *empty* outbox,
so the old generation's rejects are removed in one quarantine commit. A first load
(generation 0) with none delivers nothing: no extra commit per clean batch.

This module owns the outbox's plain-data form and its delivery, which need no Spark: the
task settles a batch it finds committed without starting a JVM (:mod:`airflow_eod.core.settle`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from airflow_eod.core.ask import BatchStatus
from airflow_eod.core.cleanup import remove_uncommitted_attempts
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import BatchError
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.staged_files import StagedBatch, StagedFile
from airflow_eod.core.table_ref import TableRef

log = logging.getLogger(__name__)

# The quarantine table's two columns (airflow_eod.spark.bad_records writes its rows).
SOURCE_FILE_COLUMN = "source_file"
RAW_RECORD_COLUMN = "raw_record"

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


def deliver_outbox(ref: TableRef, status: BatchStatus, quarantine: TableRef | None) -> BatchStatus | None:
    """Commit the outbox of the batch's committed generation to the quarantine table, then
    remove the quarantine table's uncommitted attempts of that generation.

    Runs after every main commit and on every path that finds the batch already committed,
    so a crash between the two commits is healed by the next attempt. Delivering twice
    commits once: the quarantine commit asks for the batch's marker first.

    :param ref: the main table.
    :param status: the main table's answer, for a committed batch.
    :param quarantine: the task's quarantine table (``None``: it has none). An outbox for
        another table is not delivered: the manifest is the table's content, which any writer
        of the table could have committed, and the delivery writes with this task's
        credentials.
    :returns: the quarantine table's answer, or ``None`` when there was nothing to deliver.
    """
    main = status.manifest
    outbox = outbox_of(main)
    gen = status.committed_generation
    if outbox is None or main is None or gen is None:
        return None
    batch = status.batch
    staged = outbox.staged
    if quarantine is None or TableRef.parse(outbox.table_uri).location != quarantine.location:
        log.warning(
            "batch %s: generation %d carries malformed records for the quarantine table %s, which "
            "is not this task's (%s): not delivered ('airflow-eod verify' reports them); deliver "
            "them by running the task with quarantine_table_uri=%s",
            batch,
            gen,
            outbox.table_uri,
            quarantine,
            outbox.table_uri,
        )
        return None
    if not staged.files and open_table(quarantine) is None:
        # Nothing to remove and no table made only to hold an empty marker.
        log.info(
            "batch %s: generation %d has no malformed records and the quarantine table %s does "
            "not exist; nothing to deliver",
            batch,
            gen,
            quarantine,
        )
        return None
    q_manifest = replace(
        main,
        rows=staged.rows,
        files=len(staged.files),
        extra={"quarantine_of": ref.location, "main_table_version": status.table_version},
    )
    try:
        ours, q_status = commit_batch(
            quarantine,
            batch,
            gen,
            staged,
            q_manifest,
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
            f"generation {gen} is committed to the table {ref.location} (version "
            f"{status.table_version}), but its {staged.rows} malformed record(s) could not be "
            f"delivered to the quarantine table {quarantine}: {cause}; "
            "the next attempt of the task delivers them",
        ) from exc
    log.warning(
        "batch %s: generation %d of the table %s (version %s): %d malformed record(s) %s the "
        "quarantine table %s (version %s)",
        batch,
        gen,
        ref.location,
        status.table_version,
        staged.rows,
        "committed to" if ours else "already in",
        quarantine,
        q_status.table_version,
    )
    # Only now: before delivery, the outbox's files are an uncommitted attempt's files.
    remove_uncommitted_attempts(quarantine, q_status)
    return q_status
