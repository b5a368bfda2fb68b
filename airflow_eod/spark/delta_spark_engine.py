"""The Delta Spark engine: Spark's Delta writer commits the batch, with the marker set
through the writer options ``txnAppId``/``txnVersion`` and the manifest as
``userMetadata`` (never the session confs, which would leak into other writes).

Delta Spark skips a write silently when the table already holds the appId at that
version, so the table is asked before and after, and a skip is reported as
``already_committed``. It needs the Delta Spark jars on the Spark classpath.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_eod.core.ask import BatchStatus, ask
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import BatchError
from airflow_eod.core.faults import fault_point
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.retention import DEFAULT_RETENTION, RETENTION_KEY
from airflow_eod.core.table_layout import local_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def write_with_delta_spark(
    df: DataFrame,
    table_uri: str,
    batch: BatchKey,
    generation: int,
    manifest: Manifest,
    partition_by: list[str],
    *,
    try_number: int | None = None,
) -> tuple[bool, BatchStatus]:
    """Append ``df`` as ``batch`` through Delta Spark unless the table already has it.

    :returns: ``(we_committed, status)`` as :func:`airflow_eod.core.commit.commit_batch`.
    """
    before = ask(table_uri, batch, generation)
    if before.committed:
        return False, before
    writer = (
        df.write.format("delta")
        .mode("append")
        .option("txnAppId", batch.app_id)
        .option("txnVersion", str(generation))
        .option("userMetadata", manifest.to_user_metadata())
        # Applied only when this write creates the table.
        .option(RETENTION_KEY, DEFAULT_RETENTION)
    )
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    fault_point("before_commit", try_number=try_number)
    try:
        writer.save(local_path(table_uri))
    except Exception as exc:  # a ConcurrentTransactionException arrives as a Py4J error
        after = ask(table_uri, batch, generation)
        if after.committed:
            return False, after
        raise BatchError(batch.label, f"the Delta Spark write failed: {exc}") from exc
    after = ask(table_uri, batch, generation)
    if not after.committed:
        raise BatchError(batch.label, "Delta Spark returned but the table has no marker for the batch")
    ours = after.manifest is not None and after.manifest.attempt_id == manifest.attempt_id
    return ours, after
