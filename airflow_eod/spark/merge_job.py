"""The merge load in the Spark driver (delta-rs engine): fold a batch into the table by its
business key, newest row wins, in one commit with the batch's marker and manifest.

Spark computes the merge; airflow-eod commits it (copy-on-write):

1. the batch's rows are reduced to the newest per key (:func:`newest_per_key`);
2. the live files that may hold the batch's keys are found from the snapshot's statistics
   (:class:`~airflow_eod.core.merge_files.KeyProbe`), read, and folded with the batch
   (:func:`fold`): a batch row replaces a key's rows only when its ordering value is
   greater than theirs (ties: greater or equal in a restatement);
3. the result is staged in the attempt's directory like any batch, and the commit removes
   exactly the files read and adds the staged ones, marker and manifest included
   (:func:`airflow_eod.core.load_commit.commit_batch` with a
   :class:`~airflow_eod.core.merge_files.MergeBase`). If another writer changed those files,
   or added one that may hold a batch key, after the read, the commit is refused and the
   merge computed again from the new snapshot.
"""

from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from airflow_eod.core.ask import BatchStatus
from airflow_eod.core.delta import compat as table_compat
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import (
    BatchError,
    BatchRefusedError,
    MalformedInputError,
    UnsafePathError,
)
from airflow_eod.core.faults import fault_point
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.merge_files import (
    KeyProbe,
    MergeBase,
    MergeConflict,
    file_id,
    merge_live_files,
    refuse_deletion_vectors,
    refuse_paths_outside,
)
from airflow_eod.core.merge_rules import MANIFEST_ENTRY, MergeRules
from airflow_eod.core.planlog.restatement import refreeze_hint
from airflow_eod.core.replaced_files import partition_string, refuse_append_only
from airflow_eod.core.table_layout import attempt_dir
from airflow_eod.spark.merge_digest import write_key_digest
from airflow_eod.spark.staging import spark_uri, stage_dataframe

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from airflow_eod.core.planlog.store import Plan
    from airflow_eod.core.source import ReadContext, Source
    from airflow_eod.spark.load_spec import LoadSpec

log = logging.getLogger(__name__)

# Rounds of "read, fold, stage, lose to another writer" before the attempt gives up.
MAX_MERGE_ROUNDS = 8
# Above this many distinct keys the batch's keys are not collected to rule files out by
# their statistics: every live file is read (a batch that large rewrites most files anyway).
MAX_PROBE_KEYS = 20_000_000
_RANK = "_eod_rank"
_SRC = "_eod_src"
_FILE = "_eod_file"


def is_delete(rules: MergeRules) -> Column:
    """True for a row that deletes its key (``delete_when``; a null counts as false)."""
    from pyspark.sql import functions as F

    if rules.delete_when is None:
        return F.lit(False)
    return F.coalesce(F.expr(rules.delete_when), F.lit(False))


def check_batch(df: DataFrame, rules: MergeRules, label: str, refreeze: str | None = None) -> None:
    """Refuse a batch whose rows lack a merge column, or hold a null key or ordering value:
    which row is newest cannot be decided for them, and no retry changes that.

    :param refreeze: how to re-freeze the batch (:func:`~airflow_eod.core.planlog.restatement.refreeze_hint`):
        a source fixed after planning no longer matches the frozen batch, so a plain retry
        fails on the changed input (I3); the message names the re-freeze instead.
    """
    from pyspark.sql import functions as F

    missing = [c for c in (*rules.keys, rules.order_by) if c not in df.columns]
    if missing:
        raise BatchRefusedError(
            label,
            f"the batch has no column {', '.join(missing)} (merge_keys/order_by); its columns: {df.columns}",
        )
    _check_delete_when(df, rules, label)
    nulls = F.lit(False)
    for c in (*rules.keys, rules.order_by):
        nulls = nulls | F.col(c).isNull()
    bad = df.where(nulls).count()
    if bad:
        raise MalformedInputError(
            label,
            f"{bad} row(s) of the batch have a null in {', '.join((*rules.keys, rules.order_by))} "
            "(merge_keys or order_by), so which row of the key is newest cannot be decided; "
            "nothing was committed. Filter those rows in a transform and retry, or fix them in the "
            "source and re-freeze the batch (its frozen input changes with the fix, so a plain retry "
            f"fails on it){': ' + refreeze if refreeze else ''}",
        )


def _check_delete_when(df: DataFrame, rules: MergeRules, label: str) -> None:
    """Refuse a ``delete_when`` that is not a condition on the batch's columns. Spark would
    fail on an unknown column only while it merges, an error the task retries as if it could
    pass, and a non-boolean value cast to boolean deletes by accident or not at all."""
    if rules.delete_when is None:
        return
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    try:
        kind = df.select(F.expr(rules.delete_when)).schema.fields[0].dataType
    except AnalysisException as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise BatchRefusedError(
            label,
            f"delete_when {rules.delete_when!r} cannot be evaluated on the batch's columns "
            f"{df.columns} ({first}); nothing was committed. Correct it in the DAG",
        ) from exc
    if not isinstance(kind, BooleanType):
        raise BatchRefusedError(
            label,
            f"delete_when {rules.delete_when!r} is a {kind.simpleString()}, not a condition; nothing "
            "was committed. Use a boolean column or a condition, e.g. \"op = 'D'\" or "
            '"deleted_at IS NOT NULL"',
        )


def _col(name: str) -> Column:
    """The column ``name``, quoted: a table column may be called ``a.b`` (Spark would read
    an unquoted one as field ``b`` of a struct ``a``)."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def _holds_map(kind: Any) -> bool:
    """Whether the type ``kind`` is or holds a map (in a struct field or an array element)."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(kind, MapType):
        return True
    if isinstance(kind, ArrayType):
        return _holds_map(kind.elementType)
    if isinstance(kind, StructType):
        return any(_holds_map(f.dataType) for f in kind.fields)
    return False


def _row_hash(df: DataFrame) -> Column:
    """A hash of a row's content over its columns in name order: the tie-break between rows
    of one key with one ordering value, the same for a row however it reached Spark (a batch
    aligned to the table's columns, or the table's file)."""
    from pyspark.sql import functions as F

    types = {f.name: f.dataType for f in df.schema.fields}
    # xxhash64 takes any type but one that is or holds a map (a struct field, an array
    # element): such a column is hashed through its JSON.
    cols = [F.to_json(_col(c)) if _holds_map(types[c]) else _col(c) for c in sorted(types)]
    return F.xxhash64(*cols)


def newest_per_key(df: DataFrame, rules: MergeRules) -> DataFrame:
    """One row per key: the greatest ordering value; a tie is broken by a hash of the rows'
    content (64 bits: distinct rows of one key and one ordering value that collide in it,
    about one in 10^19, are the only pair no rule orders), so that every attempt of the
    batch keeps the same row."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    window = Window.partitionBy(*rules.keys).orderBy(F.col(rules.order_by).desc(), _row_hash(df).desc())
    return df.withColumn(_RANK, F.row_number().over(window)).where(F.col(_RANK) == 1).drop(_RANK)


def _aligned(df: DataFrame, fields: list[Any]) -> DataFrame:
    """``df`` with exactly ``fields`` (name and type), in their order; a missing one null."""
    from pyspark.sql import functions as F

    have = set(df.columns)
    return df.select(
        *[(_col(f.name) if f.name in have else F.lit(None)).cast(f.dataType).alias(f.name) for f in fields]
    )


def fold(table_rows: DataFrame, batch_rows: DataFrame, rules: MergeRules, *, ties_win: bool) -> DataFrame:
    """The rows that replace ``table_rows`` (the files the merge rewrites) once the batch's
    newest rows per key (``batch_rows``) are folded in by the ordering rule.

    Each key of the batch ends with one row: the newest of its table rows and its batch row
    by the ordering value (a table row without one is older than any). Equal values: the row
    with the greater content hash, whichever arrived first, so that batches commute; in a
    restatement (``ties_win``) the restated row wins a tie instead. A merge table holds one
    row per key, but another writer's plain append may have added a second row of a key
    (every file that may hold a batch key is read): the merge leaves the key's newest, not
    both. The table rows of other keys stay as they are.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys, order = list(rules.keys), rules.order_by
    have = set(table_rows.columns)
    fields = [*table_rows.schema.fields, *[f for f in batch_rows.schema.fields if f.name not in have]]
    table_rows, batch_rows = _aligned(table_rows, fields), _aligned(batch_rows, fields)
    batch_keys = batch_rows.select(*keys)
    untouched = table_rows.join(batch_keys, keys, "left_anti")
    touched = table_rows.join(batch_keys, keys, "left_semi")
    candidates = touched.withColumn(_SRC, F.lit(0)).unionByName(batch_rows.withColumn(_SRC, F.lit(1)))
    # The hash is taken over the aligned columns, as the row will read back from the table.
    content = _row_hash(table_rows)
    ranking = [F.col(order).desc_nulls_last(), F.col(_SRC).desc(), content.desc()]
    if not ties_win:
        # The source decides only between identical rows (equal hashes): the batch's, so that
        # a deleting row removes the key below.
        ranking = [ranking[0], ranking[2], ranking[1]]
    window = Window.partitionBy(*keys).orderBy(*ranking)
    newest = candidates.withColumn(_RANK, F.row_number().over(window)).where(F.col(_RANK) == 1)
    if rules.delete_when is not None and not rules.keep_tombstones:
        # A winning delete of the batch takes the key out and leaves no row behind.
        newest = newest.where(~(is_delete(rules) & (F.col(_SRC) == 1)))
    return untouched.unionByName(newest.drop(_RANK, _SRC))


def _probe(batch_rows: DataFrame, rules: MergeRules, distinct_keys: int) -> KeyProbe:
    column = rules.keys[0]
    if distinct_keys > MAX_PROBE_KEYS:
        return KeyProbe.of(column, None)
    values = batch_rows.select(column).toArrow().column(0).to_pylist()
    return KeyProbe.of(column, values)


def _file_uri(spark_root: str, log_path: str) -> str:
    return f"{spark_root.rstrip('/')}/{unquote(log_path)}"


def read_files(
    batch_rows: DataFrame,
    spec: LoadSpec,
    schema_json: str,
    partition_columns: list[str],
    files: list[dict[str, Any]],
) -> DataFrame:
    """The rows of the live ``files`` (snapshot entries), with their partition values from
    the log, in the table's schema."""
    from pyspark.sql.types import StructType

    spark = batch_rows.sparkSession
    schema = StructType.fromJson(json.loads(schema_json))
    if not files:
        return spark.createDataFrame([], schema)
    data_schema = StructType([f for f in schema.fields if f.name not in partition_columns])
    root = spark_uri(batch_rows, spec.table, spec.table.location)
    uris = [_file_uri(root, a["log_path"]) for a in files]
    rows = spark.read.schema(data_schema).parquet(*uris)
    if partition_columns:
        rows = _with_partition_values(rows, files, schema, partition_columns)
    return rows.select(*[_col(f.name) for f in schema.fields])


def _with_partition_values(
    rows: DataFrame, files: list[dict[str, Any]], schema: Any, partition_columns: list[str]
) -> DataFrame:
    """``rows`` with the partition columns of each row's file, as the log states them (a
    file's folder name is a writer's choice; its ``add`` action is the table's word)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    spark = rows.sparkSession
    rows = rows.withColumn(_FILE, F.col("_metadata.file_path"))
    by_path = {unquote(a["log_path"]): a for a in files}
    mapping = []
    for r in rows.select(_FILE).distinct().collect():
        spark_path = unquote(urlparse(r[0]).path)
        # The longest live path the one Spark read ends with: "a/x.parquet" and
        # "b/a/x.parquet" may both be live, and Spark's "/t/b/a/x.parquet" is the second.
        found = [p for p in by_path if spark_path.endswith("/" + p)]
        if not found:
            raise BatchError(None, f"cannot tell which live file Spark read as {r[0]}")
        values = by_path[max(found, key=len)].get("partition_values") or {}
        mapping.append([r[0], *[partition_string(values.get(c)) for c in partition_columns]])
    fields = [
        StructField(_FILE, StringType()),
        *[StructField(f"_eod_p{i}", StringType()) for i in range(len(partition_columns))],
    ]
    table = spark.createDataFrame(mapping, StructType(fields))
    types = {f.name: f.dataType for f in schema.fields}
    joined = rows.join(F.broadcast(table), _FILE, "left")
    for i, c in enumerate(partition_columns):
        joined = joined.withColumn(c, F.col(f"_eod_p{i}").cast(types[c]))
    return joined


def merge_batch(
    df: DataFrame,
    spec: LoadSpec,
    plan: Plan,
    manifest: Manifest,
    source: Source,
    ctx: ReadContext,
    rules: MergeRules,
    partition_by: list[str],
) -> tuple[bool, BatchStatus]:
    """Merge ``df`` (the batch, transformed) into the table as ``plan``'s batch, unless the
    table already holds it: :func:`airflow_eod.spark.load_job._write`'s merge branch."""
    from pyspark import StorageLevel

    batch = plan.key
    label = batch.label
    check_batch(df, rules, label, refreeze_hint(plan.pipeline_id, plan.batch_key))
    batch_rows = newest_per_key(df, rules).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        rows = batch_rows.count()
        probe = _probe(batch_rows, rules, rows)
        # The batch's keys for verify, written before the commit that names them.
        digest = write_key_digest(batch_rows, rows, spec, rules, is_delete(rules))
        restated = spec.restate or spec.generation > 0
        for round_no in range(1, MAX_MERGE_ROUNDS + 1):
            table = open_table(spec.table)
            if table is None:
                base = MergeBase(None, set(), [], probe)
                merged = (
                    batch_rows
                    if rules.keep_tombstones
                    else fold(batch_rows.limit(0), batch_rows, rules, ties_win=True)
                )
            else:
                refuse_append_only(table, label)
                # Before the fold aligns the batch to the table's types: a type that differs
                # is refused here, never cast (a string into an integer column reads null).
                table_compat.check_schema(
                    table, batch_rows.schema.json(), partition_by, label, spec.settings.schema_drift
                )
                snapshot = table.snapshot()
                live = merge_live_files(spec.table, snapshot)
                rewritten = [a for a in live if probe.may_hold(a)]
                refuse_deletion_vectors(rewritten, label)
                refuse_paths_outside(rewritten, label)
                meta = table.metadata()
                base = MergeBase(table.version(), {file_id(a) for a in live}, rewritten, probe)
                table_rows = read_files(
                    batch_rows, spec, meta.schema_string, list(meta.partition_columns), rewritten
                )
                merged = fold(table_rows, batch_rows, rules, ties_win=restated)
            log.info(
                "batch %s: merging %d row(s) by %s into %s of the table's live files (round %d)",
                label,
                rows,
                list(rules.keys),
                len(base.rewritten) if table is not None else "none",
                round_no,
            )
            staged = stage_dataframe(
                merged, spec.table, batch, spec.generation, spec.attempt_id, partition_by
            )
            source.verify(plan, ctx)  # an input that changed while Spark read it fails here
            fault_point("after_stage")
            extra = {
                **manifest.extra,
                MANIFEST_ENTRY: {
                    **rules.to_dict(),
                    "batch_rows": rows,
                    "rewritten_files": len(base.rewritten),
                    **digest,
                },
            }
            try:
                return commit_batch(
                    spec.table,
                    batch,
                    spec.generation,
                    staged,
                    replace(manifest, rows=rows, files=len(staged.files), extra=extra),
                    table_configuration=spec.settings.table_configuration,
                    schema_policy=spec.settings.schema_drift,
                    merge=base,
                )
            except MergeConflict as exc:
                log.info("batch %s: %s; computing the merge again", label, exc.cause)
                try:
                    spec.table.storage().delete_prefix(attempt_dir(batch, spec.generation, spec.attempt_id))
                except (UnsafePathError, OSError):
                    pass
                time.sleep(random.uniform(0, 0.05 * round_no))
        raise BatchError(
            label,
            f"gave up after {MAX_MERGE_ROUNDS} merge rounds lost to other writers of the same files; "
            "nothing was committed, the next attempt merges again",
        )
    finally:
        batch_rows.unpersist()
