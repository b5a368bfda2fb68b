"""Reading a frozen Kafka batch with Spark: exactly the planned offset ranges, once.

Spark's batch ``kafka`` reader takes per-partition ``startingOffsets``/``endingOffsets``, so
every attempt reads the same records (under ``read_committed``, without aborted records and
transaction markers, whose offsets are gaps). The rows are read once and kept
(``localCheckpoint``): a Kafka DataFrame reads the brokers again at every action, and a
range that retention trims between two actions would give the count and the write
different rows. ``failOnDataLoss`` makes a read that misses a frozen record fail; that
failure is reported here as :class:`~airflow_eod.sources.kafka_topics.RecordsDeletedError`.
Offsets that compaction removed inside a frozen range are no data loss to Spark (they lie
above the log start offset): it skips them, as it skips transaction markers, so an attempt
after the cleaner ran reads the records compaction kept of the range (none, if it kept none),
and commits them (tests/kafka/test_kafka_edges.py).

The table gets ``key`` and ``value`` (text or bytes, ``value_format``), or the value's JSON
fields, and where each record came from: ``kafka_topic``, ``kafka_partition``,
``kafka_offset``, ``kafka_timestamp``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_eod.core.errors import RecordsDeletedError
from airflow_eod.core.planlog.restatement import refreeze_hint
from airflow_eod.core.planlog.store import Plan
from airflow_eod.core.source import ReadContext
from airflow_eod.sources.kafka_topics import METADATA_COLUMNS, KafkaSource

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Spark's words for a frozen record Kafka no longer holds (KafkaIllegalStateException).
_DATA_LOSS = ("Some data may have been lost", "Cannot fetch offset", "Could not read records in offset")


def _records(source: KafkaSource, plan: Plan, ctx: ReadContext) -> DataFrame:
    reader = ctx.spark.read.format("kafka")
    for key, value in source.spark_options(plan, ctx).items():
        reader = reader.option(key, value)
    return reader.load()


def _shaped(source: KafkaSource, df: DataFrame, ctx: ReadContext) -> DataFrame:
    from pyspark.sql import functions as F

    meta = [F.col(name.removeprefix("kafka_")).alias(name) for name in METADATA_COLUMNS]
    if source.value_format == "binary":
        return df.select(F.col("key"), F.col("value"), *meta)
    key = F.col("key").cast("string").alias("key")
    if source.value_format == "string":
        return df.select(key, F.col("value").cast("string").alias("value"), *meta)
    from airflow_eod.spark.kafka_json import parse_json_values

    return parse_json_values(df, source, key, meta, ctx)


def read_kafka_batch(source: KafkaSource, plan: Plan, ctx: ReadContext) -> DataFrame:
    """A DataFrame of exactly the frozen ranges of ``plan``, read once and kept.

    :raises RecordsDeletedError: a frozen record is no longer in Kafka (before or while read).
    """
    source.check_readable(plan, ctx)
    # Kafka's rows are kept as read, and shaped after: a JSON value that does not parse
    # (FAILFAST) then fails the staging write, where the load explains it as malformed
    # records (bad_records.MalformedSplit.explain_failure), not this read.
    try:
        kept = _records(source, plan, ctx).localCheckpoint(eager=True)
    except Exception as exc:
        text = str(exc)
        if not any(marker in text for marker in _DATA_LOSS):
            raise
        detail = next((line.strip() for line in text.splitlines() if "offset" in line and "[" in line), "")
        raise RecordsDeletedError(
            plan.key.label,
            "Kafka deleted records of this frozen batch while Spark read them (retention or "
            f"DeleteRecords){': ' + detail if detail else ''}; nothing was committed, and no retry "
            "brings them back. To load what is left on purpose, re-freeze it: "
            f"{refreeze_hint(plan.pipeline_id, plan.batch_key)}",
        ) from None
    return _shaped(source, kept, ctx)
