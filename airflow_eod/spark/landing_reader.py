"""Reading a landing batch: exactly the planned files, every column matched by name, and no
column the files carry dropped without a word.

This module owns the step from a frozen landing-files plan to the DataFrame the load writes:

- **Exactly the planned files.** Spark's reader treats every path as a Hadoop glob, so a
  planned ``x[1].csv`` would read ``x1.csv`` instead. Every path is glob-escaped, and once
  Spark has resolved the paths, the files it will read are compared with the plan: any
  difference fails the batch before a row is read.
- **CSV columns by header name.** With ``header=true`` Spark matches a schema to the
  columns by position. Headers are read here first, in Python, before any Spark work;
  files are grouped by header, each group is read with the schema in its header's order,
  and the groups are selected in the schema's order and unioned. A file lacking a declared
  column fails the batch.
- **Columns the schema lacks.** With a declared schema, a column the files carry and the
  schema does not declare fails the batch under ``schema_drift="fail"``, and is read under
  ``"add_columns"`` (CSV as STRING, JSON and Parquet with their own type).
- The corrupt-record column carries the records' layout as field metadata, so
  :mod:`airflow_eod.spark.bad_records` can tell which column of a malformed record failed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_eod.core.delta.compat import SCHEMA_ADD_COLUMNS
from airflow_eod.core.errors import (
    BatchError,
    BatchRefusedError,
    ConfigurationError,
    MalformedInputError,
    SchemaMismatchError,
)
from airflow_eod.spark.bad_records import CORRUPT_COLUMN
from airflow_eod.spark.landing_columns import (
    NAMED,
    col,
    drift_hint,
    layout_metadata,
    problem_message,
    project,
    union,
)
from airflow_eod.spark.landing_paths import (
    LOCAL_FILES,
    CsvDialect,
    LandingFiles,
    check_resolved,
    csv_header,
    resolved_files,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameReader, SparkSession
    from pyspark.sql.types import StructField, StructType

    from airflow_eod.core.planlog.store import Plan


# -- the batch -----------------------------------------------------------------------------
def read_landing_batch(
    spark: SparkSession,
    plan: Plan,
    *,
    file_format: str,
    schema: str | None,
    read_options: Mapping[str, str],
    default_options: Mapping[str, str],
    schema_drift: str,
    fail_fast: bool = False,
    files: LandingFiles = LOCAL_FILES,
) -> DataFrame:
    """A DataFrame of exactly the planned files, columns matched by name.

    :param spark: the driver's session.
    :param plan: the frozen plan; its inputs are the files.
    :param file_format: ``csv``, ``json`` or ``parquet``.
    :param schema: the declared Spark DDL schema, if any.
    :param read_options: the user's Spark reader options (a ``mode`` among them turns off
        the malformed-record counting).
    :param default_options: the source's defaults under ``read_options``.
    :param schema_drift: ``fail`` or ``add_columns``: what a column the schema lacks does.
    :param fail_fast: with a schema, read CSV/JSON FAILFAST rather than PERMISSIVE with a
        corrupt-record column (see :func:`airflow_eod.spark.bad_records.single_pass`).
    :param files: where the planned files are: local (the default), or on an object store
        (:mod:`airflow_eod.spark.landing_store_files`).
    :raises SchemaMismatchError: headers or file columns do not match the schema.
    :raises BatchError: Spark resolved other files than the plan holds.
    """
    from pyspark.sql.types import StringType, StructField

    label = plan.key.label
    # Spark's option names are case-insensitive; one spelling each keeps the merge honest.
    user = {k.lower(): str(v) for k, v in read_options.items()}
    options = {**{k.lower(): str(v) for k, v in default_options.items()}, **user}
    permissive = bool(schema) and file_format in ("csv", "json") and "mode" not in user and not fail_fast
    if permissive:
        options.update(mode="PERMISSIVE", columnnameofcorruptrecord=CORRUPT_COLUMN)
    elif fail_fast and "mode" not in user:
        options["mode"] = "FAILFAST"
    if not plan.inputs:
        if not schema:
            raise BatchRefusedError(
                label,
                "the batch has no files and the source has no schema to describe an empty batch; "
                "give the operator a schema",
            )
        return spark.createDataFrame([], schema)
    declared = declared_schema(schema) if schema else None
    paths = [str(e["path"]) for e in plan.inputs]
    corrupt = StructField(CORRUPT_COLUMN, StringType(), True) if permissive else None
    reader = spark.read.format(file_format).options(**options)
    if file_format == "csv":
        df = _read_csv(spark, reader, label, paths, declared, options, schema_drift, corrupt, files)
    elif file_format == "json":
        df = _read_json(spark, reader, label, paths, declared, options, schema_drift, corrupt, files)
    else:
        df = _read_parquet(spark, reader, label, paths, declared, options, schema_drift, files)
    check_resolved(label, paths, resolved_files(df, files))
    return df


@functools.lru_cache(maxsize=64)
def declared_schema(ddl: str) -> StructType:
    """The schema a DDL string declares. Parsed once per process: an empty DataFrame built
    to read it costs a Python RDD (~30 ms) every load."""
    from pyspark.sql.types import DataType, StructType, _parse_datatype_string

    # DataType.fromDDL is Spark 4's; Spark 3.5 (still on many clusters) parses the same DDL
    # with the function fromDDL wraps.
    from_ddl = getattr(DataType, "fromDDL", None) or _parse_datatype_string
    try:
        parsed = from_ddl(ddl)
    except Exception as exc:  # Spark's ParseException: a retry parses the same text
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigurationError(f"the schema {ddl!r} is not a Spark DDL schema: {first}") from exc
    if not isinstance(parsed, StructType):
        raise ConfigurationError(f"the schema {ddl!r} is not a list of columns such as 'id INT, name STRING'")
    return parsed


# -- CSV -----------------------------------------------------------------------------------
def _read_csv(
    spark: SparkSession,
    reader: DataFrameReader,
    label: str,
    paths: list[str],
    declared: StructType | None,
    options: Mapping[str, str],
    schema_drift: str,
    corrupt: StructField | None,
    files: LandingFiles,
) -> DataFrame:
    from pyspark.sql.types import StringType, StructField, StructType

    dialect = CsvDialect.from_options(options)
    layout = layout_metadata("csv", options)
    if not dialect.header:
        if declared is None:
            return reader.load([files.spark_path(p) for p in paths])
        df = reader.schema(StructType(list(declared.fields) + ([corrupt] if corrupt else []))).load(
            [files.spark_path(p) for p in paths]
        )
        return project(
            df, {f.name.lower(): f.name for f in declared.fields}, declared.fields, corrupt, layout
        )
    headers: dict[str, list[str] | None] = {}
    for p in paths:
        try:
            headers[p] = csv_header(p, dialect, spark, files)
        except (OSError, LookupError) as exc:
            raise BatchError(label, f"cannot read the header of {p}: {exc}; nothing was committed") from exc
    if declared is None:
        return _read_csv_without_schema(reader, paths, headers, files)
    by_name = {f.name.lower(): f for f in declared.fields}
    missing: list[str] = []
    unnamed: list[str] = []
    new: list[str] = []
    extras: dict[str, StructField] = {}  # in order of first appearance
    groups: dict[tuple[str, ...], list[str]] = {}
    for p in paths:
        header = headers[p]
        if header is None:  # an empty file: no rows, any layout reads it
            groups.setdefault(tuple(f.name for f in declared.fields), []).append(p)
            continue
        seen: set[str] = set()
        names: list[str] = []
        for i, name in enumerate(header):
            key = name.lower()
            if not name or key in seen:
                unnamed.append(f"{p} has {'no name' if not name else f'{name} twice'} in column {i + 1}")
            seen.add(key)
            if key in by_name:
                names.append(by_name[key].name)
            else:
                names.append(name or f"_c{i}")
                if name:
                    new.append(f"{p} has column {name}")
                    extras.setdefault(key, StructField(name, StringType(), True))
        lacking = [f.name for f in declared.fields if f.name.lower() not in seen]
        if lacking:
            missing.append(f"{p} lacks the declared column(s) {', '.join(lacking)}")
        groups.setdefault(tuple(names), []).append(p)
    if missing or unnamed or (new and schema_drift != SCHEMA_ADD_COLUMNS):
        hints = ["CSV columns are matched to the schema by header name (case-insensitive)."]
        if missing or unnamed:
            hints.append("Fix the files' headers, or the schema.")
        if new and schema_drift != SCHEMA_ADD_COLUMNS:
            hints.append(drift_hint("STRING"))
        problems = missing + unnamed + ([] if schema_drift == SCHEMA_ADD_COLUMNS else new)
        raise SchemaMismatchError(
            label, problem_message("the CSV headers do not match the schema", problems, hints)
        )
    out = list(declared.fields) + list(extras.values())
    types = {f.name.lower(): f.dataType for f in out}
    frames = []
    for order, group in groups.items():
        read_schema = StructType(
            [StructField(n, types[n.lower()], True) for n in order] + ([corrupt] if corrupt else [])
        )
        df = reader.schema(read_schema).load([files.spark_path(p) for p in group])
        frames.append(project(df, {n.lower(): n for n in order}, out, corrupt, layout))
    return union(frames)


def _read_csv_without_schema(
    reader: DataFrameReader, paths: list[str], headers: Mapping[str, list[str] | None], files: LandingFiles
) -> DataFrame:
    """Without a schema Spark takes the first file's header for every file: files with
    another header are read on their own and joined by column name."""
    groups: dict[tuple[str, ...], list[str]] = {}
    empty: list[str] = []
    for p in paths:
        header = headers[p]
        if header is None:
            empty.append(p)
        else:
            groups.setdefault(tuple(n.lower() for n in header), []).append(p)
    if not groups:
        return reader.load([files.spark_path(p) for p in paths])
    lists = list(groups.values())
    lists[0] = lists[0] + empty  # an empty file has no rows: any group may read it
    return union([reader.load([files.spark_path(p) for p in group]) for group in lists])


# -- JSON ----------------------------------------------------------------------------------
def _read_json(
    spark: SparkSession,
    reader: DataFrameReader,
    label: str,
    paths: list[str],
    declared: StructType | None,
    options: Mapping[str, str],
    schema_drift: str,
    corrupt: StructField | None,
    files: LandingFiles,
) -> DataFrame:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    uris = [files.spark_path(p) for p in paths]
    if declared is None:
        return reader.load(uris)
    # The files' own top-level fields: one more pass over the batch (JSON has no header).
    infer = {
        **options,
        "mode": "PERMISSIVE",
        "columnnameofcorruptrecord": CORRUPT_COLUMN,
        "samplingratio": "1.0",
    }
    inferred = spark.read.format("json").options(**infer).load(uris).schema
    # Spark matches JSON keys to the schema case-sensitively: `ID` never fills `id`.
    names = {f.name for f in declared.fields}
    extras = [f for f in inferred.fields if f.name not in names and f.name != CORRUPT_COLUMN]
    nested = [
        path
        for f in declared.fields
        if f.name in {g.name for g in inferred.fields}
        for path in _nested_extras(f.dataType, inferred[f.name].dataType, f.name)
    ]
    if nested:
        # A declared struct reads only its declared fields: the others would vanish, and
        # add_columns widens top-level columns only.
        raise SchemaMismatchError(
            label,
            problem_message(
                "the JSON files carry nested fields the schema's structs do not declare",
                [f"field {p}" for p in nested],
                ["Declare them in the schema (schema_drift='add_columns' adds top-level columns only)"],
            ),
        )
    if extras and schema_drift != SCHEMA_ADD_COLUMNS:
        probe = spark.read.format("json").options(**infer).schema(StructType(extras)).load(uris)
        flags = [F.max(col(f.name).isNotNull().cast("int")).alias(f.name) for f in extras]
        holders = probe.groupBy(F.input_file_name().alias("_eod_file")).agg(*flags).collect()
        problems = []
        for f in extras:
            held = sorted(files.path_of_uri(r["_eod_file"]) for r in holders if r[f.name])
            where = ", ".join(held[:NAMED]) if held else "the batch's files (always null)"
            problems.append(f"{where} carry field {f.name} ({f.dataType.simpleString()})")
        raise SchemaMismatchError(
            label,
            problem_message(
                "the JSON files carry fields the schema does not declare (names are case-sensitive)",
                problems,
                [drift_hint("")],
            ),
        )
    out = list(declared.fields) + extras
    df = reader.schema(StructType(out + ([corrupt] if corrupt else []))).load(uris)
    return project(df, {f.name.lower(): f.name for f in out}, out, corrupt, layout_metadata("json", options))


def _nested_extras(declared: Any, inferred: Any, prefix: str) -> list[str]:
    """Paths of fields inside structs (and arrays or maps of structs) that ``inferred``
    holds and ``declared`` lacks."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(declared, StructType) and isinstance(inferred, StructType):
        have = {f.name: f for f in declared.fields}
        out: list[str] = []
        for f in inferred.fields:
            if f.name not in have:
                out.append(f"{prefix}.{f.name}")
            else:
                out += _nested_extras(have[f.name].dataType, f.dataType, f"{prefix}.{f.name}")
        return out
    if isinstance(declared, ArrayType) and isinstance(inferred, ArrayType):
        return _nested_extras(declared.elementType, inferred.elementType, f"{prefix}[]")
    if isinstance(declared, MapType) and isinstance(inferred, MapType):
        return _nested_extras(declared.valueType, inferred.valueType, f"{prefix}{{}}")
    return []


# -- Parquet -------------------------------------------------------------------------------
def _parquet_columns(path: str, label: str, files: LandingFiles) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return list(pq.read_schema(files.readable(path)).names)
    except (OSError, pa.ArrowException) as exc:
        raise MalformedInputError(
            label, f"{path} is not a readable Parquet file ({exc}); nothing was committed. Replace the file"
        ) from exc


def _read_parquet(
    spark: SparkSession,
    reader: DataFrameReader,
    label: str,
    paths: list[str],
    declared: StructType | None,
    options: Mapping[str, str],
    schema_drift: str,
    files: LandingFiles,
) -> DataFrame:
    from pyspark.sql.types import StructType

    footers = {p: _parquet_columns(p, label, files) for p in paths}
    uris = [files.spark_path(p) for p in paths]
    if declared is None:
        shapes = {frozenset(n.lower() for n in cols) for cols in footers.values()}
        if len(shapes) > 1 and "mergeschema" not in options:
            # Spark would take one file's footer for all and drop the others' columns.
            reader = reader.option("mergeSchema", "true")
        return reader.load(uris)
    names = {f.name.lower() for f in declared.fields}
    lacking = [
        f"{p} lacks column {f.name}"
        for p, cols in footers.items()
        for f in declared.fields
        if f.name.lower() not in {c.lower() for c in cols}
    ]
    if lacking:
        # Spark would read the missing column as null in every row of those files.
        raise SchemaMismatchError(
            label,
            problem_message(
                "Parquet files lack columns the schema declares",
                lacking,
                ["Fix the files, or drop the column from the schema"],
            ),
        )
    carriers: dict[str, list[str]] = {}  # lower-case new column -> files that carry it
    for p, cols in footers.items():
        for c in cols:
            if c.lower() not in names:
                carriers.setdefault(c.lower(), []).append(p)
    if not carriers:
        return reader.schema(declared).load(uris)
    holders = sorted({p for held in carriers.values() for p in held})
    merged = (
        spark.read.format("parquet")
        .option("mergeSchema", "true")
        .load([files.spark_path(p) for p in holders])
    )
    extras = [f for f in merged.schema.fields if f.name.lower() in carriers]
    if schema_drift != SCHEMA_ADD_COLUMNS:
        problems = [
            f"{', '.join(carriers[f.name.lower()][:NAMED])} carry column {f.name} "
            f"({f.dataType.simpleString()})"
            for f in extras
        ]
        raise SchemaMismatchError(
            label,
            problem_message(
                "the Parquet files carry columns the schema does not declare", problems, [drift_hint("")]
            ),
        )
    return reader.schema(StructType(list(declared.fields) + extras)).load(uris)
