"""One batch's Parquet object staged on a table's storage as Spark's staging leaves it, and
described as staging describes it (footer statistics read back through the seam): what core
tests and benchmarks commit without a JVM."""

from __future__ import annotations

import io
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import Schema

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.delta.parquet_stats import file_stats
from airflow_eod.core.staged_files import StagedBatch, StagedFile
from airflow_eod.core.storage.object_file import open_object
from airflow_eod.core.table_layout import attempt_dir
from airflow_eod.core.table_ref import TableRef


def stage_table(
    ref: TableRef, batch: BatchKey, generation: int, data: pa.Table, *, attempt: str | None = None
) -> tuple[StagedBatch, str]:
    """Put ``data`` as one Parquet object in a new attempt folder of ``batch``; returns the
    staged batch and the attempt id (a fresh one unless ``attempt`` is given)."""
    attempt = attempt or uuid.uuid4().hex[:16]
    rel_dir = attempt_dir(batch, generation, attempt)
    buf = io.BytesIO()
    pq.write_table(data, buf)
    key = f"{rel_dir}/part-00000-{attempt}.snappy.parquet"
    store = ref.storage()
    store.put(key, buf.getvalue())
    head = store.head(key)
    if head is None:
        raise RuntimeError(f"staged object {key} is not there")
    with open_object(store, key, head.size) as fh:
        rows, stats = file_stats(fh)
    staged = StagedBatch(
        Schema.from_arrow(data.schema).to_json(),
        [],
        rel_dir,
        [StagedFile(key, head.size, head.mtime_ns // 1_000_000, {}, rows, stats)],
    )
    return staged, attempt
