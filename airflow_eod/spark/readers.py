"""Reading a frozen batch with Spark: the one registry of sources (kind -> source class and
reader), and the one place that turns a source's plan into a DataFrame, so that the sources
themselves (planning, in the task, without a JVM) import no Spark code.

A new kind of source is its class in :mod:`airflow_eod.sources` (listed in
:data:`~airflow_eod.sources.SOURCE_KINDS`, for :func:`~airflow_eod.sources.source_from_dict`)
and its reader here, in :data:`REGISTRY`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.planlog.store import Plan
from airflow_eod.core.source import ReadContext, Source
from airflow_eod.sources import SOURCE_KINDS
from airflow_eod.sources.jdbc_incremental import JdbcIncrementalSource
from airflow_eod.sources.kafka_topics import KafkaSource
from airflow_eod.sources.landing_files import DEFAULT_READ_OPTIONS, LandingFilesSource
from airflow_eod.spark.jdbc_reader import read_jdbc_batch
from airflow_eod.spark.kafka_reader import read_kafka_batch
from airflow_eod.spark.landing_reader import read_landing_batch
from airflow_eod.spark.landing_store_files import landing_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def read_landing_files(source: LandingFilesSource, plan: Plan, ctx: ReadContext) -> DataFrame:
    """Exactly the planned files, columns matched by name, with a corrupt-record column when
    a schema is given for CSV or JSON (:mod:`airflow_eod.spark.landing_reader`,
    :mod:`airflow_eod.spark.bad_records`); local files, or a landing prefix's files on an
    object store (:mod:`airflow_eod.spark.landing_store_files`)."""
    spark = ctx.spark
    return read_landing_batch(
        spark,
        plan,
        file_format=source.file_format,
        schema=source.schema,
        read_options=source.read_options,
        default_options=DEFAULT_READ_OPTIONS[source.file_format],
        schema_drift=ctx.schema_drift,
        fail_fast=ctx.fail_fast,
        files=landing_files(spark, source, plan),
    )


@dataclass(frozen=True)
class SourceKind:
    """A kind of source: its class (planning, no Spark) and its Spark reader.

    :param source: the source class.
    :param read: ``read(source, plan, ctx)``, a DataFrame of exactly the frozen batch.
    """

    source: type
    read: Callable[[Any, Plan, ReadContext], DataFrame]


REGISTRY: Mapping[str, SourceKind] = {
    LandingFilesSource.kind: SourceKind(LandingFilesSource, read_landing_files),
    JdbcIncrementalSource.kind: SourceKind(JdbcIncrementalSource, read_jdbc_batch),
    KafkaSource.kind: SourceKind(KafkaSource, read_kafka_batch),
}

if {kind: k.source for kind, k in REGISTRY.items()} != SOURCE_KINDS:
    # A kind planning knows but no reader reads would fail every load of it, after planning.
    raise ImportError(f"the source kinds {sorted(SOURCE_KINDS)} and the readers {sorted(REGISTRY)} disagree")


def reader_for(source: Source) -> SourceKind:
    """The registry entry that reads ``source``: the one of its class, or of the nearest
    base class registered (a user's subclass of a source, whatever ``kind`` it says)."""
    by_class = {k.source: k for k in REGISTRY.values()}
    for cls in type(source).__mro__:
        if cls in by_class:
            return by_class[cls]
    raise ConfigurationError(
        f"no reader for a source of type {type(source).__name__} (kind {getattr(source, 'kind', None)!r}): "
        f"a source must be, or subclass, one of {sorted(c.__name__ for c in by_class)}"
    )


def read_batch(source: Source, plan: Plan, ctx: ReadContext) -> DataFrame:
    """A DataFrame of exactly the batch ``plan`` froze from ``source``, read by the reader
    :func:`reader_for` finds for it."""
    return reader_for(source).read(source, plan, ctx)
