"""The Delta Spark engine: Spark's Delta writer commits the batch, with the marker set
through the writer options ``txnAppId``/``txnVersion`` and the manifest as
``userMetadata`` (never the session confs, which would leak into other writes).

Delta Spark skips a write silently when the table already holds the appId at that
version, so the table is asked before and after, and a skip is reported as
``already_committed``. It needs the Delta Spark jars on the Spark classpath.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_eod.core.ask import BatchStatus, ask, ask_table
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.delta.compat import SCHEMA_FAIL, check_schema, computed_columns
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import BatchError, ConfigurationError
from airflow_eod.core.faults import fault_point
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.planlog.retention import DEFAULT_RETENTION, RETENTION_KEY
from airflow_eod.core.table_ref import TableRef

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# How Spark says the session cannot write Delta at all: no retry of the task can fix that.
_NOT_SET_UP = ("DELTA_CONFIGURE_SPARK_SESSION_WITH_EXTENSION_AND_CATALOG", "DATA_SOURCE_NOT_FOUND")


def write_with_delta_spark(
    df: DataFrame,
    ref: TableRef,
    batch: BatchKey,
    generation: int,
    manifest: Manifest,
    partition_by: list[str],
    *,
    table_configuration: dict[str, str] | None = None,
    schema_policy: str = SCHEMA_FAIL,
) -> tuple[bool, BatchStatus]:
    """Append ``df`` as ``batch`` through Delta Spark unless the table already has it.

    :param table_configuration: table properties, applied only when this write creates the table.
    :param schema_policy: ``fail``, or ``add_columns`` to add the batch's new nullable
        columns in its commit (Delta Spark's ``mergeSchema``, after the same check as the
        delta-rs engine's: a type change fails either way).
    :returns: ``(we_committed, status)`` as :func:`airflow_eod.core.load_commit.commit_batch`.
    """
    table = open_table(ref)
    before = ask_table(table, batch, generation)
    if before.committed:
        return False, before
    merge_schema = False
    if table is not None:
        # Checked here, not left to Delta Spark: its mergeSchema also widens types
        # (int -> long) silently, and its own mismatch error is retried in vain.
        # Delta Spark fills generated and identity columns itself: a batch need not carry them.
        computed = computed_columns(table)
        schema = df.schema.json()
        widened = check_schema(table, schema, partition_by, batch.label, schema_policy, computed=computed)
        merge_schema = widened is not None
    writer = (
        df.write.format("delta")
        .mode("append")
        .option("txnAppId", batch.app_id)
        .option("txnVersion", str(generation))
        .option("userMetadata", manifest.to_user_metadata())
    )
    # Table properties as "delta."-prefixed writer options are applied only when this write
    # creates the table: the retention the markers need, then the user's own.
    for key, value in {RETENTION_KEY: DEFAULT_RETENTION, **(table_configuration or {})}.items():
        writer = writer.option(key, value)
    if merge_schema:
        writer = writer.option("mergeSchema", "true")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    fault_point("before_commit")
    try:
        writer.save(ref.path)
    except Exception as exc:  # a ConcurrentTransactionException arrives as a Py4J error
        after = ask(ref, batch, generation)
        if after.committed:
            # The save may have committed before it raised (a lost Py4J reply, a failed
            # post-commit hook): the manifest's attempt id says whose commit it is.
            return _ours(after, manifest), after
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if any(code in str(exc) for code in _NOT_SET_UP):
            raise ConfigurationError(
                f"batch {batch.label}: engine='delta-spark' needs the Delta Spark jars on the Spark "
                "classpath and a session made with spark.sql.extensions="
                "io.delta.sql.DeltaSparkSessionExtension and spark.sql.catalog.spark_catalog="
                "org.apache.spark.sql.delta.catalog.DeltaCatalog (the operator sets both for the "
                f"sessions it makes; see docs/reference.md); nothing was committed: {first}"
            ) from exc
        raise BatchError(batch.label, f"the Delta Spark write failed and committed nothing: {first}") from exc
    # Delta Spark has committed (or skipped): a crash from here on leaves a batch that the
    # next ask finds committed, with no durable record yet (the ask writes it). The delta-rs
    # engine's point between its commit and its record stands for the same moment.
    fault_point("before_record")
    after = ask(ref, batch, generation)
    if not after.committed:
        raise BatchError(batch.label, "Delta Spark returned but the table has no marker for the batch")
    return _ours(after, manifest), after


def _ours(status: BatchStatus, manifest: Manifest) -> bool:
    """Whether the commit ``status`` found is this attempt's (its manifest's attempt id)."""
    return status.manifest is not None and status.manifest.attempt_id == manifest.attempt_id
