"""The ask: "have you received batch K at generation G?", answered by the table alone.

It reads a bounded part of the Delta log (:mod:`airflow_eod.core.delta.log`: the newest
checkpoint's markers and the commits after it; no JVM, no Spark session, no file list) and
looks up the batch's ``txn`` marker and its durable commit record
(:mod:`airflow_eod.core.records.store`). The marker answers while it lives; the record
answers after it expired, and is judged by the table. A committed batch comes back with its
saved result (the version that landed it and its manifest, from the record), so the answer
costs the same for a table's 10,000th batch as for its 10th.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.delta.log import TableLog
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import ForeignMarkerError, UnsafePathError
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.records.store import (
    CommitRecord,
    foreign_marker,
    newest_record,
    own_commit,
    record_at,
    repair_record,
)
from airflow_eod.core.storage import requests_logged
from airflow_eod.core.table_ref import TableRef

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchStatus:
    """The table's answer for one batch.

    :param batch: the batch asked about.
    :param generation: the generation asked about.
    :param committed_generation: the newest generation the table holds, or ``None``.
    :param table_version: the table version that landed ``committed_generation``.
    :param manifest: the manifest of that commit.
    :param snapshot_version: the table version the answer was read at (``None``: no table).
    :param record: the durable commit record of ``committed_generation`` (its files), when
        there is one.
    """

    batch: BatchKey
    generation: int
    committed_generation: int | None
    table_version: int | None
    manifest: Manifest | None
    snapshot_version: int | None
    record: CommitRecord | None = None

    @property
    def committed(self) -> bool:
        return self.committed_generation is not None and self.committed_generation >= self.generation


def ask_table(table: TableLog | None, batch: BatchKey, generation: int = 0) -> BatchStatus:
    """Ask an already opened snapshot; the commit engine uses this so that the answer and
    the commit that may follow are based on the same snapshot."""
    if table is None:
        return BatchStatus(batch, generation, None, None, None, None)
    try:
        return _ask(table, batch, generation)
    except UnsafePathError as exc:
        if exc.batch is not None:
            raise
        # The table's content (its metaData.id, a link in its plan log) is hostile: refused
        # before anything is written, and the error names the batch.
        raise UnsafePathError(batch.label, exc.cause) from None


def _ask(table: TableLog, batch: BatchKey, generation: int) -> BatchStatus:
    plan_log = PlanLog(table.ref, batch.pipeline_id)
    marker = table.transaction_version(batch.app_id)
    newest = record = newest_record(plan_log, table, batch)
    committed = marker
    if record is not None and (marker is None or record.generation > marker):
        committed = record.generation
    if committed is not None and (record is None or record.generation != committed):
        # The marker is newer than any record: its committer died before writing it.
        record = record_at(plan_log, table, batch, committed) or repair_record(
            plan_log, table, batch, committed
        )
        theirs = foreign_marker(table, batch, committed) if record is None else None
        if theirs is not None:
            # Another writer set the marker. The batch's own commit may have landed all the
            # same (its record, or failing that the log or the checkpoint, tells): answer
            # for that; blame the other writer only when nothing of the batch's own is there.
            floor = newest.generation if newest is not None else -1
            top = min(committed, plan_log.newest_generation(batch.key))
            own = own_commit(plan_log, table, batch, top, floor) or (
                (newest.generation, newest) if newest is not None else None
            )
            if own is None:
                version, operation = theirs
                raise ForeignMarkerError(
                    batch.label,
                    f"the table's marker of this batch (txn appId {batch.app_id}, version {committed}) "
                    f"was set by commit {version} ({operation}), which carries no airflow-eod manifest "
                    "of the batch: another writer used this pipeline's app id in its own write. The "
                    "batch's rows are not in the table and nothing was loaded; no load under this app "
                    "id can add them while that marker stands (see docs/runbook.md, 'a marker another "
                    "writer set')",
                )
            log.warning(
                "batch %s: its marker (generation %d) was set by commit %d (%s), another writer's "
                "write with this pipeline's app id; the batch's own newest commit is of generation %d%s",
                batch,
                committed,
                *theirs,
                own[0],
                "" if own[1] is not None else " (aged out of the log; the checkpoint holds its files)",
            )
            committed, record = own
    elif record is not None:
        # No marker (it expired), or one that another writer set back to or below the
        # batch's record: a newer generation may have committed and died before its record.
        # Only then is the table searched for it.
        planned = plan_log.newest_generation(batch.key)
        if planned > record.generation and (marker is None or foreign_marker(table, batch, marker)):
            found = own_commit(plan_log, table, batch, planned, record.generation)
            if found is not None:
                committed, record = found
    return BatchStatus(
        batch,
        generation,
        committed,
        record.table_version if record else None,
        record.manifest_obj if record else None,
        table.version(),
        record,
    )


def ask(ref: TableRef, batch: BatchKey, generation: int = 0) -> BatchStatus:
    """Have you received ``batch`` at ``generation`` (or newer)?

    :param ref: the target Delta table.
    :param batch: the batch.
    :param generation: the generation that counts as received.
    """
    with requests_logged(None if ref.is_local else ref.storage(), log, "the ask", batch):
        return ask_table(open_table(ref), batch, generation)
