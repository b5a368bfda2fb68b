"""Malformed records: count them per file, then fail the batch or split them off.

CSV and JSON files are read in PERMISSIVE mode with a corrupt-record column, so every
record that does not parse or does not fit the schema is kept as raw text instead of
failing on the first one or silently becoming nulls. By default any such record fails the
batch, naming the files and counts; with a quarantine table, they go there instead.

In the common case (no quarantine, no transform, an engine that commits after the write)
the batch is read FAILFAST, exactly as a plain Spark job reads it, and written in one pass:
the malformed records that PERMISSIVE would flag are the ones that make FAILFAST stop, so a
batch that holds any fails its write, uncommitted, and only then is it read again,
PERMISSIVE, to count them per file (:func:`single_pass`). Otherwise the parsed rows are
persisted and counted before the write, as a pass of their own (:func:`split_malformed`).

A failing batch's message also says which column failed: a bounded sample of the malformed
records is parsed again in Python against the schema, so that a wrong type in the schema
(every record malformed) does not read as bad data.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_eod.core.errors import MalformedInputError
from airflow_eod.core.planlog.restatement import refreeze_hint
from airflow_eod.core.quarantine_outbox import RAW_RECORD_COLUMN, SOURCE_FILE_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructField

log = logging.getLogger(__name__)

CORRUPT_COLUMN = "_eod_corrupt_record"
# Field metadata on the corrupt-record column: how to re-parse a record (landing_reader).
LAYOUT_METADATA_KEY = "eod_layout"
_FILE = "_eod_file"
# A reader whose records come from no file (Kafka) names where each came from in this column.
SOURCE_COLUMN = _FILE
_SAMPLE = 20  # malformed records parsed in Python to find the failing column
_SHOWN = 3  # of them quoted in the message
_CLIP = 160  # characters of a quoted record


@dataclass
class MalformedSplit:
    """The rows to load, and what is still owed about the malformed ones.

    :param good: the well-formed rows, without the corrupt-record column.
    :param bad: the malformed records as quarantine rows (quarantine only).
    :param persisted: rows this split cached; :meth:`release` drops them.
    :param label: the batch, for error messages.
    :param reread: (single pass) reads the batch again PERMISSIVE, with the corrupt-record
        column, for :meth:`explain_failure`.
    """

    good: DataFrame
    bad: DataFrame | None = None
    persisted: DataFrame | None = None
    label: str = ""
    reread: Callable[[], DataFrame] | None = None

    def explain_failure(self, exc: BaseException) -> None:
        """After the write of :attr:`good` failed: raise :class:`MalformedInputError` (files,
        counts, failing columns) if the batch holds malformed records; return if it does not,
        so that the caller raises ``exc`` itself.

        A single-pass batch is read FAILFAST, as a plain Spark job would read it: the write
        stops at the first malformed record, and only then is the batch read a second time
        to count them per file.
        """
        if self.reread is None:
            return
        try:
            again = self.reread()
            if CORRUPT_COLUMN not in again.columns:
                return  # nothing is counted for this read (Parquet, no schema, the user's own mode)
            tagged = _tagged(again)
        except Exception:  # the original failure is the one to report
            log.warning("batch %s: could not read the batch again to count malformed records", self.label)
            return
        error: MalformedInputError | None = None
        try:
            counts = _counts_per_file(tagged)
            error = _malformed_error(self.label, tagged, counts) if counts else None
        except Exception:
            log.warning("batch %s: could not count the malformed records of the batch", self.label)
        finally:
            tagged.unpersist()
        if error is not None:
            # The failure was the expected one, and the error says all of it: Spark's own
            # text (a JVM stack trace advising mode PERMISSIVE, which would turn this check
            # off) goes to debug, not into the traceback of the task's one error.
            log.debug("batch %s: the FAILFAST write stopped at a malformed record", self.label, exc_info=exc)
            raise error from None

    def release(self) -> None:
        """Drop what this split cached: Spark's cache matches a later read of the same files
        by its plan, so a cache left behind would hand a restatement the rows the files held
        before they were corrected."""
        if self.persisted is not None:
            self.persisted.unpersist()
            self.persisted = None


def split_malformed(df: DataFrame, label: str, *, quarantine: bool) -> MalformedSplit:
    """Count the malformed records of a batch read PERMISSIVE, up front, and split them off
    its good rows (the batch is persisted for that: see :meth:`MalformedSplit.release`).

    :param df: the batch as read, with the corrupt-record column when it was read PERMISSIVE.
    :param label: the batch, for error messages.
    :param quarantine: the malformed records go to a quarantine table instead of failing.
    :raises MalformedInputError: malformed records and no quarantine.
    """
    if CORRUPT_COLUMN not in df.columns:
        return MalformedSplit(df, label=label)
    from pyspark.sql import functions as F

    tagged = _tagged(df)
    counts = _counts_per_file(tagged)
    good = tagged.filter(F.col(CORRUPT_COLUMN).isNull()).drop(CORRUPT_COLUMN, _FILE)
    if not counts:
        return MalformedSplit(good, persisted=tagged, label=label)
    if not quarantine:
        try:
            raise _malformed_error(label, tagged, counts)
        finally:
            tagged.unpersist()
    bad = tagged.filter(F.col(CORRUPT_COLUMN).isNotNull())
    # Explicit empty metadata: the layout stays out of the quarantine table's schema.
    bad_rows = bad.select(
        F.col(_FILE).alias(SOURCE_FILE_COLUMN), F.col(CORRUPT_COLUMN).alias(RAW_RECORD_COLUMN, metadata={})
    )
    return MalformedSplit(good, bad_rows, tagged, label=label)


def single_pass(df: DataFrame, label: str, reread: Callable[[], DataFrame]) -> MalformedSplit:
    """A batch read FAILFAST and written whole by its first action: malformed records fail
    that write, and :meth:`MalformedSplit.explain_failure` then counts them per file.

    Only valid when the rows are written with every column (Spark's parser skips the
    columns a query drops, and with them their malformed values) and nothing commits inside
    the write.

    :param reread: reads the same batch PERMISSIVE, with the corrupt-record column.
    """
    return MalformedSplit(df, label=label, reread=reread)


def _tagged(df: DataFrame) -> DataFrame:
    """Every record with its file, persisted (the caller unpersists): Spark refuses queries
    that touch only the corrupt-record column of a raw CSV/JSON scan (its parser would skip
    the other columns and flag nothing); persisting first is its documented way around."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    if _FILE not in df.columns:  # a reader that names its records' origin keeps its names
        df = df.withColumn(_FILE, F.input_file_name())
    return df.persist(StorageLevel.MEMORY_AND_DISK)


def _counts_per_file(tagged: DataFrame) -> dict[str, int]:
    from pyspark.sql import functions as F

    bad = tagged.filter(F.col(CORRUPT_COLUMN).isNotNull())
    return {r[_FILE]: r["count"] for r in bad.groupBy(_FILE).count().collect()}


def _malformed_error(label: str, tagged: DataFrame, counts: Mapping[str, int]) -> MalformedInputError:
    from pyspark.sql import functions as F

    total = sum(counts.values())
    detail = ", ".join(f"{_name(path)}: {n}" for path, n in sorted(counts.items()))
    explanation = explain_malformed(tagged, tagged.filter(F.col(CORRUPT_COLUMN).isNotNull()), total)
    pipeline, _, key = label.rpartition("/")
    # Records that came from files name them by URI; a Kafka partition ("orders-3") is not a
    # file that can be fixed and re-frozen: its records stay as they were produced.
    from_files = any("/" in origin for origin in counts)
    fix_input = (
        "or fix the files and re-freeze the batch in one step (a cleared task would fail again, "
        f"since its plan froze the files as they were): {refreeze_hint(pipeline, key)}; or "
        if from_files
        else "or, as records cannot be rewritten where they were produced, "
    )
    return MalformedInputError(
        label,
        f"{total} malformed record(s) that do not parse or do not fit the schema ({detail}); "
        f"nothing was committed. {explanation}Fix the schema and clear the task; {fix_input}"
        "set quarantine_table_uri to load the good rows and keep the bad ones in a quarantine table",
    )


def _path(uri: str) -> str:
    from airflow_eod.spark.landing_paths import path_of_uri

    return path_of_uri(uri)


def _name(uri: str) -> str:
    return _path(uri).rsplit("/", 1)[-1]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- which column failed -------------------------------------------------------------------
@dataclass
class _ColumnFault:
    column: str
    declared: str
    records: int = 0
    example: str = ""


def explain_malformed(tagged: DataFrame, bad: DataFrame, total: int) -> str:
    """The columns that fail in a sample of the malformed records, a few of the records, and
    whether the schema rather than the files is probably wrong; empty if nothing can be told.

    :param tagged: every record of the batch, with the corrupt-record and file columns.
    :param bad: the malformed records.
    :param total: how many records are malformed.
    """
    try:
        sample = [(_path(r[0]), r[1]) for r in bad.select(_FILE, CORRUPT_COLUMN).limit(_SAMPLE).collect()]
        every = tagged.count() == total
        fields = [f for f in tagged.schema.fields if f.name not in (CORRUPT_COLUMN, _FILE)]
        layout = json.loads(tagged.schema[CORRUPT_COLUMN].metadata.get(LAYOUT_METADATA_KEY) or "{}")
        faults, shapeless = find_faults(sample, fields, layout, tagged.sparkSession)
    except Exception:  # the explanation must never hide the error it explains
        log.warning("could not explain the malformed records", exc_info=True)
        return ""
    parts = []
    if faults:
        cols = ", ".join(
            f"{c.column} (declared {c.declared}; {c.records} record(s), e.g. {_clip(c.example, 40)!r})"
            for c in faults
        )
        parts.append(
            f"In a sample of {len(sample)} of them, the values that do not fit are in column(s) {cols}."
        )
    if shapeless:
        parts.append(f"{len(shapeless)} of the sample cannot be split into columns ({shapeless[0]}).")
    if not faults and not shapeless:
        parts.append(f"Parsing a sample of {len(sample)} of them did not show which column fails.")
    if every and faults:
        types = ", ".join(f"{c.column} {c.declared}" for c in faults)
        parts.append(
            "Every record of the batch is malformed, so the schema is probably wrong rather than "
            f"the files: check the declared type of {types}."
        )
    elif every:
        parts.append(
            "Every record of the batch is malformed, so the schema or the reader options (sep, "
            "header, quote) are probably wrong rather than the files."
        )
    shown = "; ".join(f"{path.rsplit('/', 1)[-1]}: {_clip(raw, _CLIP)!r}" for path, raw in sample[:_SHOWN])
    parts.append(f"Sample record(s): {shown}.")
    return " ".join(parts) + " "


def find_faults(
    sample: Sequence[tuple[str, str]],
    fields: Sequence[StructField],
    layout: Mapping[str, Any],
    spark: SparkSession | None = None,
) -> tuple[list[_ColumnFault], list[str]]:
    """Parse malformed records in Python against the schema.

    :param sample: ``(local file path, raw record)`` pairs.
    :param fields: the batch's columns and declared types.
    :param layout: how the records were read (``format``, the CSV dialect, date formats).
    :param spark: reads a CSV header whose codec Python lacks.
    :returns: the failing columns (most records first) and, per record that does not split
        into the file's columns, why.
    """
    from airflow_eod.spark.landing_paths import CsvDialect, csv_header

    faults: dict[str, _ColumnFault] = {}
    shapeless: list[str] = []
    by_name = {f.name.lower(): f for f in fields}
    dialect = CsvDialect(**layout["csv"]) if layout.get("format") == "csv" else None
    columns: dict[str, list[StructField | None]] = {}
    for path, raw in sample:
        pairs: list[tuple[StructField, Any]] = []
        if dialect is not None:
            if path not in columns:
                header = csv_header(path, dialect, spark) if dialect.header else None
                names = header if header is not None else [f.name for f in fields]
                columns[path] = [by_name.get(n.lower()) for n in names]
            tokens = dialect.first_record(raw) or []
            if len(tokens) != len(columns[path]):
                shapeless.append(f"{len(tokens)} field(s) where the file has {len(columns[path])} column(s)")
            pairs = [
                (f, tok)
                for f, tok in zip(columns[path], tokens, strict=False)
                if f is not None and tok != dialect.null_value
            ]
        elif layout.get("format") == "json":
            try:
                record = json.loads(raw, parse_float=decimal.Decimal)
            except ValueError:
                shapeless.append("not valid JSON")
                continue
            if not isinstance(record, dict):
                shapeless.append("not a JSON object")
                continue
            pairs = [(f, record[f.name]) for f in fields if record.get(f.name) is not None]
        else:
            continue
        for f, value in pairs:
            if value_fits(value, f.dataType.simpleString(), layout, text=dialect is not None) is False:
                fault = faults.setdefault(f.name, _ColumnFault(f.name, f.dataType.simpleString().upper()))
                fault.records += 1
                fault.example = fault.example or str(value)
    return sorted(faults.values(), key=lambda c: -c.records), shapeless


# -- Python's reading of one value, as close to Spark's as a diagnosis needs ---------------------
_INT_BITS = {"tinyint": 8, "smallint": 16, "int": 32, "bigint": 64}
_INT_TEXT = re.compile(r"[+-]?\d+")
_NUMBER_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_JAVA_DOUBLE = re.compile(r"\s*[+-]?(NaN|Infinity|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[dDfF]?)\s*")
_NON_FINITE = {"NaN", "Infinity", "+Infinity", "-Infinity", "INF", "+INF", "-INF", "Inf", "-Inf", "+Inf"}
_DECIMAL_TYPE = re.compile(r"decimal\((\d+),(\d+)\)")
_TIME = (
    r"\d{1,2}(:\d{1,2}(:\d{1,2}(\.\d*)?)?)?\s*(Z|UTC|GMT|[+-]\d{1,2}(:?\d{2}(:?\d{2})?)?|[A-Za-z][\w/+-]*)?"
)
_DATE_TEXT = re.compile(r"\s*([+-]?\d{4,})(-(\d{1,2})(-(\d{1,2})([T ].*)?)?)?\s*", re.S)
_TIMESTAMP_TEXT = re.compile(
    rf"\s*([+-]?\d{{4,}})(-(\d{{1,2}})(-(\d{{1,2}})([T ]{_TIME})?)?)?\s*|\s*T?{_TIME}\s*", re.S
)


def value_fits(value: Any, type_name: str, layout: Mapping[str, Any], *, text: bool) -> bool | None:
    """Whether Spark would read ``value`` as ``type_name``; ``None`` when this cannot tell.

    :param value: a CSV token (``text``) or a value that ``json.loads`` made.
    :param type_name: the Spark type's ``simpleString()``, e.g. ``decimal(10,2)``.
    :param layout: the reader's date and timestamp formats (custom ones are not judged).
    :param text: the value is CSV text, not JSON.
    """
    if type_name == "string":
        return True
    if isinstance(value, str):
        if text:
            return _text_fits(value, type_name, layout)
        # Spark's JSON reader takes numbers and booleans only as such, not as strings.
        if type_name in _INT_BITS or type_name == "boolean":
            return False
        if type_name in ("double", "float"):
            return value in _NON_FINITE
        return _text_fits(value, type_name, layout)
    if isinstance(value, bool):
        return type_name == "boolean"
    if isinstance(value, int | decimal.Decimal):
        if type_name in _INT_BITS:
            bits = _INT_BITS[type_name]
            return isinstance(value, int) and -(2 ** (bits - 1)) <= value < 2 ** (bits - 1)
        if type_name in ("double", "float"):
            return True
        if type_name.startswith("decimal"):
            return _decimal_fits(decimal.Decimal(value), type_name)
        return type_name == "timestamp" and isinstance(value, int)  # epoch seconds
    if type_name in _INT_BITS or type_name in ("double", "float", "boolean", "date", "timestamp"):
        return False  # an object or an array
    return None if not type_name.startswith("decimal") else False


def _text_fits(text: str, type_name: str, layout: Mapping[str, Any]) -> bool | None:
    if type_name in _INT_BITS:
        bits = _INT_BITS[type_name]
        return bool(_INT_TEXT.fullmatch(text)) and -(2 ** (bits - 1)) <= int(text) < 2 ** (bits - 1)
    if type_name in ("double", "float"):
        return text in _NON_FINITE or bool(_JAVA_DOUBLE.fullmatch(text))
    if type_name.startswith("decimal"):
        plain = text.replace(",", "")  # Spark's default-locale decimal parser drops commas
        return bool(_NUMBER_TEXT.fullmatch(plain)) and _decimal_fits(decimal.Decimal(plain), type_name)
    if type_name == "boolean":
        return text.lower() in ("true", "false")
    if type_name == "date":
        return None if layout.get("date_format") else _date_fits(_DATE_TEXT.fullmatch(text))
    if type_name in ("timestamp", "timestamp_ntz"):
        return None if layout.get("timestamp_format") else _date_fits(_TIMESTAMP_TEXT.fullmatch(text))
    return None


def _decimal_fits(value: decimal.Decimal, type_name: str) -> bool | None:
    m = _DECIMAL_TYPE.fullmatch(type_name)
    if m is None:
        return None
    precision, scale = int(m.group(1)), int(m.group(2))
    if not value.is_finite():
        return False
    with decimal.localcontext(decimal.Context(prec=200)):
        # Spark rounds extra fractional digits half-up; only the integer digits can overflow.
        rounded = value.quantize(decimal.Decimal(1).scaleb(-scale), rounding=decimal.ROUND_HALF_UP)
        return abs(rounded) < decimal.Decimal(10) ** (precision - scale)


def _date_fits(match: re.Match[str] | None) -> bool:
    if match is None:
        return False
    if match.group(1) is None:  # a time of day alone
        return True
    year, month, day = int(match.group(1)), int(match.group(3) or 1), int(match.group(5) or 1)
    if not 1 <= year <= 9999:
        return 1 <= month <= 12 and 1 <= day <= 31
    try:
        dt.date(year, month, day)
    except ValueError:
        return False
    return True
