"""Planning: freezing a batch's boundary in the plan log before anything is written.

Offset batches of a pipeline are planned strictly in sequence: batch N+1 is planned only
once the table says batch N is committed, so every plan older than the newest one is
committed by construction. A DAG run claims the batch it loads, so its retries find that
batch again instead of planning a new one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import BatchRefusedError, ConfigurationError, OverlappingIntervalError
from airflow_eod.core.planlog.intervals import (
    STALE_AFTER_S,
    IntervalIndex,
    Span,
    span_bounds,
    span_of,
    span_text,
)
from airflow_eod.core.planlog.offsets import OffsetHistory
from airflow_eod.core.planlog.restatement import refreeze_hint
from airflow_eod.core.planlog.store import INTERVAL, OFFSETS, Plan, PlanLog
from airflow_eod.core.records.record_files import RecordStore

log = logging.getLogger(__name__)

# Given what earlier batches loaded, return (boundary, inputs) of the next batch, or None
# when the source holds nothing new.
NextOffsets = Callable[[OffsetHistory], "tuple[dict[str, Any], list[dict[str, Any]]] | None"]


def _refuse_mixed_kinds(plan_log: PlanLog, kind: str) -> None:
    """One pipeline slices its source one way: offset batches and interval batches of the
    same source would overlap, and neither kind knows what the other loaded."""
    other = plan_log.boundary_kinds() - {kind}
    if other:
        raise ConfigurationError(
            f"pipeline {plan_log.pipeline_id} already has {other.pop()} batches; it cannot also "
            f"plan {kind} batches (they would load the same data again). Keep the boundary, or "
            "start a new pipeline_id on purpose"
        )


def plan_offset_batch(
    plan_log: PlanLog,
    *,
    run_token: str,
    is_committed: Callable[[BatchKey], bool],
    next_offsets: NextOffsets,
    source: dict[str, Any] | None = None,
) -> Plan | None:
    """The offset batch the run ``run_token`` loads, planned now if it has none yet.

    :param plan_log: the pipeline's plan log.
    :param run_token: a stable identity of the DAG run (the same for all its tries).
    :param is_committed: the ask, for one batch at generation 0.
    :param next_offsets: computes the next batch's frozen offsets from earlier plans.
    :param source: the source's identity; a stored plan of another source is refused.
    :returns: the plan, or ``None`` when there is nothing new to load.
    """
    source = source or {}
    claimed = plan_log.claimed_seq(run_token)
    if claimed is not None:
        plan = plan_log.check_source(plan_log.get_offset_plan(claimed), source)
        log.info("run %s already claimed batch %s; loading that batch again", run_token, plan.key)
        return plan
    _refuse_mixed_kinds(plan_log, OFFSETS)
    history = OffsetHistory.read(plan_log)
    newest = None if history.newest_seq is None else history.plan(history.newest_seq)
    if newest is not None and not is_committed(newest.key):
        # The newest batch is planned but not committed (a crashed run, or one still
        # running): this run loads that same batch, and fencing picks one committer.
        latest = plan_log.check_source(newest, source)
        assert latest.seq is not None
        return plan_log.get_offset_plan(plan_log.claim(run_token, latest.seq))
    if newest is not None and newest.source and source and newest.source != source:
        # An offset pipeline's frontier belongs to its source: another directory or table
        # (a mapped task whose expand list was reordered, an edited path) would be loaded
        # from a frontier that is not its own.
        raise ConfigurationError(
            f"pipeline {plan_log.pipeline_id} loads {json.dumps(newest.source, sort_keys=True)}, "
            f"and this run's source is {json.dumps(source, sort_keys=True)}: an offset pipeline's "
            "frontier belongs to one source. Point the task back at it, or give the new source its "
            "own pipeline_id (mapped tasks: a pipeline_id per mapped value)"
        )
    nxt = next_offsets(history)
    if nxt is None:
        return None
    boundary, inputs = nxt
    seq = 0 if history.newest_seq is None else history.newest_seq + 1
    key = BatchKey.for_offsets(plan_log.pipeline_id, seq, {"boundary": boundary, "inputs": inputs})
    stored = plan_log.put_plan(
        Plan(plan_log.pipeline_id, key.key, OFFSETS, boundary, inputs, seq=seq, source=source)
    )
    if stored.batch_key != key.key:
        log.info("batch %d of %s was planned by a concurrent run; using its plan", seq, plan_log.pipeline_id)
        plan_log.check_source(stored, source)
    assert stored.seq is not None
    return plan_log.get_offset_plan(plan_log.claim(run_token, stored.seq))


def plan_interval_batch(
    plan_log: PlanLog,
    *,
    start: datetime,
    end: datetime,
    inputs: Callable[[], list[dict[str, Any]]],
    source: dict[str, Any] | None = None,
    exclusive: bool = False,
) -> Plan:
    """The plan of the batch bounded by the data interval ``[start, end)``.

    The inputs are listed only the first time; every later attempt gets the stored plan,
    with its files narrowed to those the batch owns (:func:`own_files`).

    :param exclusive: the batch's rows are its interval itself (a JDBC key range), so an
        interval that overlaps one the pipeline already froze is refused before its plan
        is stored (:func:`refuse_overlaps`).
    """
    source = source or {}
    key = BatchKey.for_interval(plan_log.pipeline_id, start, end)
    existing = plan_log.get_plan(key.key)
    if existing is None:
        _refuse_mixed_kinds(plan_log, INTERVAL)
        boundary = {"start": start.isoformat(), "end": end.isoformat()}
        plan = Plan(plan_log.pipeline_id, key.key, INTERVAL, boundary, inputs(), source=source)
        if exclusive:
            refuse_overlaps(plan_log, plan, start, end)
        existing = plan_log.put_plan(plan)
    return own_files(plan_log, plan_log.check_source(existing, source))


def refuse_overlaps(plan_log: PlanLog, plan: Plan, start: datetime, end: datetime) -> None:
    """Register ``[start, end)`` in the pipeline's interval index, then refuse it if another
    interval there overlaps it (frozen, or being frozen by a concurrent run).

    Registering before checking makes two concurrent planners of overlapping intervals see
    each other at least once; a refused interval is taken out of the index again.

    :raises OverlappingIntervalError: naming both intervals and the way out.
    """
    index = IntervalIndex(plan_log)
    index.ensure_complete()
    span = span_of(start, end)
    pipeline, table_id = plan_log.pipeline_id, plan_log.bound_table_id()

    def stored(other: Span) -> bool:
        return plan_log.get_plan(BatchKey.for_interval(pipeline, *span_bounds(other)).key) is not None

    token = index.register(span)
    twins: list[str] = []
    try:
        others = [
            other
            for other in index.overlapping(span, twins=twins)
            # A name with no plan behind it for long was left by a planner that died.
            if stored(other) or not index.drop_orphans(other, older_than_s=STALE_AFTER_S)
        ]
    except BaseException:
        index.unregister(span, token)  # died while checking: take this planner's names back
        raise
    if not others:
        return
    index.unregister(span, token)
    if any(stored(other) for other in others):
        # No plan of this interval can be stored while an overlapping one is: names of it
        # without a plan are a dead planner's, and would block the neighbours.
        index.drop_names(twins)
    described = []
    records = RecordStore(plan_log=plan_log)
    for other in others:
        other_key = BatchKey.for_interval(pipeline, *span_bounds(other)).key
        if table_id is not None and records.newest_commit_record(other_key, table_id) is not None:
            state = "committed"
        elif plan_log.get_plan(other_key) is not None:
            state = "frozen, not committed yet"
        else:
            state = (
                "being planned by another run now, or its planner died: run that interval again, "
                f"or clear this task after {STALE_AFTER_S // 60} minutes, when a registration "
                "whose planner stored no plan is dropped"
            )
        described.append(f"batch {other_key} {span_text(other)} ({state})")
    raise OverlappingIntervalError(
        plan.key.label,
        f"its interval {span_text(span)} overlaps {', '.join(described)} of this pipeline: the "
        "rows in the overlap would be loaded twice, so nothing was planned or loaded. Load "
        "intervals that do not overlap the ones already loaded (a manual run with a mid-day "
        "logical date, or a changed timetable, plans intervals across the old ones: pass "
        "interval_start/interval_end that line up with them); to load the overlap again on "
        f"purpose, restate the batch(es) above: {refreeze_hint(pipeline, '<key>')}",
    )


def _owner_froze(plan_log: PlanLog, claim: dict[str, Any], entry: dict[str, Any]) -> tuple[Any, Any]:
    """The (size, mtime_ns) at which the owning batch's newest generation froze the file: a
    restatement of the owner takes the rewritten content, and then the file is its own again.
    On an object store the second is the ETag (a file there is planned without its mtime)."""
    owner = claim["batch_key"]
    newest = plan_log.get_plan(owner, plan_log.newest_generation(owner))
    for frozen in newest.inputs if newest is not None else []:
        if frozen.get("path") == entry["path"]:
            return _state(frozen)
    return _state(claim)


def _state(entry: dict[str, Any]) -> tuple[Any, Any]:
    return entry.get("size"), entry["etag"] if "etag" in entry else entry.get("mtime_ns")


def own_files(plan_log: PlanLog, plan: Plan) -> Plan:
    """``plan`` with only the landing files its batch owns.

    Two interval batches can see the same file (overlapping intervals, two intervals that
    render to the same directory, a schedule change). Each file is claimed once, put-if-absent,
    after the plan that lists it was stored; the first batch to claim it owns it, and every
    other batch leaves it out. Ownership never changes, so every attempt of a batch reads the
    same files, and no file is loaded by two batches of one pipeline.
    """
    if plan.kind != INTERVAL or not any("path" in f for f in plan.inputs):
        return plan
    owned: list[dict[str, Any]] = []
    for entry in plan.inputs:
        claim = plan_log.claim_file(entry, plan.batch_key)
        if claim["batch_key"] == plan.batch_key:
            owned.append(entry)
        elif _owner_froze(plan_log, claim, entry) != _state(entry):
            # Rewritten in place since its owner claimed it: skipping it would drop the new
            # content without a word, and loading it would load the path twice.
            size, mtime = _owner_froze(plan_log, claim, entry)
            mark = "etag" if "etag" in entry else "mtime_ns"
            raise BatchRefusedError(
                plan.key.label,
                f"landing file {entry['path']} belongs to batch {claim['batch_key']} of this pipeline, "
                f"which froze it at size {size}, {mark} {mtime}; it now has size {entry.get('size')}, "
                f"{mark} {_state(entry)[1]} (rewritten in place). A pipeline loads a path once: "
                f"restate batch {claim['batch_key']} to load the file as it is now "
                f"({refreeze_hint(plan.pipeline_id, claim['batch_key'])}), then clear this run "
                "(it then leaves the file to its owner), or write new data under new file names; "
                "nothing was committed",
            )
        else:
            log.warning(
                "batch %s: skipping %s, which batch %s of this pipeline owns (loaded or loading it)",
                plan.key,
                entry["path"],
                claim["batch_key"],
            )
    return plan if len(owned) == len(plan.inputs) else replace(plan, inputs=owned)


# The ways out of a run without a real data interval (also refused when the DAG is parsed,
# airflow_eod/operators/interval_timetable.py).
INTERVAL_FIXES = (
    "use a timetable that gives real intervals (schedule=CronDataIntervalTimetable(cron, "
    "timezone=...) or DeltaDataIntervalTimetable(timedelta), both from airflow.sdk, or set "
    "[scheduler] create_cron_data_intervals = True for cron strings, "
    "create_delta_data_intervals = True for timedelta schedules), pass interval_start "
    "and interval_end to the operator, or use boundary='offsets' (see docs/intervals.md)"
)


def require_interval(interval: tuple[datetime, datetime] | None) -> tuple[datetime, datetime]:
    """The run's data interval, or a clear error for a run that has none or a zero-length one.

    A zero-length interval (start == end) is what Airflow 3 gives every run of a "trigger"
    timetable (``schedule="@daily"`` or a cron string with the default
    ``[scheduler] create_cron_data_intervals = False``, a timedelta schedule, and manual runs
    of ``schedule=None``). It bounds no data: a JDBC interval batch would read no rows and
    mark the period loaded, and every such run of a landing directory would be a new batch
    of the same files. See ``docs/intervals.md``.

    :param interval: ``(start, end)`` of the batch, or ``None`` when the run has none.
    :raises ConfigurationError: for no interval or one whose end is not after its start.
    """
    fixes = INTERVAL_FIXES
    if interval is None:
        raise ConfigurationError(
            "boundary='interval' needs the DAG run's data interval, and this run has none (a "
            f"manual run without a logical date); trigger it with a logical date, or {fixes}"
        )
    start, end = interval
    if start.tzinfo is None or end.tzinfo is None:
        raise ConfigurationError(f"interval bounds {start!r}, {end!r} need a time zone")
    if end < start:
        raise ConfigurationError(
            f"data interval end {end.isoformat()} is before its start {start.isoformat()}"
        )
    if end == start:
        raise ConfigurationError(
            f"boundary='interval' needs a data interval that spans time, and this run's is "
            f"zero-length ({start.isoformat()} to {end.isoformat()}): Airflow's trigger "
            "timetables (the default for cron strings such as '@daily', for timedelta schedules, "
            f"and for manual runs of schedule=None) give start == end, which bounds no data; {fixes}"
        )
    return interval
