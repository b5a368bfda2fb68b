"""Restatement and re-freezing: loading a batch again on purpose as a new generation.

A restatement re-loads a committed batch from the source as it is now; a re-freeze does the
same for a batch the table never committed, whose frozen input changed (a corrected file, a
JDBC range whose row count drifted). Both are one mechanism: the run plans generation
``max(newest planned, newest committed) + 1`` from the source now, claims it so that its
retries never restate twice, and the commit swaps out whatever the table holds of the batch
in one Delta commit. Generations fence each other: an attempt of an older generation asks,
finds a newer one committed and writes nothing, and a racing commit of the same batch fails
on the shared ``txn`` appId.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from airflow_eod.core.planlog.store import Plan, PlanLog

log = logging.getLogger(__name__)

# The keys of ``dag_run.conf`` every load operator honours (see airflow_eod/run_conf.py);
# here so that every error message of the core and the sources can name them.
CONF_PIPELINE = "eod_pipeline"
CONF_RESTATE = "eod_restate"
CONF_BATCH_KEY = "eod_restate_batch_key"


def refreeze_hint(pipeline_id: str, batch_key: str) -> str:
    """The words of an error message that name the way to restate (or re-freeze) a batch
    which needs no DAG change: a run triggered with ``dag_run.conf`` keys."""
    return (
        f'trigger a run of the DAG with conf {{"{CONF_PIPELINE}": "{pipeline_id}", '
        f'"{CONF_RESTATE}": true, "{CONF_BATCH_KEY}": "{batch_key}"}} (no DAG change needed; '
        f"a DAG that passes restate/restate_batch_key params may use restate=True, "
        f"restate_batch_key={batch_key})"
    )


def plan_restatement(
    plan_log: PlanLog,
    plan: Plan,
    *,
    run_token: str,
    committed_generation: int | None,
    replan: Callable[[Plan, int], Plan],
) -> Plan:
    """The plan this run restates (or re-freezes) ``plan``'s batch with.

    :param committed_generation: the newest generation the table holds (``None``: none).
    :param replan: freezes the source again for a generation.
    """
    planned = plan_log.newest_generation(plan.batch_key)
    target = plan_log.claim_restatement(
        run_token, plan.batch_key, max(planned, committed_generation or 0) + 1
    )
    existing = plan_log.get_plan(plan.batch_key, target)
    if existing is not None:
        return existing
    # A restatement starts from what the table holds (the committed generation); a re-freeze
    # from the newest plan, so a file an earlier re-freeze dropped as gone stays out.
    base = planned if committed_generation is None else committed_generation
    return plan_log.put_plan(replan(plan_log.get_plan(plan.batch_key, base) or plan, target))


def refreeze_restatement(
    plan_log: PlanLog,
    stale: Plan,
    *,
    run_token: str,
    replan: Callable[[Plan, int], Plan],
) -> Plan:
    """Re-freeze the run's restatement whose generation ``stale`` was never committed and
    whose input changed again (the source was fixed after the first try failed)."""
    newest = plan_log.newest_generation(stale.batch_key)
    target = plan_log.reclaim_restatement(run_token, stale.batch_key, stale.generation, newest + 1)
    log.warning(
        "batch %s: generation %d was never committed and its input changed; re-freezing it as generation %d",
        stale.key,
        stale.generation,
        target,
    )
    existing = plan_log.get_plan(stale.batch_key, target)
    if existing is not None:
        return existing
    return plan_log.put_plan(replan(stale, target))
