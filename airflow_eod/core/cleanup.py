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
from airflow_eod.core.faults import fault_point
from airflow_eod.core.table_layout import attempt_dir, batch_dir, local_path

log = logging.getLogger(__name__)


def remove_uncommitted_attempts(
    table_uri: str, status: BatchStatus, *, try_number: int | None = None
) -> list[str]:
    """Delete the directories of attempts at the committed generation that did not commit.

    Directories of older generations are kept (time travel reads them until VACUUM).

    :returns: the directories removed, relative to the table root.
    """
    if not status.committed or status.manifest is None or status.committed_generation is None:
        # Without the manifest we cannot tell the committed attempt apart: keep everything.
        return []
    gen = status.committed_generation
    keep = os.path.basename(attempt_dir(status.batch, gen, status.manifest.attempt_id))
    root = os.path.join(local_path(table_uri), batch_dir(status.batch))
    removed: list[str] = []
    try:
        entries = os.listdir(root)
    except FileNotFoundError:
        return removed
    for name in entries:
        if name.startswith(f"g{gen}-") and name != keep:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
            fault_point("in_cleanup", try_number=try_number)
            removed.append(f"{batch_dir(status.batch)}/{name}")
    if removed:
        log.info("batch %s: removed %d uncommitted attempt dir(s)", status.batch, len(removed))
    return removed
