"""The small JSON-able result every load returns, and the outcomes it can report."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from airflow_eod.core.ask import BatchStatus, ask
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.table_ref import TableRef

log = logging.getLogger(__name__)

COMMITTED = "committed"
ALREADY_COMMITTED = "already_committed"
NO_NEW_DATA = "no_new_data"


@dataclass(frozen=True)
class LoadResult:
    """What a load attempt ended with, decided by asking the table.

    :param pipeline_id: the pipeline.
    :param batch_key: the batch key (``None`` when there was nothing to load).
    :param generation: the committed generation.
    :param table_version: the Delta table version that holds the batch.
    :param rows: rows in the batch.
    :param files: data files in the batch.
    :param outcome: ``committed``, ``already_committed`` or ``no_new_data``.
    :param table_uri: the target table.
    :param null_key_rows: rows of a JDBC source whose key is NULL, counted at planning: no
        batch loads them (``None``: not a keyed source, or not counted; left out of the dict).
    """

    pipeline_id: str
    batch_key: str | None
    generation: int | None
    table_version: int | None
    rows: int
    files: int
    outcome: str
    table_uri: str
    null_key_rows: int | None = None

    def to_dict(self) -> dict[str, Any]:
        body = asdict(self)
        if self.null_key_rows is None:
            del body["null_key_rows"]
        return body


def result_from_status(ref: TableRef, status: BatchStatus, outcome: str) -> LoadResult:
    """The load result the table stands behind, built from the ask's answer."""
    m = status.manifest
    return LoadResult(
        pipeline_id=status.batch.pipeline_id,
        batch_key=status.batch.key,
        generation=status.committed_generation,
        table_version=status.table_version,
        rows=m.rows if m else 0,
        files=m.files if m else 0,
        outcome=outcome,
        table_uri=ref.location,
    )


def decide_after_failure(
    ref: TableRef, batch: BatchKey, generation: int, error: Exception
) -> LoadResult | None:
    """The decide step for an attempt that failed: the table, not the error, says whether
    the batch landed. Returns the result when it did, ``None`` when it did not.

    A typical case: a slower attempt (a zombie) was still writing when a racer committed
    the batch and removed the zombie's files; the zombie's Spark job then fails, but the
    batch is committed once, so the attempt reports ``already_committed``.
    """
    status = ask(ref, batch, generation)
    if not status.committed:
        return None
    log.warning("batch %s: the attempt failed (%s), but the table holds the batch", batch, error)
    return result_from_status(ref, status, ALREADY_COMMITTED)
