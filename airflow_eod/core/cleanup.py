"""Removal of files written by attempts that never committed.

A batch's attempts write into ``eod_data/<pipeline>/<batch key>/g<generation>-<attempt>/``
(and a merge's attempts their key digest into ``_eod/merge_keys/<pipeline>/<batch key>/``,
in a folder of the same name).
Only once the table says the batch is committed (or fenced, which means the same) may
the other attempts' directories go: before that, a zombie attempt may still be writing
files that it is about to commit.
"""

from __future__ import annotations

import logging

from airflow_eod.core.ask import BatchStatus
from airflow_eod.core.errors import UnsafePathError
from airflow_eod.core.faults import fault_point
from airflow_eod.core.merge_digest import batch_digests
from airflow_eod.core.merge_rules import MANIFEST_ENTRY
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
    removed: list[str] = []
    # The attempts' data directories, and a merge's key digests (see merge_digest): the
    # same g<gen>-<attempt> names. Only a merge's are listed (a request on a store).
    roots = [batch_dir(status.batch)]
    if MANIFEST_ENTRY in status.manifest.extra:
        roots.append(batch_digests(status.batch))
    for rel in roots:
        try:
            # The committed attempt's id comes from the commit (table content): a hostile
            # one is refused. A directory that is a link (or sits behind one) leading out of
            # the table is refused too, before it is listed: its g<gen>-* entries are not ours.
            keep = attempt_dir(status.batch, gen, status.manifest.attempt_id).rsplit("/", 1)[-1]
            store = ref.storage()
            names = store.list(rel)
        except UnsafePathError as exc:
            # The batch committed; what cannot be cleaned safely is left, and said.
            log.warning("batch %s: not cleaning up: %s", status.batch, exc.cause)
            break
        for name in names:
            if not name.startswith(f"g{gen}-") or name == keep:
                continue
            # The storage follows no link: a link here is removed itself and its target left
            # alone; a plain file is no attempt's directory, and not ours to remove.
            if store.delete_prefix(f"{rel}/{name}"):
                fault_point("in_cleanup")
                removed.append(f"{rel}/{name}")
    if removed:
        log.info("batch %s: removed %d uncommitted attempt dir(s)", status.batch, len(removed))
    return removed
