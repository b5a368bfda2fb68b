"""What the newest checkpoint holds of a commit or a folder: for a commit that may have
landed in a hole a log cleanup left, and for files whose commits aged out."""

from __future__ import annotations

import os

import pyarrow.compute as pc

from airflow_eod.core.delta.checkpoints import checkpoint_files, newest_checkpoint, open_checkpoint
from airflow_eod.core.delta.reading import LOG_DIR, REREADS
from airflow_eod.core.delta.snapshot import TableLog


def checkpoint_holds(
    table: TableLog, version: int, add_path: str | None, app_id: str, generation: int
) -> bool | None:
    """Whether the commit just written at ``version`` is part of the table as readers see it.

    ``True`` when no announced checkpoint reaches ``version`` (readers read the commit after
    the checkpoint) or when the checkpoint that does holds the commit's first file (live, or
    removed since) or, for a commit without files, its marker at ``generation`` (an older
    generation's marker says nothing of this commit). ``False``: the commit landed
    in a hole a log cleanup left below a checkpoint, and no reader will ever see it.
    ``None``: checkpoints kept replacing each other while this looked.

    :param table: the reading the commit followed.
    :param add_path: the commit's first file as the log stores it (percent-encoded).
    """
    log_dir = os.path.join(table.path, LOG_DIR)
    store = table.ref.storage()
    configuration = table.metadata().configuration
    for _ in range(REREADS):
        hint = newest_checkpoint(log_dir, table.read_at, configuration, store=store)
        if hint is None or hint[0] < version:
            return True
        try:
            for path in checkpoint_files(log_dir, *hint):
                parquet = open_checkpoint(path, store)
                names = set(parquet.schema_arrow.names)
                if add_path is None:
                    if "txn" in names:
                        txn = parquet.read(columns=["txn.appId", "txn.version"], use_threads=False)
                        ids = pc.struct_field(txn.column("txn"), [0])
                        versions = pc.struct_field(txn.column("txn"), [1])
                        hit = pc.and_(pc.equal(ids, app_id), pc.equal(versions, generation))
                        if pc.any(hit).as_py():
                            return True
                    continue
                for action in ("add", "remove"):
                    if action in names:
                        col = parquet.read(columns=[f"{action}.path"], use_threads=False).column(action)
                        if pc.any(pc.equal(pc.struct_field(col, [0]), add_path)).as_py():
                            return True
            return False
        except FileNotFoundError:
            continue  # a newer checkpoint's cleanup removed it meanwhile: look again
    return None


def checkpoint_paths_under(table: TableLog, prefix: str) -> list[str]:
    """The paths (as the log stores them) of the newest checkpoint's adds and removes that
    start with ``prefix``: files that were part of the table, live or removed since,
    whose commits a log cleanup may have taken. Empty when there is no checkpoint."""
    log_dir = os.path.join(table.path, LOG_DIR)
    store = table.ref.storage()
    configuration = table.metadata().configuration
    for _ in range(REREADS):
        hint = newest_checkpoint(log_dir, table.read_at, configuration, store=store)
        if hint is None:
            return []
        found: list[str] = []
        try:
            for path in checkpoint_files(log_dir, *hint):
                parquet = open_checkpoint(path, store)
                names = set(parquet.schema_arrow.names)
                for action in ("add", "remove"):
                    if action not in names:
                        continue
                    col = parquet.read(columns=[f"{action}.path"], use_threads=False).column(action)
                    paths = pc.struct_field(col, [0])
                    hit = pc.fill_null(pc.starts_with(paths, prefix), False)
                    found += [p for p in pc.filter(paths, hit).to_pylist() if p is not None]
            return found
        except FileNotFoundError:
            continue  # a newer checkpoint's cleanup removed it meanwhile: look again
    return []
