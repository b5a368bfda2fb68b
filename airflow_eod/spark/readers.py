"""Reading a frozen batch with Spark: the one place that turns a source's plan into a
DataFrame, so that the sources themselves (planning, in the task, without a JVM) import no
Spark code."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_eod.core.plan_log import Plan
from airflow_eod.sources.base import ReadContext, Source
from airflow_eod.sources.jdbc_incremental import JdbcIncrementalSource
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
        return source.read(plan, ctx)
    raise TypeError(f"no reader for a source of type {type(source).__name__}")
