"""Malformed records: count them per file, then fail the batch or split them off.

CSV and JSON files are read in PERMISSIVE mode with a corrupt-record column, so every
record that does not parse or does not fit the schema is kept as raw text instead of
failing on the first one or silently becoming nulls. By default any such record fails the
batch, naming the files and counts; with a quarantine table, they go there instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_eod.core.errors import MalformedInputError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

CORRUPT_COLUMN = "_eod_corrupt_record"
SOURCE_FILE_COLUMN = "source_file"
RAW_RECORD_COLUMN = "raw_record"


def split_malformed(
    df: DataFrame, label: str, *, quarantine: bool
) -> tuple[DataFrame, DataFrame | None, DataFrame | None]:
    """``(good rows, bad rows or None, persisted rows or None)``; raises when there are bad
    rows and no quarantine.

    The caller must ``unpersist()`` the persisted rows once the batch is written: Spark's
    cache matches a later read of the same files by its plan, so a cache left behind would
    hand a restatement the rows the files held before they were corrected.
    """
    if CORRUPT_COLUMN not in df.columns:
        return df, None, None
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    # Spark refuses queries that touch only the corrupt-record column of a raw CSV/JSON
    # scan; persisting the parsed rows first is its documented way around that.
    tagged = df.withColumn("_eod_file", F.input_file_name()).persist(StorageLevel.MEMORY_AND_DISK)
    bad = tagged.filter(F.col(CORRUPT_COLUMN).isNotNull())
    counts = {r["_eod_file"]: r["count"] for r in bad.groupBy("_eod_file").count().collect()}
    good = tagged.filter(F.col(CORRUPT_COLUMN).isNull()).drop(CORRUPT_COLUMN, "_eod_file")
    if not counts:
        return good, None, tagged
    total = sum(counts.values())
    detail = ", ".join(f"{path.rsplit('/', 1)[-1]}: {n}" for path, n in sorted(counts.items()))
    if not quarantine:
        tagged.unpersist()
        raise MalformedInputError(
            label,
            f"{total} malformed record(s) that do not parse or do not fit the schema ({detail}); "
            "nothing was committed. Fix the files, or set quarantine_table_uri to load the good "
            "rows and keep the bad ones in a quarantine table",
        )
    bad_rows = bad.select(
        F.col("_eod_file").alias(SOURCE_FILE_COLUMN), F.col(CORRUPT_COLUMN).alias(RAW_RECORD_COLUMN)
    )
    return good, bad_rows, tagged
