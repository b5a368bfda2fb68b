"""Reading a frozen batch with Spark: the one place that turns a source's plan into a
DataFrame, so that the sources themselves (planning, in the task, without a JVM) import no
Spark code."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_eod.core.errors import InputChangedError
from airflow_eod.core.planlog.restatement import refreeze_hint
from airflow_eod.core.planlog.store import Plan
from airflow_eod.core.source import ReadContext, Source
from airflow_eod.sources.jdbc_incremental import FINGERPRINT_SCHEME, ROW_HASH_COLUMN, JdbcIncrementalSource
from airflow_eod.sources.landing_files import DEFAULT_READ_OPTIONS, LandingFilesSource
from airflow_eod.spark.landing_reader import read_landing_batch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def read_batch(source: Source, plan: Plan, ctx: ReadContext) -> DataFrame:
    """A DataFrame of exactly the batch ``plan`` froze from ``source``.

    Landing files: exactly the planned files, columns matched by name, with a corrupt-record
    column when a schema is given for CSV or JSON (:mod:`airflow_eod.spark.landing_reader`,
    :mod:`airflow_eod.spark.bad_records`). JDBC: the planned key range, read by the source
    through the session's JDBC reader.
    """
    if isinstance(source, LandingFilesSource):
        return read_landing_batch(
            ctx.spark,
            plan,
            file_format=source.file_format,
            schema=source.schema,
            read_options=source.read_options,
            default_options=DEFAULT_READ_OPTIONS[source.file_format],
            schema_drift=ctx.schema_drift,
            fail_fast=ctx.fail_fast,
        )
    if isinstance(source, JdbcIncrementalSource):
        return read_jdbc_batch(source, plan, ctx)
    raise TypeError(f"no reader for a source of type {type(source).__name__}")


def read_jdbc_batch(source: JdbcIncrementalSource, plan: Plan, ctx: ReadContext) -> DataFrame:
    """The key range of ``plan``, read from the database exactly once and kept in Spark's
    block manager (``localCheckpoint``), and held to what the plan froze: its row count, and
    (PostgreSQL) its content fingerprint, summed from a hash of each row the database
    computes as Spark reads it.

    A JDBC DataFrame queries the database again for every action, and the checks before the
    read and before the commit ask the database, not what Spark read: a row deleted after
    the first check and inserted again before the second (or updated and set back) would be
    missing from the batch, or wrong in it, while both checks pass. Kept and checked here,
    the rows Spark read are the rows the plan froze, and the rows the write stages.
    """
    from pyspark.sql import functions as F

    hashed = source.hashes_rows(plan)
    df = source.read(plan, ctx, row_hash=hashed).localCheckpoint(eager=True)
    frozen = plan.inputs[0] if plan.inputs else {}
    if "rows" not in frozen:
        return df
    if hashed:
        got = df.agg(F.count(F.lit(1)), F.sum(F.col(ROW_HASH_COLUMN).cast("decimal(38,0)"))).first()
        assert got is not None  # an aggregate without grouping has one row
        read, digest = int(got[0]), int(got[1] or 0)
        df = df.drop(ROW_HASH_COLUMN)
    else:
        read, digest = df.count(), None
    planned = str(frozen.get("fingerprint", ""))
    if read != int(frozen["rows"]) or (
        digest is not None and f"{FINGERPRINT_SCHEME}:{digest}" != planned
    ):
        what = (
            f"{read} rows" if read != int(frozen["rows"]) else
            f"the planned {read} rows with other content (fingerprint {FINGERPRINT_SCHEME}:{digest}, "
            f"planned {planned})"
        )
        raise InputChangedError(
            plan.key.label,
            f"Spark read {what} of the source range of {source.table}, which held {frozen['rows']} "
            "rows when planned (rows were updated, deleted or inserted while Spark read them); "
            "nothing was committed. Re-freeze it on purpose to load it as it is now: "
            f"{refreeze_hint(plan.pipeline_id, plan.batch_key)}",
        )
    return df
