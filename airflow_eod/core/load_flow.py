"""The load flow every caller shares: freeze the batch, ask the table, and only then run it.

Operators (local or submit mode), the benchmarks and the tests call :func:`load_batch`.
It plans (or finds the run's existing plan), decides a restatement, and answers a run
with nothing new or a batch the table already holds **before** anything starts a JVM or a
Spark application: a retry of a committed batch costs an ask, not a SparkSession. Only a
"no" reaches ``run``, the step that reads and writes (in-process Spark, or a driver
submitted to a cluster).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from airflow_eod.core.ask import BatchStatus, ask
from airflow_eod.core.attempt import attempt, same_attempt
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import BatchError, ConfigurationError, InputChangedError
from airflow_eod.core.faults import fault_point
from airflow_eod.core.planlog.restatement import plan_restatement, refreeze_restatement
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.planner import own_files
from airflow_eod.core.result import (
    ALREADY_COMMITTED,
    COMMITTED,
    NO_NEW_DATA,
    LoadResult,
    result_from_status,
)
from airflow_eod.core.storage import requests_logged
from airflow_eod.core.table_ref import TableRef

if TYPE_CHECKING:
    from airflow_eod.core.source import ReadContext, Source

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadRequest:
    """What a run asks to load, from its identity alone (nothing about how it runs).

    :param table: the target Delta table.
    :param pipeline_id: the dedup namespace.
    :param run_token: a stable identity of the DAG run, the same for all its tries.
    :param interval: the run's data interval, for interval boundaries.
    :param restate: re-load the batch on purpose as a new generation.
    :param restate_batch_key: the batch to restate (default: this run's own batch).
    :param try_number: the attempt's try number (fault points armed for one try read it
        through :mod:`airflow_eod.core.attempt`).
    """

    table: TableRef
    pipeline_id: str
    run_token: str
    interval: tuple[datetime, datetime] | None = None
    restate: bool = False
    restate_batch_key: str | None = None
    try_number: int | None = None


@dataclass(frozen=True)
class FrozenBatch:
    """A batch frozen in the plan log that the table does not hold yet: what ``run`` loads.

    :param plan: the frozen plan, at the generation to commit.
    :param restate: replace whatever the table holds of the batch, in the same commit.
    :param previous_generation: the generation a restatement replaces.
    """

    plan: Plan
    restate: bool = False
    previous_generation: int | None = None


Run = Callable[[FrozenBatch], LoadResult]
# Finishing touches for a batch found committed (a crash may have cut them off): the
# quarantine outbox and the cleanup of other attempts' files. Neither needs Spark.
Settle = Callable[[BatchStatus], None]


def _restated(
    request: LoadRequest, plan_log: PlanLog, plan: Plan, source: Source, ctx: ReadContext
) -> tuple[Plan, int | None]:
    """The plan of this run's restatement (a committed batch) or re-freeze (a batch the
    table never committed): a new generation frozen from the source as it is now."""
    previous = ask(request.table, plan.key).committed_generation
    committed = previous is not None

    def replan(p: Plan, g: int) -> Plan:
        return source.replan(p, g, ctx, committed=committed)

    restated = own_files(
        plan_log,
        plan_restatement(
            plan_log, plan, run_token=request.run_token, committed_generation=previous, replan=replan
        ),
    )
    if not ask(request.table, restated.key, restated.generation).committed:
        try:
            source.verify(restated, ctx)
        except InputChangedError as exc:
            # An earlier try of this run froze the restatement, failed, and the source was
            # fixed since: the run's purpose is the source as it is now, so re-freeze it.
            log.warning("batch %s: %s", restated.key, exc.cause)
            restated = own_files(
                plan_log,
                refreeze_restatement(plan_log, restated, run_token=request.run_token, replan=replan),
            )
    log.info(
        "batch %s: %s generation %s as generation %d",
        restated.key,
        "restating" if committed else "re-freezing (never committed)",
        previous if committed else plan.generation,
        restated.generation,
    )
    return restated, previous


def freeze(request: LoadRequest, source: Source, ctx: ReadContext) -> FrozenBatch | LoadResult | BatchStatus:
    """Freeze the run's batch. Returns the :class:`LoadResult` of a run with nothing new,
    the :class:`BatchStatus` of a batch the table already holds, or the batch to load."""
    table = request.table
    with requests_logged(None if table.is_local else table.storage(), log, "planning", request.pipeline_id):
        return _freeze(request, source, ctx)


def _freeze(request: LoadRequest, source: Source, ctx: ReadContext) -> FrozenBatch | LoadResult | BatchStatus:
    # Planning writes the plan log beside the table: refuse a path that is a file or another
    # system's directory before anything is written into it.
    open_table(request.table)
    plan_log = PlanLog(request.table, request.pipeline_id)
    named = (request.restate_batch_key or "").strip() if request.restate else ""
    if named:
        found = plan_log.get_plan(named)
        if found is None:
            raise ConfigurationError(
                f"restate_batch_key {named!r}: pipeline {request.pipeline_id} has no such batch in "
                "its plan log; `airflow-eod status TABLE` lists the batch keys"
            )
        plan: Plan | None = plan_log.check_source(found, source.identity())
    else:
        plan = source.plan(
            plan_log,
            ctx,
            run_token=request.run_token,
            is_committed=lambda key: ask(request.table, key).committed,
            interval=request.interval,
        )
    if plan is None and request.restate:
        # A person asked for a restatement: a quiet no_new_data would read as done.
        raise ConfigurationError(
            f"pipeline {request.pipeline_id}: restate=True, but this run has no batch to restate "
            "and nothing was restated: without restate_batch_key a restatement restates this "
            "run's own batch, and this run planned none (the source holds nothing new). Name "
            "the batch with restate_batch_key (`airflow-eod status TABLE` lists the batch keys)"
        )
    if plan is None:
        log.info("pipeline %s: the source holds nothing new; nothing to load", request.pipeline_id)
        return LoadResult(request.pipeline_id, None, None, None, 0, 0, NO_NEW_DATA, request.table.location)
    previous: int | None = None
    if request.restate:
        plan, previous = _restated(request, plan_log, plan, source, ctx)
    fault_point("after_plan")
    status = ask(request.table, plan.key, plan.generation)
    if status.committed:
        log.info(
            "batch %s: already committed (generation %s, table version %s); writing nothing",
            plan.key,
            status.committed_generation,
            status.table_version,
        )
        return status
    log.info(
        "batch %s: generation %d, %d input(s), fingerprint %s; the table does not hold it yet",
        plan.key,
        plan.generation,
        len(plan.inputs),
        plan.input_fingerprint[:12],
    )
    return FrozenBatch(plan, request.restate, previous)


def load_batch(
    request: LoadRequest, source: Source, ctx: ReadContext, *, run: Run, settle: Settle | None = None
) -> LoadResult:
    """Load the run's batch exactly once; the one entry point of every load.

    :param request: what the run asks to load.
    :param source: the source.
    :param ctx: the context the source plans and verifies with (its SparkSession is made
        only if planning needs one: a JDBC head query; never for a retry of a planned batch).
    :param run: reads and writes a :class:`FrozenBatch` and returns the result the table
        stands behind; called only when the table does not hold the batch.
    :param settle: finishing touches for a batch found committed.
    """
    with attempt(request.try_number):  # the try the fault points read, for the whole load
        return _load_batch(request, source, ctx, run=run, settle=settle)


def _load_batch(
    request: LoadRequest, source: Source, ctx: ReadContext, *, run: Run, settle: Settle | None
) -> LoadResult:
    frozen = freeze(request, source, ctx)
    if isinstance(frozen, LoadResult):
        result = frozen
    elif isinstance(frozen, BatchStatus):
        if settle is not None:
            settle(frozen)
        result = result_from_status(request.table, frozen, ALREADY_COMMITTED)
    else:
        result = run(frozen)
    if "null_key_rows" in ctx.facts:  # counted at planning (a keyed source)
        result = replace(result, null_key_rows=int(ctx.facts["null_key_rows"]))
    return result


def decide_submitted(
    ref: TableRef,
    frozen: FrozenBatch,
    attempt_id: str,
    error: BaseException | None,
    driver_error: Exception | None = None,
) -> tuple[LoadResult, BatchStatus]:
    """The decide step of a load run by another process (spark-submit): whatever it
    returned, the table says what happened. ``committed`` when this attempt's manifest
    landed, ``already_committed`` when another attempt's did.

    :param error: what the submission raised (spark-submit's exit), if anything.
    :param driver_error: the error the driver itself reported, with its own type.
    :raises BatchError: the table does not hold the batch: ``driver_error`` when the driver
        said why, otherwise an error naming ``error``.
    """
    status = ask(ref, frozen.plan.key, frozen.plan.generation)
    if not status.committed and driver_error is not None:
        raise driver_error from error
    if not status.committed:
        cause = "the driver ended without committing it" if error is None else f"{error}".strip()
        first = cause.splitlines()[0] if cause else type(error).__name__
        raise BatchError(
            frozen.plan.key.label, f"the submitted load did not commit, and nothing was committed: {first}"
        ) from error
    # The driver's own commit, or that of the cluster's re-run of the same driver (YARN).
    ours = status.manifest is not None and same_attempt(status.manifest.attempt_id, attempt_id)
    if error is not None:
        log.warning(
            "batch %s: the submitted load failed (%s), but the table holds the batch", frozen.plan.key, error
        )
    return result_from_status(ref, status, COMMITTED if ours else ALREADY_COMMITTED), status
