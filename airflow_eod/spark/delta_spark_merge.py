"""Merge loads on the Delta Spark engine: Delta's own ``MERGE``, made exactly-once.

Why Delta's ``MERGE`` and not the delta-rs engine's copy-on-write commit
(:mod:`airflow_eod.spark.merge_job`): the ``delta-spark`` engine exists for tables that only
Delta Spark writes (deletion vectors, CHECK constraints, generated and identity columns,
column mapping...). A commit made by airflow-eod through delta-rs would refuse those tables,
so Delta Spark must commit. Its ``MERGE`` is made as safe as the copy-on-write path:

- **marker and manifest in the MERGE's commit.** ``MERGE`` takes no writer options: it reads
  the session settings ``spark.databricks.delta.write.txnAppId``/``txnVersion`` (the batch's
  appId at its generation) and ``spark.databricks.delta.commitInfo.userMetadata`` (the
  manifest). They would reach every Delta write of the session, so they are set under one
  process-wide lock around exactly one ``MERGE`` and put back in ``finally``
  (:func:`merge_settings`), with Delta's ``txnVersion.autoReset.enabled`` held off so that a
  re-run of the command (on lost source blocks) keeps the marker. The engine's appends pass
  writer options, which win over the session's.
- **racing attempts end in one commit.** ``MERGE`` reads the appId in its transaction and
  skips when the table holds it; a racer committing it after that read fails the commit
  (``ConcurrentTransactionException``). The table is asked before and after.
- **the delta-rs engine's ordering rule** (:func:`merge_source`): newest row per key in the
  batch; a batch row wins only over the newest of the table's rows of its key (ties win in a
  restatement). ``MERGE`` compares a source row with each matching target row on its own,
  so for a key the table holds several rows of (an appended table) the source carries the
  table's newest ordering value and row count per key, read from the target *inside* the
  ``MERGE`` (Delta plans the source under its transaction: same snapshot, conflict-checked).
  One row: updated in place; several: all deleted and the winner inserted once.
- **another writer in between**: Delta refuses the commit when a concurrent commit changed
  what the MERGE read, and the MERGE runs again (:data:`MAX_MERGE_ROUNDS`). Under Delta's
  default WriteSerializable isolation a concurrent blind append does not conflict: it is
  ordered after the MERGE.

The first key column's range in the batch bounds the MERGE's read of the table (an
``ON`` condition on the target alone), so that Delta can skip files by their statistics.
docs/merge-loads.md ("The delta-spark engine") says the same for users, with deletion vectors.
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from airflow_eod.core.ask import BatchStatus, ask, ask_table
from airflow_eod.core.delta.compat import check_schema, computed_columns
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import BatchError, BatchRefusedError
from airflow_eod.core.faults import fault_point
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.merge_rules import MANIFEST_ENTRY, MergeRules
from airflow_eod.spark.delta_spark_engine import write_with_delta_spark
from airflow_eod.spark.merge_job import check_batch, is_delete, newest_per_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from airflow_eod.core.delta.log import TableLog
    from airflow_eod.core.planlog.store import Plan
    from airflow_eod.core.source import ReadContext, Source
    from airflow_eod.spark.load_spec import LoadSpec

log = logging.getLogger(__name__)

# The session settings Delta's MERGE takes its marker and manifest from.
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
TXN_AUTO_RESET = "spark.databricks.delta.write.txnVersion.autoReset.enabled"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
MERGE_SETTINGS = (TXN_APP_ID, TXN_VERSION, TXN_AUTO_RESET, USER_METADATA)
# Every MERGE of this process sets those settings under this lock, one MERGE at a time.
_SETTINGS_LOCK = threading.Lock()
# Rounds of "MERGE, lose to another writer's commit" before the attempt gives up.
MAX_MERGE_ROUNDS = 8
# How Delta Spark says another commit got in first (the class names and error classes of
# DeltaConcurrentModificationException's subclasses): the merge is run again.
_LOST_RACE = (
    "DELTA_CONCURRENT_",
    "DELTA_METADATA_CHANGED",
    "DELTA_PROTOCOL_CHANGED",
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentWriteException",
    "MetadataChangedException",
    "ProtocolChangedException",
)
# The columns the MERGE's source adds to the batch's rows (never written to the table).
_ERROR_CLASS = re.compile(r"\[[A-Z][A-Z0-9_]{3,}\]")
# Delta's refusals of the batch's data (a CHECK or NOT NULL constraint): no retry changes them.
_REFUSED = ("DELTA_VIOLATE_CONSTRAINT", "DELTA_NOT_NULL_CONSTRAINT_VIOLATED")
_ROLE, _DROP, _ROWS, _NEWEST = "_eod_role", "_eod_drop", "_eod_rows", "_eod_newest"
MATCH, INSERT = "match", "insert"


@contextmanager
def merge_settings(spark: SparkSession, app_id: str, version: int, user_metadata: str) -> Iterator[None]:
    """Hold the process-wide lock, set the MERGE's marker and manifest on the session, and
    put every setting back as it was when the block ends, however it ends."""
    with _SETTINGS_LOCK:
        saved = {key: spark.conf.get(key, None) for key in MERGE_SETTINGS}
        try:
            spark.conf.set(TXN_AUTO_RESET, "false")
            spark.conf.set(TXN_APP_ID, app_id)
            spark.conf.set(TXN_VERSION, str(version))
            spark.conf.set(USER_METADATA, user_metadata)
            yield
        finally:
            for key, value in saved.items():
                if value is None or (key == TXN_AUTO_RESET and value == "false"):
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)


def merge_source(
    batch_rows: DataFrame,
    target: DataFrame,
    rules: MergeRules,
    *,
    ties_win: bool,
) -> DataFrame:
    """The MERGE's source: the batch's winning rows, each once as a ``match`` row (a key the
    table holds: update it in place, or delete all its rows) and once more as an ``insert``
    row where the winner is to be inserted (a new key, or a key whose several rows go).

    :param batch_rows: the batch's newest row per key.
    :param target: the table's rows (read inside the MERGE: its snapshot).
    :param ties_win: a batch row wins a tie of ordering values (a restatement).
    """
    from pyspark.sql import functions as F

    keys, order = list(rules.keys), rules.order_by
    # Quoted: a column may be called ``a.b`` (unquoted, field ``b`` of a struct ``a``) or hold a backtick.
    columns = [F.col(_name(c)) for c in batch_rows.columns]
    seen = target.groupBy(*keys).agg(F.max(order).alias(_NEWEST), F.count(F.lit(1)).alias(_ROWS))
    rows = F.coalesce(F.col(_ROWS), F.lit(0))
    newer = F.col(order) >= F.col(_NEWEST) if ties_win else F.col(order) > F.col(_NEWEST)
    winners = (
        batch_rows.join(seen, keys, "left")
        .where(F.col(_NEWEST).isNull() | newer)
        # A winning delete without tombstones removes the key's rows and is not inserted.
        .withColumn(_DROP, is_delete(rules) & F.lit(not rules.keep_tombstones))
        .withColumn(_ROWS, rows)
    )
    helpers = [F.col(_DROP), F.col(_ROWS)]
    matches = winners.where(F.col(_ROWS) > 0).select(*columns, F.lit(MATCH).alias(_ROLE), *helpers)
    inserts = winners.where((F.col(_ROWS) != 1) & ~F.col(_DROP))
    return matches.unionByName(inserts.select(*columns, F.lit(INSERT).alias(_ROLE), *helpers))


def _name(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"


def merge_statement(
    target: str,
    view: str,
    columns: list[str],
    rules: MergeRules,
    key_range: tuple[str, str] | None,
    *,
    evolve: bool,
) -> str:
    """The ``MERGE`` of the source view ``view`` (:func:`merge_source`) into the table.

    :param target: the table's location, as Spark's ``delta.`...``` names it.

    :param columns: the batch's columns (the ones the MERGE writes; Delta fills the table's
        generated and identity columns itself).
    :param key_range: SQL literals bounding the first key column, or ``None``.
    :param evolve: add the batch's new columns to the table (``schema_drift='add_columns'``).
    """
    on = [f"t.{_name(k)} = s.{_name(k)}" for k in rules.keys] + [f"s.{_ROLE} = '{MATCH}'"]
    if key_range is not None:
        # A condition on the target alone: Delta reads only the files whose statistics fit.
        first = f"t.{_name(rules.keys[0])}"
        on += [f"{first} >= {key_range[0]}", f"{first} <= {key_range[1]}"]
    updates = ", ".join(f"{_name(c)} = s.{_name(c)}" for c in columns)
    names = ", ".join(_name(c) for c in columns)
    values = ", ".join(f"s.{_name(c)}" for c in columns)
    return (
        f"MERGE {'WITH SCHEMA EVOLUTION ' if evolve else ''}INTO delta.{_name(target)} AS t "
        f"USING {view} AS s ON {' AND '.join(on)} "
        f"WHEN MATCHED AND (s.{_ROWS} > 1 OR s.{_DROP}) THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {updates} "
        f"WHEN NOT MATCHED AND s.{_ROLE} = '{INSERT}' THEN INSERT ({names}) VALUES ({values})"
    )


def _literal(value: Any) -> str | None:
    """``value`` as a Spark SQL literal, for the types whose statistics bound a file's keys
    (``None``: not bounded)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, date) and not isinstance(value, datetime):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, str) and value.isprintable() and "'" not in value and "\\" not in value:
        return f"'{value}'"
    return None


def key_range(batch_rows: DataFrame, rules: MergeRules) -> tuple[Any, Any] | None:
    """The batch's least and greatest value of its first key column, when both can be
    written as SQL literals that Delta's file skipping takes; otherwise ``None``."""
    from pyspark.sql import functions as F

    column = rules.keys[0]
    lo, hi = batch_rows.agg(F.min(column), F.max(column)).first() or (None, None)
    if lo is None or _literal(lo) is None or _literal(hi) is None:
        return None
    return lo, hi


def _lost_race(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) is Delta Spark's "another commit got in first"."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return False
        if any(mark in f"{type(seen).__name__}: {seen}" for mark in _LOST_RACE):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _ours(status: BatchStatus, manifest: Manifest) -> bool:
    """Whether the commit ``status`` found is this attempt's (its manifest's attempt id)."""
    return status.manifest is not None and status.manifest.attempt_id == manifest.attempt_id


def _cause(exc: BaseException) -> str:
    """The line of ``exc`` that says what went wrong: the Py4J error's first line is only
    "An error occurred while calling o63.sql"; Delta's own error (an error class in
    brackets) is further down, below Spark's wrappers."""
    lines = [line.strip().removeprefix("Caused by: ") for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    named = [line for line in lines if _ERROR_CLASS.search(line) and not line.startswith("at ")]
    delta = [line for line in named if "delta" in line.split(":", 1)[0].lower()]
    return (delta or named or lines)[0][:500]


def _refuse_append_only(table: TableLog, label: str) -> None:
    if table.metadata().configuration.get("delta.appendOnly", "false").lower() == "true":
        raise BatchRefusedError(
            label,
            "the table is append-only (delta.appendOnly=true): a merge updates and deletes rows; "
            "load it with write_mode='append'",
        )


def run_merge(
    batch_rows: DataFrame,
    spec: LoadSpec,
    rules: MergeRules,
    bounds: tuple[Any, Any] | None,
    manifest: Manifest,
    *,
    ties_win: bool,
    evolve: bool,
) -> None:
    """One ``MERGE`` of the batch into the table, with its marker and manifest, under the
    process-wide lock of the session settings."""
    from pyspark.sql import functions as F

    spark = batch_rows.sparkSession
    path = spec.table.path
    target = spark.read.format("delta").load(path).select(*rules.keys, rules.order_by)
    key_sql = None
    if bounds is not None:
        first = F.col(rules.keys[0])
        target = target.where((first >= F.lit(bounds[0])) & (first <= F.lit(bounds[1])))
        key_sql = (str(_literal(bounds[0])), str(_literal(bounds[1])))
    view = f"_eod_merge_{uuid.uuid4().hex}"
    merge_source(batch_rows, target, rules, ties_win=ties_win).createOrReplaceTempView(view)
    statement = merge_statement(path, view, batch_rows.columns, rules, key_sql, evolve=evolve)
    try:
        with merge_settings(spark, spec.plan.key.app_id, spec.generation, manifest.to_user_metadata()):
            spark.sql(statement).collect()
    finally:
        spark.catalog.dropTempView(view)


def merge_with_delta_spark(
    df: DataFrame,
    spec: LoadSpec,
    plan: Plan,
    manifest: Manifest,
    source: Source,
    ctx: ReadContext,
    rules: MergeRules,
) -> tuple[bool, BatchStatus]:
    """Merge ``df`` (the batch, transformed) into the table through Delta Spark's ``MERGE``
    as ``plan``'s batch, unless the table already holds it:
    :func:`airflow_eod.spark.load_job._write`'s merge branch for ``engine='delta-spark'``.

    :returns: ``(we_committed, status)`` as :func:`airflow_eod.core.load_commit.commit_batch`.
    """
    from pyspark import StorageLevel

    batch = plan.key
    label = batch.label
    check_batch(df, rules, label)
    batch_rows = newest_per_key(df, rules).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        rows = batch_rows.count()
        bounds = key_range(batch_rows, rules)
        entry = {**rules.to_dict(), "batch_rows": rows}
        manifest = replace(manifest, rows=rows, extra={**manifest.extra, MANIFEST_ENTRY: entry})
        # Delta Spark commits inside its MERGE: the last moment to find a changed input is now.
        source.verify(plan, ctx)
        restated = spec.restate or spec.generation > 0
        for round_no in range(1, MAX_MERGE_ROUNDS + 1):
            table = open_table(spec.table)
            before = ask_table(table, batch, spec.generation)
            if before.committed:
                return False, before
            if table is None:
                # No table to merge into: the batch's rows are its first commit (an append).
                first = batch_rows if rules.keep_tombstones else batch_rows.where(~is_delete(rules))
                try:
                    return write_with_delta_spark(
                        first,
                        spec.table,
                        batch,
                        spec.generation,
                        manifest,
                        list(spec.settings.partition_by),
                        table_configuration=dict(spec.settings.table_configuration),
                        schema_policy=spec.settings.schema_drift,
                    )
                except BatchError as exc:
                    if not _lost_race(exc) or round_no == MAX_MERGE_ROUNDS:
                        raise
                    log.info("batch %s: another writer created the table first; merging into it", label)
                    continue
            _refuse_append_only(table, label)
            # Checked here, as for the engine's appends: Delta's own schema evolution would
            # also widen types. Delta Spark fills generated and identity columns itself.
            evolve = (
                check_schema(
                    table,
                    batch_rows.schema.json(),
                    list(spec.settings.partition_by),
                    label,
                    spec.settings.schema_drift,
                    computed=computed_columns(table),
                )
                is not None
            )
            log.info(
                "batch %s: Delta Spark MERGE of %d row(s) by %s (round %d)",
                label,
                rows,
                list(rules.keys),
                round_no,
            )
            fault_point("before_commit")
            try:
                run_merge(batch_rows, spec, rules, bounds, manifest, ties_win=restated, evolve=evolve)
            except Exception as exc:  # Delta's errors arrive as Py4J/Spark errors
                after = ask(spec.table, batch, spec.generation)
                if after.committed:
                    # A racer committed the batch (ConcurrentTransactionException), or the MERGE
                    # did before it raised: the manifest's attempt id says whose commit it is.
                    return _ours(after, manifest), after
                cause = _cause(exc)
                if any(code in str(exc) for code in _REFUSED):
                    raise BatchRefusedError(
                        label, f"Delta Spark's MERGE refused the batch's rows and committed nothing: {cause}"
                    ) from exc
                if not _lost_race(exc):
                    raise BatchError(
                        label, f"Delta Spark's MERGE failed and committed nothing: {cause}"
                    ) from exc
                log.info("batch %s: %s; running the MERGE again", label, cause)
                time.sleep(random.uniform(0, 0.05 * round_no))
                continue
            # Delta Spark has committed (or skipped): a crash from here on leaves a batch that
            # the next ask finds committed, as for the engine's appends.
            fault_point("before_record")
            after = ask(spec.table, batch, spec.generation)
            if not after.committed:
                raise BatchError(
                    label, "Delta Spark's MERGE returned but the table has no marker for the batch"
                )
            return _ours(after, manifest), after
        raise BatchError(
            label,
            f"gave up after {MAX_MERGE_ROUNDS} MERGE rounds lost to other writers' commits; nothing "
            "was committed, the next attempt merges again",
        )
    finally:
        batch_rows.unpersist()
