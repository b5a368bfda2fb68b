"""Which interval batches of a pipeline overlap a new one, found at a cost that does not grow
with the pipeline's history (invariant I8).

A JDBC interval batch is ``start <= key < end``: two overlapping intervals of one pipeline
would load the rows of the overlap twice (landing files have per-file ownership instead, see
:func:`airflow_eod.core.planner.own_files`). So every interval a JDBC pipeline freezes is
registered, before its plan is stored, in each UTC day it touches::

    spans/<day number>/<start µs>_<end µs>.json    (put-if-absent, checksummed)
    spans/complete.json                             every older plan is registered too

Two intervals overlap only if they share a day, so the intervals that overlap ``[start,
end)`` are among the names listed in the days it touches: a planner lists as many day
directories as its own interval spans, each holding only the intervals that touch that day,
whatever the number of batches before it. Names carry the bounds, so nothing is read.

Concurrent planners register first and check second: of two overlapping intervals planned
at once, the one that checks second sees the other; if both see each other both are
refused (nothing is loaded twice; run one again). A refused planner removes its own names
again, so a refusal does not block anything. Plans stored by a release without this index
are registered once, by the first planner that finds ``complete.json`` missing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from airflow_eod.core.errors import PlanLogError
from airflow_eod.core.plan_log import INTERVAL, PlanLog

_DAY_US = 86_400 * 1_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_GENERATION = re.compile(r"\.g\d+\.json$")  # a restatement's plan: the same interval
Span = tuple[int, int]  # [start, end) in microseconds since the epoch, UTC


def span_of(start: datetime, end: datetime) -> Span:
    """``[start, end)`` as microseconds since the epoch (bounds carry a time zone)."""

    def us(t: datetime) -> int:
        return (t - _EPOCH) // timedelta(microseconds=1)

    return us(start.astimezone(UTC)), us(end.astimezone(UTC))


def span_bounds(span: Span) -> tuple[datetime, datetime]:
    """``(start, end)`` of ``span`` as UTC datetimes."""
    return _EPOCH + timedelta(microseconds=span[0]), _EPOCH + timedelta(microseconds=span[1])


def span_text(span: Span) -> str:
    """``[start, end)`` in ISO 8601, for messages."""
    s, e = span_bounds(span)
    return f"[{s.isoformat()}, {e.isoformat()})"


def _days(span: Span) -> Iterator[int]:
    first, last = span[0] // _DAY_US, max(span[0], span[1] - 1) // _DAY_US
    return iter(range(first, last + 1))


def _name(span: Span) -> str:
    return f"{span[0]}_{span[1]}.json"


def _parse(name: str) -> Span | None:
    head, sep, tail = name.removesuffix(".json").partition("_")
    try:
        return (int(head), int(tail)) if sep and name.endswith(".json") else None
    except ValueError:
        return None


def _utc(text: str) -> datetime:
    t = datetime.fromisoformat(text)
    return t if t.tzinfo else t.replace(tzinfo=UTC)


class IntervalIndex:
    """The registered intervals of one pipeline.

    :param plan_log: the pipeline's plan log (the index lives beside its plans).
    """

    def __init__(self, plan_log: PlanLog) -> None:
        self.plan_log = plan_log
        self.root = os.path.join(plan_log.root, "spans")

    def _day_dir(self, day: int) -> str:
        path = os.path.join(self.root, str(day))
        if os.path.islink(path) or os.path.islink(self.root):
            # Nothing under a link is read or removed: it would lead out of the table (I11).
            raise PlanLogError(f"interval index directory {path} is a symbolic link; remove it")
        return path

    def register(self, span: Span) -> None:
        """Record ``span`` in every day it touches (idempotent: a retry writes nothing)."""
        for day in _days(span):
            path = os.path.join(self._day_dir(day), _name(span))
            if not os.path.exists(path):
                self.plan_log.put_entry(path, {"start_us": span[0], "end_us": span[1]})

    def unregister(self, span: Span) -> None:
        """Remove ``span`` again (its planner refused it; no plan of it was stored)."""
        for day in _days(span):
            try:
                os.remove(os.path.join(self._day_dir(day), _name(span)))
            except FileNotFoundError:
                pass

    def overlapping(self, span: Span) -> list[Span]:
        """Every other registered interval that overlaps ``span`` (the same interval is not
        an overlap: it is the same batch), sorted by start."""
        found: set[Span] = set()
        for day in _days(span):
            try:
                names = os.listdir(self._day_dir(day))
            except FileNotFoundError:
                continue
            for name in names:
                other = _parse(name)
                if other is not None and other != span and other[0] < span[1] and span[0] < other[1]:
                    found.add(other)
        return sorted(found)

    def ensure_complete(self) -> None:
        """Register the interval plans stored before this index existed (once per pipeline:
        a one-time listing of the plans, never repeated once ``complete.json`` is written)."""
        marker = os.path.join(self.root, "complete.json")
        if os.path.exists(marker):
            return
        folder = os.path.join(self.plan_log.root, "intervals")
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            if not name.endswith(".json") or _GENERATION.search(name):
                continue
            plan = self.plan_log.get_plan(name[: -len(".json")])
            if plan is None or plan.kind != INTERVAL or "start" not in plan.boundary:
                continue
            self.register(span_of(_utc(plan.boundary["start"]), _utc(plan.boundary["end"])))
        self.plan_log.put_entry(marker, {"complete": True})
