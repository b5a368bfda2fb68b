"""The load job: what runs in the Spark driver for one batch, locally or under spark-submit.

It takes its frozen plan (a :class:`~airflow_eod.spark.load_spec.LoadSpec`), asks the table,
reads exactly the planned slice, writes it, commits it with its marker, and returns a result
that the table, not the exit code, stands behind. :mod:`airflow_eod.spark.driver` is the
spark-submit entrypoint around it.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from airflow_eod.core.ask import BatchStatus, ask, ask_table
from airflow_eod.core.attempt import attempt
from airflow_eod.core.delta import compat as table_compat
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import (
    BatchError,
    ConfigurationError,
    EodError,
    InputChangedError,
    MalformedInputError,
    UnsafePathError,
)
from airflow_eod.core.faults import fault_point
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.planlog.retention import check_retention
from airflow_eod.core.planlog.store import Plan
from airflow_eod.core.quarantine_outbox import deliver_outbox, with_outbox
from airflow_eod.core.replaced_files import refuse_append_only, refuse_replacing_a_merge
from airflow_eod.core.result import (
    ALREADY_COMMITTED,
    COMMITTED,
    LoadResult,
    decide_after_failure,
    result_from_status,
)
from airflow_eod.core.settle import settle_committed
from airflow_eod.core.table_layout import attempt_dir
from airflow_eod.sources import Credentials, ReadContext, Source
from airflow_eod.spark import jvm_log
from airflow_eod.spark.bad_records import MalformedSplit, single_pass, split_malformed
from airflow_eod.spark.load_spec import LoadSpec
from airflow_eod.spark.quarantine import stage_outbox
from airflow_eod.spark.readers import read_batch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

Transform = Callable[["DataFrame"], "DataFrame"]


# What an InputChangedError of the delta-spark engine adds to the source's way out.
DELTA_SPARK_REFREEZE = (
    "But engine='delta-spark' cannot re-freeze a batch (it refuses restate, in the DAG and in "
    "dag_run.conf alike): run that re-freeze with engine='delta-rs' set on the task (a DAG "
    "change; a pipeline may switch engines between runs, docs/guarantee.md), then set "
    "engine='delta-spark' back for the runs after it"
)


def resolve_transform(path: str) -> Transform:
    """Import ``"package.module:function"`` (or ``package.module.function``)."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigurationError(f"transform {path!r} cannot be imported: {exc}") from exc
    if not callable(fn):
        raise ConfigurationError(f"transform {path!r} is not callable")
    return fn  # type: ignore[no-any-return]


def _partitioning(spec: LoadSpec) -> list[str]:
    """The partition columns to stage with: the table's own once it exists. Staging files
    unpartitioned into a partitioned table would commit rows whose partition column reads
    back as null; a ``partition_by`` that disagrees with the table fails the schema check."""
    table = open_table(spec.table)
    if table is None or not table.metadata().partition_columns:
        return list(spec.settings.partition_by)
    return list(spec.settings.partition_by) or list(table.metadata().partition_columns)


def _write(
    spark_df: DataFrame,
    spec: LoadSpec,
    plan: Plan,
    manifest: Manifest,
    source: Source,
    ctx: ReadContext,
    split: MalformedSplit,
) -> tuple[bool, BatchStatus]:
    """Stage and commit ``spark_df``. A staging write that fails is explained by ``split``
    (malformed records, for a batch read FAILFAST) before it is raised."""
    batch = plan.key
    rules = spec.settings.merge
    if rules is not None and spec.settings.engine == "delta-rs":
        from airflow_eod.spark.merge_job import merge_batch

        return merge_batch(spark_df, spec, plan, manifest, source, ctx, rules, _partitioning(spec))
    if rules is not None:
        from airflow_eod.spark.delta_spark_merge import merge_with_delta_spark

        return merge_with_delta_spark(spark_df, spec, plan, manifest, source, ctx, rules)
    if spec.settings.engine == "delta-spark":
        from airflow_eod.spark.delta_spark_engine import write_with_delta_spark

        manifest = replace(manifest, rows=spark_df.count())
        # Delta Spark commits inside its write: the last moment to find a change is now (the
        # rows of a JDBC batch are already read and kept, see jdbc_reader.read_jdbc_batch).
        source.verify(plan, ctx)
        return write_with_delta_spark(
            spark_df,
            spec.table,
            batch,
            spec.generation,
            manifest,
            list(spec.settings.partition_by),
            table_configuration=dict(spec.settings.table_configuration),
            schema_policy=spec.settings.schema_drift,
        )
    from airflow_eod.spark.staging import stage_dataframe

    # A FAILFAST write that meets a malformed record fails the expected way: Spark's stack
    # traces (and its advice to read PERMISSIVE) are held, and go to debug if it does.
    expected_failure = split.reread is not None
    with jvm_log.held(spark_df.sparkSession if expected_failure else None) as hold:
        try:
            staged = stage_dataframe(
                spark_df, spec.table, batch, spec.generation, spec.attempt_id, _partitioning(spec)
            )
        except Exception as exc:
            # What the failed write's tasks left goes now: only this attempt writes its
            # directory and nothing will commit it, and a refused batch may never reach the
            # batch's cleanup.
            try:
                spec.table.storage().delete_prefix(attempt_dir(batch, spec.generation, spec.attempt_id))
            except (UnsafePathError, OSError):
                pass  # a link leads out of the table: nothing was written there, nothing is removed
            try:
                split.explain_failure(exc)  # malformed records stopped a FAILFAST write: say which
            except MalformedInputError:
                hold.quiet = True
                raise
            raise
    source.verify(plan, ctx)  # an input that changed while Spark read it fails here
    fault_point("after_stage")
    return commit_batch(
        spec.table,
        batch,
        spec.generation,
        staged,
        replace(manifest, rows=staged.rows, files=len(staged.files)),
        table_configuration=spec.settings.table_configuration,
        replace_previous=spec.restate,
        schema_policy=spec.settings.schema_drift,
    )


def run_load(
    spark: SparkSession,
    spec: LoadSpec,
    transform: Transform | None = None,
    credentials: Credentials | None = None,
) -> LoadResult:
    """Load the planned batch of ``spec`` exactly once.

    :param spark: the driver's SparkSession.
    :param spec: the load, as data.
    :param transform: a callable that overrides ``spec.settings.transform`` (local mode only).
    :param credentials: the source's credentials (never part of ``spec``).
    """
    # The try the fault points read and the id every body carries, in this process: a
    # submitted driver's attempt is the one that built its spec.
    with attempt(spec.settings.try_number, spec.attempt_id):
        return _run_load(spark, spec, transform, credentials)


def _run_load(
    spark: SparkSession,
    spec: LoadSpec,
    transform: Transform | None,
    credentials: Credentials | None,
) -> LoadResult:
    plan = spec.plan
    batch = plan.key
    source = spec.source
    ctx = ReadContext(
        spark_factory=lambda: spark, credentials=credentials, schema_drift=spec.settings.schema_drift
    )
    table = open_table(spec.table)
    status = ask_table(table, batch, spec.generation)
    if status.committed:
        log.info(
            "batch %s: already committed (generation %s); writing nothing", batch, status.committed_generation
        )
        settle_committed(spec.table, status, spec.quarantine_table)
        return result_from_status(spec.table, status, ALREADY_COMMITTED)
    manifest = Manifest(
        pipeline_id=batch.pipeline_id,
        batch_key=batch.key,
        generation=spec.generation,
        boundary=plan.boundary,
        input_fingerprint=plan.input_fingerprint,
        rows=0,
        files=0,
        attempt_id=spec.attempt_id,
        engine=spec.settings.engine,
        run_id=spec.settings.run_id,
        try_number=spec.settings.try_number,
        previous_generation=spec.previous_generation,
    )
    split: MalformedSplit | None = None
    # The decide step covers the whole attempt: however it fails, the table decides.
    try:
        if table is not None and spec.settings.engine == "delta-rs":
            # A table the engine cannot honour is refused before anything is read or staged.
            table_compat.check_writable(table, spec.table)
            if spec.restate:
                refuse_append_only(table, batch.label)
                if spec.settings.merge is None:
                    refuse_replacing_a_merge(status, batch.label)
        if not spec.restate:
            check_retention(table, plan)
        fault_point("before_write")
        source.verify(plan, ctx)
        fn = transform or (resolve_transform(spec.settings.transform) if spec.settings.transform else None)
        # Read FAILFAST, a batch costs what a plain Spark write of it costs: a malformed
        # record stops the staging write, uncommitted, and only then is the batch read again
        # to count. That needs the write to parse every record and column: a transform may
        # drop columns (whose malformed values Spark's parser then never flags) or run
        # actions of its own; the quarantine needs the bad rows themselves; and delta-spark
        # commits inside its write. Those count up front, over persisted rows.
        # A merge counts and reads its batch before its write: it counts malformed records up front.
        single = spec.settings.engine == "delta-rs" and spec.settings.merge is None
        if fn is None and single and spec.settings.quarantine_table_uri is None:
            fast = replace(ctx, fail_fast=True)
            split = single_pass(
                read_batch(source, plan, fast), batch.label, lambda: read_batch(source, plan, ctx)
            )
        else:
            split = split_malformed(
                read_batch(source, plan, ctx),
                batch.label,
                quarantine=spec.settings.quarantine_table_uri is not None,
            )
        df, bad = split.good, split.bad
        if spec.quarantine_table is not None:
            # Staged, not committed: the rejects ride in the main commit as its outbox.
            outbox = stage_outbox(
                spec.quarantine_table,
                batch,
                spec.generation,
                spec.attempt_id,
                bad,
                replace_previous=spec.restate or spec.generation > 0,
                main=spec.table,
            )
            manifest = with_outbox(manifest, outbox)
        if fn is not None:
            df = fn(df)
        ours, status = _write(df, spec, plan, manifest, source, ctx, split)
    except Exception as exc:
        decided = decide_after_failure(spec.table, batch, spec.generation, exc)
        if decided is not None:
            # A racer (or this attempt, before it failed) committed: its outbox is due too.
            deliver_outbox(spec.table, ask(spec.table, batch, spec.generation), spec.quarantine_table)
            return decided
        if isinstance(exc, InputChangedError) and spec.settings.engine == "delta-spark":
            # The re-freeze the source's message names is a restatement, which this engine
            # refuses: name the way out that works instead of one that is refused next.
            raise InputChangedError(batch.label, f"{exc.cause}. {DELTA_SPARK_REFREEZE}") from exc
        if isinstance(exc, EodError):
            raise
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        raise BatchError(batch.label, f"the load failed and nothing was committed: {first}") from exc
    finally:
        if split is not None:
            split.release()
    fault_point("after_commit")
    settle_committed(spec.table, status, spec.quarantine_table)
    outcome = COMMITTED if ours else ALREADY_COMMITTED
    log.info(
        "batch %s: %s generation %s at table version %s",
        batch,
        outcome,
        status.committed_generation,
        status.table_version,
    )
    return result_from_status(spec.table, status, outcome)
