"""Planning: freezing a batch's boundary in the plan log before anything is written.

Offset batches of a pipeline are planned strictly in sequence: batch N+1 is planned only
once the table says batch N is committed, so every plan older than the newest one is
committed by construction. A DAG run claims the batch it loads, so its retries find that
batch again instead of planning a new one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.plan_log import INTERVAL, OFFSETS, Plan, PlanLog

log = logging.getLogger(__name__)

# Given the plans of every earlier batch, return (boundary, inputs) of the next batch, or
# None when the source holds nothing new.
NextOffsets = Callable[[list[Plan]], "tuple[dict[str, Any], list[dict[str, Any]]] | None"]


def plan_offset_batch(
    plan_log: PlanLog,
    *,
    run_token: str,
    is_committed: Callable[[BatchKey], bool],
    next_offsets: NextOffsets,
) -> Plan | None:
    """The offset batch the run ``run_token`` loads, planned now if it has none yet.

    :param plan_log: the pipeline's plan log.
    :param run_token: a stable identity of the DAG run (the same for all its tries).
    :param is_committed: the ask, for one batch at generation 0.
    :param next_offsets: computes the next batch's frozen offsets from earlier plans.
    :returns: the plan, or ``None`` when there is nothing new to load.
    """
    claimed = plan_log.claimed_seq(run_token)
    if claimed is not None:
        plan = plan_log.get_offset_plan(claimed)
        log.info("run %s already claimed batch %s; loading that batch again", run_token, plan.key)
        return plan
    seqs = plan_log.offset_seqs()
    history = [plan_log.get_offset_plan(s) for s in seqs]
    if history and not is_committed(history[-1].key):
        # The newest batch is planned but not committed (a crashed run, or one still
        # running): this run loads that same batch, and fencing picks one committer.
        latest = history[-1]
        assert latest.seq is not None
        return plan_log.get_offset_plan(plan_log.claim(run_token, latest.seq))
    nxt = next_offsets(history)
    if nxt is None:
        return None
    boundary, inputs = nxt
    seq = seqs[-1] + 1 if seqs else 0
    key = BatchKey.for_offsets(plan_log.pipeline_id, seq, {"boundary": boundary, "inputs": inputs})
    stored = plan_log.put_plan(Plan(plan_log.pipeline_id, key.key, OFFSETS, boundary, inputs, seq=seq))
    if stored.batch_key != key.key:
        log.info("batch %d of %s was planned by a concurrent run; using its plan", seq, plan_log.pipeline_id)
    assert stored.seq is not None
    return plan_log.get_offset_plan(plan_log.claim(run_token, stored.seq))


def plan_interval_batch(
    plan_log: PlanLog,
    *,
    start: datetime,
    end: datetime,
    inputs: Callable[[], list[dict[str, Any]]],
) -> Plan:
    """The plan of the batch bounded by the data interval ``[start, end)``.

    The inputs are listed only the first time; every later attempt gets the stored plan.
    """
    key = BatchKey.for_interval(plan_log.pipeline_id, start, end)
    existing = plan_log.get_plan(key.key)
    if existing is not None:
        return existing
    boundary = {"start": start.isoformat(), "end": end.isoformat()}
    return plan_log.put_plan(Plan(plan_log.pipeline_id, key.key, INTERVAL, boundary, inputs()))


def require_interval(interval: tuple[datetime, datetime] | None) -> tuple[datetime, datetime]:
    """The run's data interval, or a clear error for a run that has none."""
    if interval is None:
        raise ConfigurationError(
            "boundary='interval' needs the DAG run's data interval, and this run has none (a "
            "manual run without a logical date); trigger it with a logical date, pass "
            "interval_start and interval_end to the operator, or use boundary='offsets'"
        )
    return interval
