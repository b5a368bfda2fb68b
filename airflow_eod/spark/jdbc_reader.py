"""Reading a frozen JDBC batch with Spark: exactly the planned key range, once, held to what
the plan froze. The SQL is the source's (:meth:`JdbcIncrementalSource.batch_sql`); the
Spark reader, its options and the check of what it read are here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_eod.core.errors import ConfigurationError, InputChangedError
from airflow_eod.core.planlog.restatement import refreeze_hint
from airflow_eod.core.planlog.store import Plan
from airflow_eod.core.source import ReadContext
from airflow_eod.sources.jdbc_incremental import JdbcIncrementalSource
from airflow_eod.sources.jdbc_sql import FINGERPRINT_SCHEME, PG_RENDERING_AT_CONNECT, ROW_HASH_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def read_jdbc_range(
    source: JdbcIncrementalSource, plan: Plan, ctx: ReadContext, *, row_hash: bool = False
) -> DataFrame:
    """A DataFrame of exactly the planned key range, read in parallel by key range.

    :param source: the JDBC source.
    :param plan: the frozen plan.
    :param ctx: the read context, with the session and the credentials.
    :param row_hash: add :data:`~airflow_eod.sources.jdbc_sql.ROW_HASH_COLUMN`, each row's
        hash as the fingerprint computes it, with the same rendering settings.
    """
    rows = source.batch_sql(plan, ctx, row_hash=row_hash)
    if ctx.credentials is None:
        raise ConfigurationError("the JDBC source needs credentials (an Airflow connection)")
    # The credentials go to the reader and nowhere else.
    reader = (
        ctx.spark.read.format("jdbc")
        .option("url", source.url)
        .option("driver", source.driver)
        .option("user", ctx.credentials.user)
        .option("password", ctx.credentials.password)
    )
    reader = reader.option("dbtable", f"({rows}) eod_batch")
    reader = reader.option("fetchsize", str(source.fetch_size))
    if row_hash:
        # Rows render as text as they did for the fingerprint at planning.
        reader = reader.option("sessionInitStatement", PG_RENDERING_AT_CONNECT)
    b = plan.boundary
    if source.num_partitions > 1 and source.key_type == "integer" and "high" in b:
        low = (b["low"] if b.get("low") is not None else 0) + 1
        reader = (
            reader.option("partitionColumn", source.key_column)
            .option("lowerBound", str(low))
            .option("upperBound", str(int(b["high"]) + 1))
            .option("numPartitions", str(source.num_partitions))
        )
    return reader.load()


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
    df = read_jdbc_range(source, plan, ctx, row_hash=hashed).localCheckpoint(eager=True)
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
    if read != int(frozen["rows"]) or (digest is not None and f"{FINGERPRINT_SCHEME}:{digest}" != planned):
        what = (
            f"{read} rows"
            if read != int(frozen["rows"])
            else f"the planned {read} rows with other content (fingerprint {FINGERPRINT_SCHEME}:{digest}, "
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
