"""The live files of a table's snapshot, with their rows as delta-rs reports them.

Where a file has no statistics the rows come from its Parquet footer (read through
:func:`~airflow_eod.core.audit.safe_open.open_in_table`), less the rows its deletion vector
hides; where it sits under ``eod_data/<pipeline>/<key>/g<N>-<attempt>/`` it names its batch
and generation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from airflow_eod.core.audit.safe_open import NotInTable, open_in_table, probe
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.delta.deletion_vectors import deleted_rows
from airflow_eod.core.errors import EodError
from airflow_eod.core.table_layout import DATA_DIR
from airflow_eod.core.table_ref import TableRef

_ATTEMPT = re.compile(r"^g(\d+)-")  # an attempt directory: g<generation>-<attempt>


@dataclass(frozen=True)
class LiveFile:
    """A file of the table's snapshot.

    :param path: the table-relative path as on disk (decoded from the log's URI form).
    :param rows: ``numRecords`` from its statistics, else from its footer, less the rows its
        deletion vector hides (``None``: unknown).
    :param on_disk: whether the file exists.
    :param batch: the batch whose directory (``eod_data/<pipeline>/<key>/``) holds it, if any.
    :param generation: the generation of the attempt directory (``g<N>-<attempt>``) holding it.
    :param refused: why the audit does not open it (a link, a path out of the table, not a
        regular file), or ``None``.
    """

    path: str
    rows: int | None
    on_disk: bool
    batch: BatchKey | None = None
    generation: int | None = None
    refused: str | None = None


def _place(rel: str) -> tuple[BatchKey | None, int | None]:
    parts = rel.split("/")
    if len(parts) < 4 or parts[0] != DATA_DIR:
        return None, None
    try:
        batch = BatchKey(parts[1], parts[2])
    except EodError:
        return None, None
    attempt = _ATTEMPT.match(parts[3]) if len(parts) > 4 else None
    return batch, int(attempt[1]) if attempt else None


def file_rows(ref: TableRef, rel: str, stats_rows: int | None) -> int | None:
    """``stats_rows``, or the row count in the file's footer (``None``: unreadable)."""
    if stats_rows is not None:
        return int(stats_rows)
    try:  # no statistics: the footer says, without reading the data
        with open_in_table(ref, rel) as fh:
            return int(pq.ParquetFile(fh).metadata.num_rows)
    except (OSError, ValueError, NotInTable):  # gone, not Parquet (ArrowInvalid), a link
        return None


def read_live_files(ref: TableRef, table: DeltaTable) -> dict[str, LiveFile]:
    """The live files of ``table``'s snapshot, by decoded path."""
    out = {}
    hidden = deleted_rows(ref, table)  # rows another writer deleted in place
    for a in pa.table(table.get_add_actions(flatten=False)).to_pylist():
        rel = unquote(a["path"])
        rows = file_rows(ref, rel, a.get("num_records"))
        if rows is not None and rel in hidden:
            rows -= hidden[rel]
        on_disk, refused = probe(ref, rel)
        out[rel] = LiveFile(rel, rows, on_disk, *_place(rel), refused=refused)
    return out
