"""JSON record values of a Kafka batch, parsed into columns with a declared schema.

Values are parsed as landing JSON files are: PERMISSIVE with the corrupt-record column, so
a value that does not parse or fit the schema is kept as raw text and then fails the batch,
naming its partitions and count, or goes to the quarantine table
(:mod:`airflow_eod.spark.bad_records`); FAILFAST when the load reads in one pass. A record
whose value is null (a compacted topic's tombstone) becomes a row whose value columns are
null, with its key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.source import ReadContext
from airflow_eod.sources.kafka_topics import METADATA_COLUMNS, KafkaSource, clashing_fields
from airflow_eod.spark.bad_records import CORRUPT_COLUMN, SOURCE_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

_PARSED = "_eod_value"


def value_schema(ddl: str) -> Any:
    """The StructType of a Spark DDL string, or a :class:`ConfigurationError` naming it."""
    from pyspark.sql.types import StructType

    try:
        schema = StructType.fromDDL(ddl)
    except Exception as exc:
        raise ConfigurationError(f"schema {ddl!r} is not a Spark DDL schema: {exc}") from None
    return schema


def parse_json_values(
    df: DataFrame, source: KafkaSource, key: Column, meta: list[Column], ctx: ReadContext
) -> DataFrame:
    """``df`` (Spark's Kafka rows) as the key, the value's fields, the corrupt-record column
    (unless read FAILFAST) and the metadata columns ``meta`` (named as
    :data:`~airflow_eod.sources.kafka_topics.METADATA_COLUMNS`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    assert source.schema is not None  # checked by KafkaSource
    schema = value_schema(source.schema)
    # Checked when the source is made too; again here for a source made another way.
    clash = clashing_fields([f.name for f in schema.fields])
    if clash:
        raise ConfigurationError(
            f"the value schema's fields {sorted(clash)} clash with the columns the Kafka source adds "
            f"({sorted(['key', *METADATA_COLUMNS])}, compared without case) or with airflow-eod's "
            "reserved prefix '_eod_'"
        )
    text = F.col("value").cast("string")
    # The partition a record came from stands where a landing file's name stands.
    where = F.concat_ws("-", F.col("topic"), F.col("partition").cast("string"))
    if ctx.fail_fast:
        parsed = F.from_json(text, schema, {"mode": "FAILFAST"})
        return df.select(key, parsed.alias(_PARSED), *meta).select(
            "key",
            *[F.col(f"{_PARSED}.{f.name}").alias(f.name) for f in schema.fields],
            *METADATA_COLUMNS,
        )
    with_corrupt = StructType([*schema.fields, StructField(CORRUPT_COLUMN, StringType())])
    parsed = F.from_json(
        text, with_corrupt, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN}
    )
    return df.select(key, parsed.alias(_PARSED), *meta, where.alias(SOURCE_COLUMN)).select(
        "key",
        *[F.col(f"{_PARSED}.{f.name}").alias(f.name) for f in schema.fields],
        *METADATA_COLUMNS,
        F.col(f"{_PARSED}.{CORRUPT_COLUMN}").alias(CORRUPT_COLUMN),
        SOURCE_COLUMN,
    )
