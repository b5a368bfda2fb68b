"""What a restatement removes: the live files of the generation it replaces, looked up in
the table and checked against the batch's commit record, or a refusal when the table no
longer holds them whole (another writer rewrote them, the record is gone)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.transaction import RemoveAction

from airflow_eod.core.ask import BatchStatus
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.delta.deletion_vectors import deleted_rows
from airflow_eod.core.delta.log import TableLog
from airflow_eod.core.errors import BatchRefusedError
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.merge_rules import MANIFEST_ENTRY
from airflow_eod.core.table_layout import batch_dir


def partition_string(value: object) -> str | None:
    """A partition value as the string Delta keeps in the log."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


def live_files(table: DeltaTable) -> list[dict[str, Any]]:
    """The snapshot's add actions, with ``path`` decoded to the file's path on disk,
    ``log_path`` the path exactly as the log's ``add`` spells it, and ``partition_values``
    the file's partition values (typed)."""
    adds: list[dict[str, Any]] = pa.table(table.get_add_actions(flatten=False)).to_pylist()
    for a in adds:
        a["log_path"] = a["path"]
        a["path"] = unquote(a["path"])
        # deltalake names the file's partition values "partition" (a struct, absent for an
        # unpartitioned table); the removes built from these entries must carry them.
        a.setdefault("partition_values", a.get("partition") or {})
    return adds


def decoded(remove: RemoveAction) -> str:
    """The path on disk of the file ``remove`` removes (its ``path`` is the log's spelling)."""
    return unquote(remove.path)


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
        removes.append(remove_of(a, now))
    return removes


def remove_of(add: dict[str, Any], now: int) -> RemoveAction:
    """The remove of the live file ``add`` (a :func:`live_files` entry), at ``now`` (ms)."""
    parts = {k: partition_string(v) for k, v in (add.get("partition_values") or {}).items()}
    # The log's own spelling of the path: delta-rs matches a remove to its add by the
    # string, and writers spell the same file differently (Delta Spark leaves "part=é"
    # as it is, a percent-encoded "part=%C3%A9" would remove nothing for delta-rs).
    return RemoveAction(add["log_path"], True, now, add.get("size_bytes"), parts or None)


def refuse_dropping_landed_files(status: BatchStatus, manifest: Manifest, label: str) -> None:
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


def refuse_replacing_a_merge(status: BatchStatus, label: str) -> None:
    """Refuse a restatement that swaps files (an append's) of a batch whose committed
    generation was a merge: a merge's files hold every row of the files it rewrote, other
    batches' keys included, so removing "the batch's files" would remove those keys too."""
    if status.manifest is not None and MANIFEST_ENTRY in status.manifest.extra:
        raise BatchRefusedError(
            label,
            f"generation {status.committed_generation} of the batch was a merge (write_mode='merge'): "
            "its files hold the rows of every file that merge rewrote, other batches' keys included, "
            "so a restatement that appends (and removes the batch's files) would remove those keys "
            "too; nothing was committed. Restate it with write_mode='merge' and the same merge rules",
        )


def replaced_files(table: TableLog, batch: BatchKey, status: BatchStatus, label: str) -> list[RemoveAction]:
    """The files a restatement removes, checked against what the table says it holds.

    Every file of the generation being replaced must still be live: a file that another
    writer's OPTIMIZE rewrote has moved its rows into a file outside the batch's directory,
    and removing the rest would leave those rows beside the new generation's.
    """
    refuse_append_only(table, label)
    refuse_replacing_a_merge(status, label)
    gen = status.committed_generation
    # The swap needs the live files, which only the full snapshot knows; restatements are rare.
    snapshot = table.snapshot()
    if gen is None:
        # Never committed (a re-freeze): replace whatever a zombie may have landed.
        return _without_deletion_vectors(table, snapshot, batch_files(snapshot, batch), label)
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
    live = {decoded(r) for r in removes}
    gone = [f for f in status.record.files if f not in live]
    if gone:
        raise BatchRefusedError(
            label,
            f"{len(gone)} of the {len(status.record.files)} file(s) of generation {gen} are no longer "
            f"live (e.g. {gone[0]}): another writer rewrote them (OPTIMIZE?), so their rows now sit in "
            "files outside the batch and restating would duplicate them; nothing was committed",
        )
    return _without_deletion_vectors(table, snapshot, removes, label)


def refuse_append_only(table: TableLog, label: str) -> None:
    """An append-only table (``delta.appendOnly=true``) takes no restatement: it removes files."""
    if table.metadata().configuration.get("delta.appendOnly", "false").lower() == "true":
        raise BatchRefusedError(
            label, "the table is append-only (delta.appendOnly=true): a batch cannot be restated"
        )


def _without_deletion_vectors(
    table: TableLog, snapshot: DeltaTable, removes: list[RemoveAction], label: str
) -> list[RemoveAction]:
    """``removes``, unless a file among them has a deletion vector: another writer deleted
    rows of the batch in place (DELETE, UPDATE, MERGE), as if it had rewritten the file, and
    a ``remove`` must name that deletion vector to remove the file for Delta Spark."""
    hidden = deleted_rows(table.ref, snapshot)
    marked = [decoded(r) for r in removes if decoded(r) in hidden]
    if marked:
        raise BatchRefusedError(
            label,
            f"{len(marked)} file(s) of the batch have rows another writer deleted in place (a deletion "
            f"vector hides {hidden[marked[0]]} row(s) of {marked[0]}: DELETE, UPDATE or MERGE?), so "
            "restating would bring back or duplicate rows that writer changed; nothing was committed "
            "(see the runbook, 'restating')",
        )
    return removes
