"""Which interval batches of a pipeline overlap a new one, found at a cost that does not grow
with the pipeline's history (invariant I8).

A JDBC interval batch is ``start <= key < end``: two overlapping intervals of one pipeline
would load the rows of the overlap twice (landing files have per-file ownership instead, see
:func:`airflow_eod.core.planner.own_files`). So every interval a JDBC pipeline freezes is
registered, before its plan is stored, in each UTC day it touches::

    spans/<day number>/<start µs>_<end µs>_<token>.json   (put-if-absent, checksummed)
    spans/complete.json                             every older plan is registered too

Two intervals overlap only if they share a day, so the intervals that overlap ``[start,
end)`` are among the names listed in the days it touches: a planner lists as many day
directories as its own interval spans, each holding only the intervals that touch that day,
whatever the number of batches before it. Names carry the bounds, so nothing is read.

Concurrent planners register first and check second: of two overlapping intervals planned
at once, the one that checks second sees the other; if both see each other both are
refused (nothing is loaded twice; run one again). A refused planner removes its own names
again (only its own: each planner's names carry its token), so a refusal does not block
anything. A planner that dies between registering and storing its plan (SIGKILL, a lost
node) leaves names with no plan behind them. They never wedge the pipeline: planning that
interval again either stores its plan (no overlap) or is refused by a stored overlapping
plan, and then removes every name of its own interval that has no plan (no plan of that
interval can be stored while the overlapping one exists); and names with no plan older than
:data:`STALE_AFTER_S` are dropped by the next planner that meets them. Plans stored by a
release without this index are registered once, by the first planner that finds
``complete.json`` missing.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from airflow_eod.core.errors import PlanLogError
from airflow_eod.core.planlog.store import INTERVAL, PlanLog

_DAY_US = 86_400 * 1_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_GENERATION = re.compile(r"\.g\d+\.json$")  # a restatement's plan: the same interval
Span = tuple[int, int]  # [start, end) in microseconds since the epoch, UTC
# A planner registers, lists a few directories and stores its plan within seconds; a name
# with no plan behind it after this long was left by a planner that died.
STALE_AFTER_S = 600


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


def _name(span: Span, token: str) -> str:
    return f"{span[0]}_{span[1]}_{token}.json"


def _parse(name: str) -> Span | None:
    parts = name.removesuffix(".json").split("_")
    try:
        return (int(parts[0]), int(parts[1])) if len(parts) == 3 and name.endswith(".json") else None
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
        if self.plan_log.ref.is_local and (os.path.islink(path) or os.path.islink(self.root)):
            # Nothing under a link is read or removed: it would lead out of the table (I11).
            raise PlanLogError(f"interval index directory {path} is a symbolic link; remove it")
        return path

    def register(self, span: Span, token: str | None = None) -> str:
        """Record ``span`` in every day it touches, under a token of this planner's own,
        and return the token. Each planner's names are its own: two runs planning the same
        interval at once each write theirs, so one that is refused and takes its names back
        leaves the other's in place.

        :param token: the names' token (default: a new random one).
        """
        token = token or uuid.uuid4().hex[:16]
        for day in _days(span):
            path = os.path.join(self._day_dir(day), _name(span, token))
            if self.plan_log.storage.head(self.plan_log.key_of(path)) is None:
                self.plan_log.put_entry(path, {"start_us": span[0], "end_us": span[1]})
        return token

    def unregister(self, span: Span, token: str) -> None:
        """Remove this planner's names of ``span`` again (it refused the interval, and
        stored no plan of it)."""
        for day in _days(span):
            self._remove(os.path.join(self._day_dir(day), _name(span, token)))

    def _remove(self, path: str) -> None:
        """Remove the name at ``path`` (already gone: fine)."""
        self.plan_log.storage.delete(self.plan_log.key_of(path))

    def drop_orphans(self, span: Span, *, older_than_s: float | None = None) -> bool:
        """Remove the names of ``span`` (every planner's), or only those older than
        ``older_than_s`` seconds; the caller knows no plan of ``span`` is stored.

        :returns: whether no name of ``span`` is left.
        """
        left = False
        now = time.time()
        for folder, name, other in self._listed(span):
            if other != span:
                continue
            path = os.path.join(folder, name)
            head = self.plan_log.storage.head(self.plan_log.key_of(path))
            if head is None:
                continue  # removed meanwhile
            if older_than_s is not None and now - head.mtime < older_than_s:
                left = True
                continue
            self._remove(path)
        return not left

    def _listed(self, span: Span) -> Iterator[tuple[str, str, Span | None]]:
        """``(folder, name, the name's interval)`` of every name in the days ``span`` touches."""
        for day in _days(span):
            folder = self._day_dir(day)
            for name in self.plan_log.storage.list(self.plan_log.key_of(folder)):
                yield folder, name, _parse(name)

    def drop_names(self, paths: list[str]) -> None:
        """Remove names that :meth:`overlapping` gave as ``twins`` (already gone: fine)."""
        for path in paths:
            self._remove(path)

    def overlapping(self, span: Span, *, twins: list[str] | None = None) -> list[Span]:
        """Every other registered interval that overlaps ``span`` (the same interval is not
        an overlap: it is the same batch), sorted by start.

        :param twins: if given, the paths of the names of ``span`` itself (this planner's
            and any other's) are appended to it, from the same listing.
        """
        found: set[Span] = set()
        for folder, name, other in self._listed(span):
            if other == span and twins is not None:
                twins.append(os.path.join(folder, name))
            elif other is not None and other != span and other[0] < span[1] and span[0] < other[1]:
                found.add(other)
        return sorted(found)

    def ensure_complete(self) -> None:
        """Register the interval plans stored before this index existed (once per pipeline:
        a one-time listing of the plans, never repeated once ``complete.json`` is written)."""
        marker = os.path.join(self.root, "complete.json")
        if self.plan_log.storage.head(self.plan_log.key_of(marker)) is not None:
            return
        for name in self.plan_log.names("intervals"):
            if not name.endswith(".json") or _GENERATION.search(name):
                continue
            plan = self.plan_log.get_plan(name[: -len(".json")])
            if plan is None or plan.kind != INTERVAL or "start" not in plan.boundary:
                continue
            self.register(span_of(_utc(plan.boundary["start"]), _utc(plan.boundary["end"])), "stored")
        self.plan_log.put_entry(marker, {"complete": True})
