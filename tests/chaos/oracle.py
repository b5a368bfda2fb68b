"""The chaos checker: the table against every version of every source file, row by row.

Independent of the write path: it reads the table with delta-rs (and with a second reader
that replays the log itself, while the log is whole), never the plan log, the markers or the
manifests. It knows only what the world wrote. Each version of a file is in the table whole
or not at all; a path that is there at the end holds exactly one of its versions in the
table (one that was loaded before a rewrite in place stays), a deleted or moved-away path at
most one, a hidden file none; every row equals the row its version wrote; the rejects of a
version are in the quarantine table exactly as often as its rows are in the main table.
Rows another writer (Delta Spark, ``tests/chaos/spark_writer.py``) wrote are not batches: each
live one is there once with the value its last statement gave it, a deleted one not at all.
"""

from __future__ import annotations

import itertools
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.chaos.spark_writer import FOREIGN_ID, ForeignRows
from tests.chaos.store import delta, exists, log_is_whole, ref, rows_by_log
from tests.chaos.world import COLUMNS, NEVER, OPTIONAL, REQUIRED, PathState, World, extra_value

_BAD_ID = re.compile(r"e\d+b\d+")
# A component of files linked by moves with more versions in the table than this is not
# searched (it is reported as unchecked, which fails the trial).
_MAX_UNITS = 14


@dataclass
class Verdict:
    """What the checker found; every list holds a line a person can read."""

    rows: int = 0
    duplicates: list[str] = field(default_factory=list)
    losses: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.duplicates or self.losses or self.wrong)


def _rows(uri: str, columns: list[str]) -> list[tuple[Any, ...]]:
    if not exists(uri):
        return []
    data = delta(uri).to_pyarrow_table(columns=columns).to_pylist()
    return [tuple(r[c] for c in columns) for r in data]


def check_tables(
    world: World,
    table: str,
    quarantine: str | None,
    name: str = "main",
    verdict: Verdict | None = None,
    foreign: ForeignRows | None = None,
) -> Verdict:
    """Compare ``table`` (and ``quarantine``) with the files of ``world`` whose pipelines load
    into the table called ``name``. A table that gained the column ``x`` (schema drift) must
    hold the file's value in it, or null for a file without it. ``foreign``: the rows another
    writer wrote into the table, checked on their own (:func:`check_foreign`)."""
    verdict = verdict or Verdict()
    paths = {p: s for p, s in world.paths.items() if s.table == name}
    drift = _has_column(table, "x")
    read = _rows(table, [*COLUMNS, "x"] if drift else COLUMNS)
    whole = Counter(r[:3] for r in read)
    if foreign is not None:
        read = check_foreign(read, foreign, verdict)
    main = [r[:3] for r in read]
    extras = [r[3] for r in read] if drift else []
    verdict.rows += len(main)
    if log_is_whole(table) and not drift:
        # A second reader: a path the log encodes wrongly reads differently (or fails) here.
        second = Counter(rows_by_log(table, COLUMNS))
        if second != whole:
            verdict.wrong.append("delta-rs and a replay of the log read different rows")
    counts: Counter[str] = Counter()
    expected: dict[str, tuple[str, int, str]] = {}
    entity_rows: dict[int, list[str]] = {}
    entity_bad: dict[int, list[str]] = {}
    has_extra: dict[str, bool] = {}
    for state in paths.values():
        for v in state.versions:
            entity_rows.setdefault(v.entity, [r[0] for r in v.rows])
            entity_bad.setdefault(v.entity, list(v.bad))
            for r in v.rows:
                expected[r[0]] = r
                has_extra[r[0]] = v.extra
    for i, x in enumerate(extras):
        rid = main[i][0]
        want_x = extra_value(rid) if has_extra.get(rid) else None
        if rid in has_extra and x != want_x:
            verdict.wrong.append(f"row {rid}: column x is {x!r}, its file wrote {want_x!r}")
    for row in main:
        rid = row[0]
        counts[rid] += 1
        want = expected.get(rid)
        if want is None:
            verdict.wrong.append(f"row {row} was never written by any source file")
        elif tuple(row) != want:
            verdict.wrong.append(f"row {row} differs from the row its file wrote, {want}")
    bad_counts: Counter[str] = Counter()
    if quarantine is not None:
        for source_file, raw in _rows(quarantine, ["source_file", "raw_record"]):
            found = _BAD_ID.search(raw or "")
            if found is None:
                verdict.wrong.append(f"quarantine row {raw!r} ({source_file}) was never written")
                continue
            bad_counts[found.group(0)] += 1

    # How many copies of each version's rows the table holds (rows of one version must agree).
    copies: dict[int, int | None] = {}
    for e, ids in entity_rows.items():
        seen = [counts[i] for i in ids] + [bad_counts[b] for b in entity_bad[e]]
        if not seen:
            copies[e] = None  # an empty file: nothing to tell
            continue
        common = Counter(seen).most_common(1)[0][0]
        copies[e] = common
        for i in ids:
            _partial(verdict, f"row {i}", counts[i], common)
        for b in entity_bad[e]:
            _partial(verdict, f"rejected record {b} (quarantine)", bad_counts[b], common)
    _check_paths(list(paths.values()), copies, verdict)
    return verdict


def check_foreign(
    read: list[tuple[Any, ...]], foreign: ForeignRows, verdict: Verdict
) -> list[tuple[Any, ...]]:
    """The foreign rows of ``read`` against the model; returns the other rows."""
    mine = Counter(tuple(r[:3]) for r in read if isinstance(r[0], str) and FOREIGN_ID.fullmatch(r[0]))
    want = Counter(foreign.live.values())
    for row, n in (mine - want).items():
        if row in want or row[0] in foreign.live:
            verdict.duplicates.append(f"foreign row {row} is there {mine[row]} times, expected {want[row]}")
        elif row[0] in foreign.ever:
            verdict.wrong.append(f"foreign row {row} was deleted by the other writer and is back ({n})")
        else:
            verdict.wrong.append(f"foreign row {row} was never written by the other writer")
    for row, n in (want - mine).items():
        verdict.losses.append(f"foreign row {row} written by the other writer is missing ({n})")
    verdict.rows += sum(mine.values())
    return [r for r in read if not (isinstance(r[0], str) and FOREIGN_ID.fullmatch(r[0]))]


def _has_column(uri: str, column: str) -> bool:
    if not exists(uri):
        return False
    return column in delta(uri).schema().to_arrow().names


def check_jdbc(source: list[tuple[Any, ...]], table: str, verdict: Verdict) -> None:
    """The JDBC pipeline's table against the database table: every row once, nothing else."""
    want, have = Counter(tuple(r) for r in source), Counter(_rows(table, COLUMNS))
    verdict.rows += sum(have.values())
    for row, n in (have - want).items():
        (verdict.duplicates if row in want else verdict.wrong).append(f"jdbc row {row}: {n} extra")
    for row, n in (want - have).items():
        verdict.losses.append(f"jdbc row {row}: {n} missing")


def _partial(verdict: Verdict, what: str, n: int, common: int) -> None:
    if n > common:
        verdict.duplicates.append(f"{what} is there {n} times, the rest of its file {common}")
    elif n < common:
        verdict.losses.append(f"{what} is there {n} times, the rest of its file {common}")


def _components(states: list[PathState]) -> list[list[PathState]]:
    """Paths linked by a shared version (a move), each group searched together."""
    by_entity: dict[int, list[PathState]] = {}
    for s in states:
        for v in s.versions:
            by_entity.setdefault(v.entity, []).append(s)
    seen: set[str] = set()
    groups: list[list[PathState]] = []
    for s in states:
        if s.path in seen:
            continue
        group, todo = [], [s]
        while todo:
            cur = todo.pop()
            if cur.path in seen:
                continue
            seen.add(cur.path)
            group.append(cur)
            for v in cur.versions:
                todo.extend(by_entity[v.entity])
        groups.append(group)
    return groups


def _check_paths(states: list[PathState], copies: dict[int, int | None], verdict: Verdict) -> None:
    for group in _components(states):
        # A version whose rows the table does not hold is placed nowhere in any assignment
        # without a finding, so only the others are searched.
        units = [(s, v) for s in group for v in s.versions if copies.get(v.entity) != 0]
        if len(units) > _MAX_UNITS:
            # Too many to search: say so rather than check a part and call it clean.
            paths = ", ".join(sorted(s.path for s in group))
            verdict.wrong.append(f"{paths}: {len(units)} versions with rows in the table; too many to check")
            continue
        best: tuple[int, list[str], list[str]] | None = None
        for bits in itertools.product((0, 1), repeat=len(units)):
            dups: list[str] = []
            losses: list[str] = []
            placed: Counter[int] = Counter()
            per_path: Counter[str] = Counter()
            for (s, v), b in zip(units, bits, strict=True):
                if b:
                    placed[v.entity] += 1
                    per_path[s.path] += 1
            for e in {v.entity for _, v in units}:
                have = copies.get(e)
                if have is None:
                    continue
                said = f"the rows of version e{e} are in the table {have} times, expected {placed[e]}"
                if have > placed[e]:
                    dups.append(said)
                elif have < placed[e]:
                    losses.append(said)
            for s in group:
                n = per_path[s.path]
                has_rows = any(copies.get(v.entity) is not None for v in s.versions)
                if s.expect == REQUIRED and n == 0 and has_rows:
                    losses.append(f"{s.path}: none of its {len(s.versions)} version(s) is in the table")
                if s.expect in (REQUIRED, OPTIONAL) and n > 1:
                    dups.append(f"{s.path}: {n} of its versions are in the table")
                if s.expect == NEVER and n > 0:
                    dups.append(f"{s.path}: a file that must never load is in the table")
            score = len(dups) + len(losses)
            if best is None or score < best[0]:
                best = (score, dups, losses)
            if score == 0:
                break
        assert best is not None
        verdict.duplicates.extend(best[1])
        verdict.losses.extend(best[2])


def _naive(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


@dataclass
class Committed:
    """A committed batch of a JDBC pipeline, as the table and its freeze say: its key range
    (``(low, high]`` of an offset batch, ``[start, end)`` of an interval) and the moment it
    was frozen (the rows the batch must hold are the source's rows at that moment)."""

    key: str
    generation: int
    low: Any
    high: Any
    interval: bool
    frozen_at: float

    def holds(self, key: Any) -> bool:
        if key is None:
            return False
        if self.interval:
            return bool(self.low <= key < self.high)
        return (self.low is None or key > self.low) and key <= self.high

    def describe(self) -> str:
        if self.interval:
            return f"{self.key} [{self.low}, {self.high})"
        return f"{self.key} ({self.low}, {self.high}]"


def committed_batches(table: str, pipeline_id: str) -> list[Committed]:
    """The committed batches of ``pipeline_id`` on ``table``: each one's generation and range
    as its commit recorded them (the manifest in the Delta log) and when that generation was
    frozen (its plan). Nothing else is taken from the write path: the checker decides on its
    own whether the ranges overlap or leave gaps, and what rows each had to hold."""
    from airflow_eod.core.ask import ask
    from airflow_eod.core.audit.status import table_status
    from airflow_eod.core.batch import BatchKey
    from airflow_eod.core.planlog.store import PlanLog

    if not exists(table):
        return []
    out: list[Committed] = []
    for summary in table_status(ref(table)):
        if summary.pipeline_id != pipeline_id:
            continue
        for b in summary.committed:
            assert b.generation is not None
            status = ask(ref(table), BatchKey(pipeline_id, b.batch_key))
            plan = PlanLog(ref(table), pipeline_id).get_plan(b.batch_key, b.generation)
            assert status.manifest is not None and plan is not None, b
            bound = status.manifest.boundary
            if "start" in bound:
                lo, hi = (_naive(datetime.fromisoformat(bound[k])) for k in ("start", "end"))
                out.append(Committed(b.batch_key, b.generation, lo, hi, True, _moment(plan.planned_at)))
            else:
                lo, hi = bound.get("low"), bound["high"]
                out.append(Committed(b.batch_key, b.generation, lo, hi, False, _moment(plan.planned_at)))
    return out


def _moment(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def check_jdbc_batches(
    at: Callable[[float], list[tuple[Any, ...]]],
    now: list[tuple[Any, ...]],
    table: str,
    pipeline_id: str,
    key_column: str,
    verdict: Verdict,
    *,
    due_keys: set[str] | None = None,
    offsets: bool = False,
) -> None:
    """A JDBC pipeline's table against the source's history: each committed batch holds
    exactly the rows its range held when the batch was frozen (a row changed, deleted or
    re-inserted in a committed range afterwards keeps its committed form); no two batches'
    ranges overlap (the overlap would be loaded twice); an offset pipeline's ranges follow
    one another without a gap up to a frontier at or past every key the source holds now; no
    row whose key is NULL, and no row outside every committed range, is in the table.

    :param at: the source's rows at a moment (``JdbcHistory.at``).
    :param now: the source's rows at the end of the trial.
    :param due_keys: interval batches the history committed (their runs succeeded).
    :param offsets: an offset pipeline, drained: every keyed row is due.
    """
    name = os.path.basename(table)
    batches = committed_batches(table, pipeline_id)
    have = [tuple(_naive(v) for v in r) for r in _rows(table, [key_column, *COLUMNS])]
    verdict.rows += len(have)
    ordered = sorted(batches, key=lambda b: (b.low is not None, b.low, b.high))
    for a, b in itertools.pairwise(ordered):
        overlap = b.low < a.high if a.interval else (b.low is None or b.low < a.high)
        if overlap:
            verdict.duplicates.append(f"{name}: batches {a.describe()} and {b.describe()} overlap")
    if ordered and not ordered[0].interval:
        if ordered[0].low is not None:
            verdict.losses.append(f"{name}: the first batch {ordered[0].describe()} starts above nothing")
        for a, b in itertools.pairwise(ordered):
            if b.low is not None and b.low > a.high:
                verdict.losses.append(f"{name}: a gap between {a.describe()} and {b.describe()}")
        top = max((r[0] for r in now if r[0] is not None), default=None)
        if top is not None and top > ordered[-1].high:
            verdict.losses.append(f"{name}: keys up to {top} are above the frontier {ordered[-1].high}")
    if offsets and not batches and any(r[0] is not None for r in now):
        verdict.losses.append(f"{name}: the source holds keyed rows and no batch was committed")
    if due_keys:
        for key in sorted(due_keys - {b.key for b in batches}):
            verdict.losses.append(f"{name}: batch {key} was committed by its run and is not in the table")
    for row in have:
        if row[0] is None:
            verdict.wrong.append(f"{name}: row {row} has a NULL key: such rows are never loaded")
        elif not any(b.holds(row[0]) for b in batches):
            verdict.wrong.append(f"{name}: row {row} is in no committed batch's range")
    for b in batches:
        want = Counter(tuple(r) for r in at(b.frozen_at) if b.holds(r[0]))
        held = Counter(r for r in have if b.holds(r[0]))
        for row, n in (held - want).items():
            if want[row]:
                verdict.duplicates.append(f"{name}: {row} of batch {b.describe()} is there {n} more times")
            else:
                verdict.wrong.append(
                    f"{name}: row {row} of batch {b.describe()} (generation {b.generation}) is not a row "
                    "the range held when the batch was frozen"
                )
        for row, n in (want - held).items():
            verdict.losses.append(
                f"{name}: row {row} of batch {b.describe()} (generation {b.generation}), in the range "
                f"when it was frozen, is missing {n} time(s)"
            )
