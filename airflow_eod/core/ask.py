"""The ask: "have you received batch K at generation G?", answered by the table alone.

It reads the Delta log through ``deltalake`` (no JVM, no Spark session) and looks up the
batch's ``txn`` marker. A committed batch comes back with its saved result: the table
version that landed it and the manifest that rode in that commit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import UnsupportedTableError
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.table_layout import DATA_DIR, META_DIR, local_path

# What airflow-eod itself may have put in a table directory before the first commit.
_OWN_ENTRIES = {META_DIR, DATA_DIR}


@dataclass(frozen=True)
class BatchStatus:
    """The table's answer for one batch.

    :param batch: the batch asked about.
    :param generation: the generation asked about.
    :param committed_generation: the newest generation the table holds, or ``None``.
    :param table_version: the table version that landed ``committed_generation``, when
        its commit is still in the log.
    :param manifest: the manifest of that commit, when it is still in the log.
    :param snapshot_version: the table version the answer was read at (``None``: no table).
    """

    batch: BatchKey
    generation: int
    committed_generation: int | None
    table_version: int | None
    manifest: Manifest | None
    snapshot_version: int | None

    @property
    def committed(self) -> bool:
        return self.committed_generation is not None and self.committed_generation >= self.generation


def open_table(table_uri: str) -> DeltaTable | None:
    """The Delta table at ``table_uri``, or ``None`` when there is none yet.

    A directory that holds other things but no Delta log is refused: loading into it
    would mix our files with someone else's.
    """
    path = local_path(table_uri)
    try:
        return DeltaTable(path)
    except TableNotFoundError:
        pass
    if os.path.isdir(path):
        foreign = sorted(set(os.listdir(path)) - _OWN_ENTRIES)
        if foreign:
            raise UnsupportedTableError(
                f"{path} exists but is not a Delta table (it holds {', '.join(foreign[:5])}); "
                "point table_uri at an existing Delta table or at an empty or new directory"
            )
    elif os.path.exists(path):
        raise UnsupportedTableError(f"{path} is a file, not a Delta table directory")
    return None


def find_commit(table: DeltaTable, batch: BatchKey, generation: int) -> tuple[int, Manifest] | None:
    """The (table version, manifest) of the commit that landed ``batch`` at ``generation``.

    Scans commit infos newest first; returns ``None`` once that commit has aged out of
    the log (the ``txn`` marker outlives it, the commit info does not).
    """
    for info in table.history():
        manifest = Manifest.from_user_metadata(info.get("userMetadata"))
        if (
            manifest is not None
            and manifest.pipeline_id == batch.pipeline_id
            and manifest.batch_key == batch.key
            and manifest.generation == generation
        ):
            return int(info["version"]), manifest
    return None


def ask_table(table: DeltaTable | None, batch: BatchKey, generation: int = 0) -> BatchStatus:
    """Ask an already opened snapshot; the commit engine uses this so that the answer and
    the commit that may follow are based on the same snapshot."""
    if table is None:
        return BatchStatus(batch, generation, None, None, None, None)
    committed = table.transaction_version(batch.app_id)
    version: int | None = None
    manifest: Manifest | None = None
    if committed is not None:
        found = find_commit(table, batch, committed)
        if found is not None:
            version, manifest = found
    return BatchStatus(batch, generation, committed, version, manifest, table.version())


def ask(table_uri: str, batch: BatchKey, generation: int = 0) -> BatchStatus:
    """Have you received ``batch`` at ``generation`` (or newer)?

    :param table_uri: the target Delta table.
    :param batch: the batch.
    :param generation: the generation that counts as received.
    """
    return ask_table(open_table(table_uri), batch, generation)
