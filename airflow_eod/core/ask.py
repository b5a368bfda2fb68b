"""The ask: "have you received batch K at generation G?", answered by the table alone.

It reads a bounded part of the Delta log (:mod:`airflow_eod.core.delta_log`: the newest
checkpoint's markers and the commits after it; no JVM, no Spark session, no file list) and
looks up the batch's ``txn`` marker and its durable commit record
(:mod:`airflow_eod.core.commit_record`). The marker answers while it lives; the record
answers after it expired, and is judged by the table. A committed batch comes back with its
saved result (the version that landed it and its manifest, from the record), so the answer
costs the same for a table's 10,000th batch as for its 10th.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.commit_record import (
    CommitRecord,
    foreign_marker,
    newest_record,
    own_commit,
    record_at,
    repair_record,
)
from airflow_eod.core.delta_log import TableLog, read_log
from airflow_eod.core.errors import ForeignMarkerError, UnsafePathError, UnsupportedTableError
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.plan_log import PlanLog
from airflow_eod.core.table_layout import DATA_DIR, META_DIR, local_path, under

# What airflow-eod itself may have put in a table directory before the first commit.
_OWN_ENTRIES = {META_DIR, DATA_DIR}


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


def open_table(table_uri: str) -> TableLog | None:
    """The Delta table at ``table_uri``, or ``None`` when there is none yet.

    A ``_delta_log/`` with no commit in it (a writer died while creating the table, leaving
    only its temporary file) is no table yet: the next commit creates it. A directory that
    holds other things but no Delta log is refused: loading into it would mix our files with
    someone else's.
    """
    path = local_path(table_uri)
    # A _delta_log that is a link out of the table (to another team's table) is refused
    # before it is read, or written: commits would land in the other table's log.
    under(path, "_delta_log")
    table = read_log(path)
    if table is not None:
        return table
    # One stat, not "is it a directory?" then "does it exist?": a racer that creates the table
    # directory between two such checks made a first load fail with "is a file".
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(mode):
        raise UnsupportedTableError(f"{path} is a file, not a Delta table directory")
    entries = set(os.listdir(path))
    # Our plan log is written only into an empty directory or a table (load_flow.freeze
    # refuses any other first), and a _delta_log/ without a commit is a Delta writer's first
    # commit on its way: beside either, files are a Delta Spark first write that died or is
    # still running (it writes at the table's root), not another system's.
    claimed = META_DIR in entries or "_delta_log" in entries
    foreign = [] if claimed else sorted(entries - _OWN_ENTRIES)
    if foreign:
        raise UnsupportedTableError(
            f"{path} exists but is not a Delta table (it holds {', '.join(foreign[:5])}); "
            "point table_uri at an existing Delta table or at an empty or new directory"
        )
    return None


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
    plan_log = PlanLog(table.table_uri, batch.pipeline_id)
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


def ask(table_uri: str, batch: BatchKey, generation: int = 0) -> BatchStatus:
    """Have you received ``batch`` at ``generation`` (or newer)?

    :param table_uri: the target Delta table.
    :param batch: the batch.
    :param generation: the generation that counts as received.
    """
    return ask_table(open_table(table_uri), batch, generation)
