"""Plans over time: plans never committed (stuck, or near the retention window's end), and
committed JDBC interval batches of one pipeline whose key ranges overlap."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from airflow_eod.core.audit.findings import age_words
from airflow_eod.core.audit.state import AuditState
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.planlog.retention import RETENTION_KEY, safety_margin


def check_plans(audit: AuditState) -> None:
    """Report plans never committed: stuck past ``stuck_after``, or near (or past) the end
    of the table's retention window."""
    for key, plan in sorted(audit.plans.items(), key=lambda kv: kv[0].label):
        b = audit.batches.get(key)
        if (b and b.generation is not None and b.generation >= plan.generation) or not plan.planned_at:
            continue
        age = audit.now - datetime.fromisoformat(plan.planned_at)
        say: dict[str, Any] = {"gen": plan.generation, "age": age_words(age), "at": plan.planned_at}
        if age > audit.stuck_after:
            audit.add("stuck_plan", key, **say)
        if audit.window is not None and age > audit.window * audit.expiry_warning:
            tense = "is" if age > audit.window - safety_margin(audit.window) else "will be"
            say.update(window=age_words(audit.window), key=RETENTION_KEY, tense=tense)
            audit.add("plan_near_expiry", key, **say)


def check_overlapping_intervals(audit: AuditState) -> None:
    """Committed JDBC interval batches of one pipeline whose key ranges overlap (planned
    by a release that did not refuse them, or with the refusal bypassed): a sweep over
    each pipeline's intervals sorted by start, against the furthest end so far."""
    spans: dict[str, list[tuple[datetime, datetime, BatchKey]]] = {}
    for b in audit.committed():
        plan = audit.plans.get(b.key)
        if plan is not None and _is_jdbc_interval(plan.kind, plan.boundary, plan.source, plan.inputs):
            start, end = _utc(plan.boundary["start"]), _utc(plan.boundary["end"])
            spans.setdefault(b.key.pipeline_id, []).append((start, end, b.key))
    for items in spans.values():
        reach: tuple[datetime, datetime, BatchKey] | None = None  # the furthest-reaching so far
        for start, end, key in sorted(items, key=lambda t: (t[0], t[1], t[2].key)):
            if reach is not None and start < reach[1]:
                audit.add(
                    "overlapping_intervals",
                    key,
                    interval=_span(start, end),
                    other=_span(reach[0], reach[1]),
                    other_key=reach[2].key,
                    overlap=_span(start, min(end, reach[1])),
                )
            if reach is None or end > reach[1]:
                reach = (start, end, key)


def _utc(text: str) -> datetime:
    t = datetime.fromisoformat(text)
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _span(start: datetime, end: datetime) -> str:
    return f"[{start.isoformat()}, {end.isoformat()})"


def _is_jdbc_interval(kind: str, boundary: dict[str, Any], source: dict[str, Any], inputs: list[Any]) -> bool:
    """A JDBC interval batch (whose rows are its key range); plans older than the source's
    identity in the plan are told by their inputs (a row count, no landing files)."""
    if kind != "interval" or "start" not in boundary or "end" not in boundary:
        return False
    if source:
        return source.get("type") == "jdbc_incremental"
    return bool(inputs) and all(isinstance(i, dict) and "rows" in i and "path" not in i for i in inputs)
