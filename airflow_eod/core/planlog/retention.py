"""The transaction-retention window: how long the table remembers a batch's marker.

Delta drops ``txn`` markers older than ``delta.setTransactionRetentionDuration`` when it
writes a checkpoint. A batch planned longer ago than that, with no marker in the table,
may have been committed and forgotten; loading it again could duplicate its rows, so it is
refused unless it is restated on purpose (invariant I5).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow_eod.core.delta.log import TableLog
from airflow_eod.core.durations import parse_interval
from airflow_eod.core.errors import RetentionWindowError
from airflow_eod.core.planlog.store import Plan

RETENTION_KEY = "delta.setTransactionRetentionDuration"
DEFAULT_RETENTION = "interval 30 days"


def _span(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size} {unit}"
    return f"{seconds} seconds"


def retention_window(table: TableLog | None) -> timedelta | None:
    """The table's marker retention, or ``None`` when markers never expire."""
    if table is None:
        return None
    value = (table.metadata().configuration or {}).get(RETENTION_KEY)
    return parse_interval(value) if value else None


# Clocks of the host that planned, the host that committed and the host that writes the
# checkpoint (which drops expired markers) may disagree. A batch is refused this much before
# the window ends, so a skewed clock cannot expire a marker the check still counts on.
MAX_CLOCK_SKEW = timedelta(hours=1)


def safety_margin(window: timedelta) -> timedelta:
    """How long before the window ends a batch is refused: the smaller of
    :data:`MAX_CLOCK_SKEW` and a tenth of the window (short test windows stay usable)."""
    return min(MAX_CLOCK_SKEW, window / 10)


def check_retention(table: TableLog | None, plan: Plan, *, now: datetime | None = None) -> None:
    """Refuse an uncommitted batch planned longer ago than the retention window, less a
    margin for clock skew (:func:`safety_margin`)."""
    window = retention_window(table)
    if window is None or not plan.planned_at:
        return
    planned = datetime.fromisoformat(plan.planned_at)
    age = (now or datetime.now(UTC)) - planned
    if age > window - safety_margin(window):
        raise RetentionWindowError(
            plan.key.label,
            f"it was planned at {plan.planned_at}, {_span(age)} ago, longer than the table's "
            f"transaction-retention window ({RETENTION_KEY} = {_span(window)}, less a "
            f"{_span(safety_margin(window))} clock-skew margin), and the table has neither a marker "
            "nor a commit record for it: it may have been committed and forgotten, so loading it "
            "again could duplicate its rows. Check the table, then restate the batch on purpose "
            "(restate=True) to replace whatever it holds of this batch",
        )
