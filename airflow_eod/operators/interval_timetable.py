"""Refuse, when the DAG is parsed, an interval load in a DAG whose runs all get zero-length
data intervals.

An interval load refuses a zero-length interval when it runs (``require_interval`` in
:mod:`airflow_eod.core.planner`); when the DAG's timetable is known at parse time and can
only give such intervals, that refusal would come three tries after every deploy. This
module says so while the DAG file is imported: an import error in the UI instead.

Timetables are recognised by class name (the Task SDK's ``airflow.sdk`` timetables and the
core ``airflow.timetables`` ones share their names), so that nothing here depends on
where a given Airflow version keeps them. A timetable not named here (data-interval
timetables, asset-triggered ones, custom ones) is left to the run-time check.
"""

from __future__ import annotations

from typing import Any

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.planner import INTERVAL_FIXES

# Every run of these gets start == end (or no interval at all).
_ALWAYS_ZERO = {
    "NullTimetable": "schedule=None gives manual runs a zero-length data interval (or none)",
    "OnceTimetable": "schedule='@once' gives its run a zero-length data interval",
    "ContinuousTimetable": "schedule='@continuous' gives its runs zero-length data intervals",
    "EventsTimetable": "an EventsTimetable gives its runs zero-length data intervals",
}
# These take an ``interval`` that is zero unless given.
_TRIGGERS = ("CronTriggerTimetable", "DeltaTriggerTimetable")


def _names(timetable: Any) -> set[str]:
    return {cls.__name__ for cls in type(timetable).__mro__}


def _interval_of(timetable: Any) -> Any:
    return getattr(timetable, "interval", getattr(timetable, "_interval", None))


def zero_length_reason(timetable: Any) -> str | None:
    """Why every run of ``timetable`` gets a zero-length data interval, or ``None`` when it
    may give real ones (or is not known here).

    :param timetable: a DAG's ``timetable`` (Task SDK or core).
    """
    if timetable is None:
        return None
    names = _names(timetable)
    for name, reason in _ALWAYS_ZERO.items():
        if name in names:
            return reason
    if "MultipleCronTriggerTimetable" in names:
        inner = list(getattr(timetable, "timetables", getattr(timetable, "_timetables", [])) or [])
        if inner and all(not _interval_of(t) for t in inner):
            return (
                f"its MultipleCronTriggerTimetable ({timetable!r}) gives start == end: no interval= was given"
            )
        return None
    if any(name in names for name in _TRIGGERS) and not _interval_of(timetable):
        kind = next(name for name in _TRIGGERS if name in names)
        return (
            f"its schedule is a {kind} (the default for cron strings such as '@daily' and for "
            "timedelta schedules, without [scheduler] create_cron_data_intervals = True), whose "
            "runs get start == end unless it is given interval="
        )
    return None


def check_interval_timetable(operator: Any, dag: Any) -> None:
    """Raise :class:`ConfigurationError` when ``operator`` is an interval load without
    explicit bounds in ``dag``, and ``dag``'s timetable gives every run a zero-length
    interval.

    :param operator: a load operator (``boundary``, ``interval_start``, ``interval_end``).
    :param dag: the DAG it is attached to, or ``None``.
    """
    if dag is None or getattr(operator, "boundary", None) != "interval":
        return
    if getattr(operator, "interval_start", None) or getattr(operator, "interval_end", None):
        return  # the bounds come from the operator (e.g. a manual run's params), not the run
    reason = zero_length_reason(getattr(dag, "timetable", None))
    if reason is None:
        return
    raise ConfigurationError(
        f"task {operator.task_id} of DAG {dag.dag_id}: boundary='interval' needs data intervals "
        f"that span time, and {reason}; every run would be refused as zero-length. "
        f"{INTERVAL_FIXES[0].upper()}{INTERVAL_FIXES[1:]}"
    )


class IntervalTimetableCheck:
    """Mixin of the load operators: runs :func:`check_interval_timetable` whenever the
    operator is attached to a DAG after its ``boundary`` is known (``op.dag = dag``,
    ``dag.add_task(op)``); the operators call it themselves at the end of ``__init__``,
    for the DAG they were created in (``with DAG(...)``)."""

    def _convert__dag(self, dag: Any) -> Any:
        dag = super()._convert__dag(dag)  # type: ignore[misc]
        check_interval_timetable(self, dag)
        return dag
