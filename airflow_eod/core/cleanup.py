"""Removal of files written by attempts that never committed.

A batch's attempts write into ``eod_data/<pipeline>/<batch key>/g<generation>-<attempt>/``.
Only once the table says the batch is committed (or fenced, which means the same) may
the other attempts' directories go: before that, a zombie attempt may still be writing
files that it is about to commit.
"""

from __future__ import annotations

import logging
import os
import shutil

from airflow_eod.core.ask import BatchStatus
from airflow_eod.core.errors import UnsafePathError
from airflow_eod.core.faults import fault_point
from airflow_eod.core.table_layout import attempt_dir, batch_dir
from airflow_eod.core.table_ref import TableRef

log = logging.getLogger(__name__)


def remove_uncommitted_attempts(ref: TableRef, status: BatchStatus) -> list[str]:
    """Delete the directories of attempts at the committed generation that did not commit.

    Directories of older generations are kept (time travel reads them until VACUUM).

    :returns: the directories removed, relative to the table root.
    """
    if not status.committed or status.manifest is None or status.committed_generation is None:
        # Without the manifest we cannot tell the committed attempt apart: keep everything.
        return []
    gen = status.committed_generation
    rel = batch_dir(status.batch)
    try:
        # The committed attempt's id comes from the commit (table content): a hostile one
        # is refused. A batch directory that is a link (or sits behind one) leading out of
        # the table is refused too, before it is listed: its g<gen>-* entries are not ours.
        keep = os.path.basename(attempt_dir(status.batch, gen, status.manifest.attempt_id))
        root = ref.dir(rel)
    except UnsafePathError as exc:
        # The batch committed; what cannot be cleaned safely is left, and said.
        log.warning("batch %s: not cleaning up: %s", status.batch, exc.cause)
        return []
    removed: list[str] = []
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return removed
    for entry in entries:
        if not entry.name.startswith(f"g{gen}-") or entry.name == keep:
            continue
        if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
            # Never followed: a link is removed itself, its target is left alone. Nothing
            # else here is an attempt's directory, and nothing else is ours to remove.
            if entry.is_symlink():
                log.warning("batch %s: removing link %s/%s, not its target", status.batch, rel, entry.name)
                os.unlink(entry.path)
                removed.append(f"{rel}/{entry.name}")
            continue
        # rmtree does not follow links below it either (and refuses a link at its top).
        shutil.rmtree(entry.path, ignore_errors=True)
        fault_point("in_cleanup")
        removed.append(f"{rel}/{entry.name}")
    if removed:
        log.info("batch %s: removed %d uncommitted attempt dir(s)", status.batch, len(removed))
    return removed
