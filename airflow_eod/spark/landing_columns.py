"""Matching a landing batch's columns to its output: the projection of each group of files
to the output's columns in order, the corrupt-record column's layout metadata, and the
messages that name the columns which do not match. Shared by the readers of
:mod:`airflow_eod.spark.landing_reader`."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from airflow_eod.spark.bad_records import CORRUPT_COLUMN, LAYOUT_METADATA_KEY
from airflow_eod.spark.landing_paths import CsvDialect

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructField

NAMED = 5  # problems spelled out in one error message


def layout_metadata(file_format: str, options: Mapping[str, str]) -> dict[str, str]:
    """What bad_records needs to re-parse a malformed record in Python."""
    body: dict[str, Any] = {
        "format": file_format,
        "date_format": options.get("dateformat", ""),
        "timestamp_format": options.get("timestampformat", ""),
    }
    if file_format == "csv":
        body["csv"] = asdict(CsvDialect.from_options(options))
    return {LAYOUT_METADATA_KEY: json.dumps(body, sort_keys=True)}


def col(name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def project(
    df: DataFrame,
    present: Mapping[str, str],
    out: Sequence[StructField],
    corrupt: StructField | None,
    layout: dict[str, str],
) -> DataFrame:
    """``df`` in the output's column order: a column the group lacks is null, and the
    corrupt-record column carries the layout.

    :param present: lower-case output name -> the group's column name.
    """
    from pyspark.sql import functions as F

    # The common case: the read already is the output (the same names in the same order, no
    # corrupt-record column to label). A select would cost a Python-to-JVM call per column
    # and a round of analysis on every load, for nothing.
    if corrupt is None and list(df.columns) == [f.name for f in out]:
        if all(present.get(f.name.lower()) == f.name for f in out):
            return df
    cols = [
        col(present[f.name.lower()]).alias(f.name)
        if f.name.lower() in present
        else F.lit(None).cast(f.dataType).alias(f.name)
        for f in out
    ]
    if corrupt is not None:
        cols.append(col(CORRUPT_COLUMN).alias(CORRUPT_COLUMN, metadata=layout))
    return df.select(*cols)


def union(frames: Sequence[DataFrame]) -> DataFrame:
    return functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)


def problem_message(what: str, problems: Sequence[str], hints: Sequence[str]) -> str:
    """``what``, the first :data:`NAMED` problems, and the hints, as one error message."""
    shown = "; ".join(problems[:NAMED])
    more = f" (and {len(problems) - NAMED} more)" if len(problems) > NAMED else ""
    return f"{what}: {shown}{more}; nothing was committed. " + " ".join(hints)


def drift_hint(kind: str) -> str:
    return (
        "Add the column(s) to the schema, or set schema_drift='add_columns' to load them as new "
        f"nullable {kind} column(s)"
    )
