"""Restatement: re-loading a committed batch on purpose as generation + 1.

The new generation gets its own frozen plan (the source as it is now), the run that
restates claims the target generation so that its retries never restate twice, and the
commit swaps the old generation's files for the new ones in one Delta commit.
"""

from __future__ import annotations

from collections.abc import Callable

from airflow_eod.core.plan_log import Plan, PlanLog


def plan_restatement(
    plan_log: PlanLog,
    plan: Plan,
    *,
    run_token: str,
    committed_generation: int | None,
    replan: Callable[[Plan, int], Plan],
) -> Plan:
    """The plan this run restates ``plan``'s batch with.

    :param committed_generation: the newest generation the table holds (``None``: none, or
        its marker expired; the batch is then loaded as generation 0, replacing whatever
        files of it the table still holds).
    :param replan: freezes the source again for a generation.
    """
    if committed_generation is None:
        return plan
    target = plan_log.claim_restatement(run_token, plan.batch_key, committed_generation + 1)
    existing = plan_log.get_plan(plan.batch_key, target)
    if existing is not None:
        return existing
    return plan_log.put_plan(replan(plan, target))
