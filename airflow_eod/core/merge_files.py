"""Which of a table's files a merge rewrites, and whether another writer got in the way.

A merge reads and rewrites only the live files that can hold one of the batch's keys, found
from the file statistics (``minValues``/``maxValues`` of the first key column): a
:class:`KeyProbe` answers "may this file hold a key of the batch?", erring towards yes.
Between the merge's read and its commit another writer may commit: the commit goes ahead
only when none of the rewritten files changed or went and no file that may hold a batch key
was added (:func:`conflict`); otherwise the merge is computed again. Dropping the other
writer's change silently is never an option.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any
from urllib.parse import unquote, urlparse

from deltalake import DeltaTable
from deltalake.transaction import RemoveAction

from airflow_eod.core.delta.deletion_vectors import deleted_rows
from airflow_eod.core.errors import BatchError, BatchRefusedError, UnsafePathError
from airflow_eod.core.replaced_files import live_files, remove_of
from airflow_eod.core.table_ref import TableRef

# Delta Spark writes timestamp statistics truncated to the millisecond: a key a little past
# a file's stated maximum may be in it.
_STATS_PRECISION = timedelta(milliseconds=1)


class MergeConflict(BatchError):
    """Another writer committed, between the merge's read and its commit, a change to the
    files the merge rewrites (or a file that may hold its keys): the merge is computed again
    from the new snapshot. Nothing was committed."""


def file_id(add: dict[str, Any]) -> tuple[Any, ...]:
    """What tells one version of a live file from another: a deletion vector added to a file
    (another writer's DELETE or UPDATE in place) keeps its path but changes this."""
    return (add["log_path"], add.get("size_bytes"), add.get("modification_time"), add.get("deleted_rows", 0))


def merge_live_files(ref: TableRef, snapshot: DeltaTable) -> list[dict[str, Any]]:
    """The snapshot's live files (:func:`~airflow_eod.core.replaced_files.live_files`), each
    with ``deleted_rows``: the rows a deletion vector hides in it (0 without one)."""
    live = live_files(snapshot)
    hidden = deleted_rows(ref, snapshot)
    for a in live:
        a["deleted_rows"] = hidden.get(a["path"], 0)
    return live


@dataclass(frozen=True)
class KeyProbe:
    """The batch's distinct values of its first key column, sorted, to rule files out.

    :param column: the first merge key column.
    :param values: the sorted distinct values; ``None`` when the column's type is not one
        whose statistics are trusted for pruning (every file may hold a key then).
    """

    column: str
    values: Sequence[Any] | None

    def may_hold(self, add: dict[str, Any]) -> bool:
        """Whether the live file ``add`` (a :func:`~airflow_eod.core.replaced_files.live_files`
        entry) may hold a row whose key is one of the batch's."""
        if self.values is None:
            return True
        if not self.values:
            return False
        if self.column in (add.get("partition_values") or {}):
            return True  # a key that is a partition column: its files carry no statistics of it
        lo = (add.get("min") or {}).get(self.column)
        hi = (add.get("max") or {}).get(self.column)
        if lo is None or hi is None:
            # No statistics (or only nulls: a null key is never a batch's key, but a file
            # without stats cannot say it holds only nulls).
            return add.get("num_records") is None or not _only_nulls(add, self.column)
        try:
            if isinstance(hi, datetime):
                hi = hi + _STATS_PRECISION
            i = bisect.bisect_left(self.values, lo)
        except TypeError:
            return True  # a stats type the batch's values do not compare with: assume yes
        if i >= len(self.values):
            return False
        first = self.values[i]
        try:
            if first <= hi:
                return True
        except TypeError:
            return True
        # A writer may truncate a long string's maximum to a prefix: any key that starts
        # with it may be in the file.
        return isinstance(hi, str) and isinstance(first, str) and first.startswith(hi)

    @classmethod
    def of(cls, column: str, values: Sequence[Any] | None) -> KeyProbe:
        """A probe over ``values`` (any order, no nulls); ``None`` or values of a type the
        statistics are not trusted for: no pruning."""
        if values is None:
            return cls(column, None)
        distinct = sorted(set(values))
        if distinct and not all(
            isinstance(v, (int, str, date)) and not isinstance(v, bool) for v in distinct
        ):
            return cls(column, None)
        return cls(column, distinct)


def _only_nulls(add: dict[str, Any], column: str) -> bool:
    nulls = (add.get("null_count") or {}).get(column)
    return nulls is not None and add.get("num_records") is not None and nulls >= add["num_records"]


@dataclass
class MergeBase:
    """What a merge read: the snapshot's version and files, and the files it rewrites.

    :param version: the table version the merge read (``None``: there was no table).
    :param live: the identity (:func:`file_id`) of every live file of that snapshot.
    :param rewritten: the live files the merge read and rewrites (their entries).
    :param probe: the batch's keys, to judge files another writer adds.
    """

    version: int | None
    live: set[tuple[Any, ...]]
    rewritten: list[dict[str, Any]]
    probe: KeyProbe
    removes: list[RemoveAction] = field(default_factory=list)

    def __post_init__(self) -> None:
        now = int(time.time() * 1000)
        self.removes = [remove_of(a, now) for a in self.rewritten]


def conflict(base: MergeBase, live_now: list[dict[str, Any]] | None) -> str | None:
    """Why the merge computed on ``base`` cannot commit on the snapshot whose live files are
    ``live_now`` (``None``: there is no table), or ``None`` when it can."""
    if live_now is None:
        return None if base.version is None else "the table is gone"
    if base.version is None:
        return "another writer created the table"
    now_ids = {file_id(a) for a in live_now}
    gone = [a["log_path"] for a in base.rewritten if file_id(a) not in now_ids]
    if gone:
        return (
            f"another writer removed or changed {len(gone)} of the {len(base.rewritten)} file(s) the "
            f"merge rewrites (e.g. {gone[0]}: OPTIMIZE, DELETE, another merge?)"
        )
    added = [a for a in live_now if file_id(a) not in base.live and base.probe.may_hold(a)]
    if added:
        return (
            f"another writer added {len(added)} file(s) that may hold keys of the batch "
            f"(e.g. {added[0]['log_path']})"
        )
    return None


def refuse_paths_outside(rewritten: list[dict[str, Any]], label: str) -> None:
    """Refuse to read (and remove) a live file whose log path leads out of the table's
    directory: an absolute path or URI, or a ``..``, ``.`` or empty part (invariant I11). The
    log is table content another writer may have written; the merge would copy such a
    file's rows into the table and commit a remove of it."""
    for a in rewritten:
        path = unquote(a["log_path"])
        parts = path.split("/")
        if urlparse(path).scheme or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise UnsafePathError(
                label,
                f"the live file {a['log_path']!r}, which the merge would read and rewrite, is not a "
                "path inside the table's directory (an absolute path, a URI or a '..'); nothing was "
                "read or committed. Remove that file from the table with the writer that added it",
            )


def refuse_deletion_vectors(rewritten: list[dict[str, Any]], label: str) -> None:
    """The delta-rs engine rewrites whole files and cannot read a deletion vector: a file
    with one is refused by the feature's name."""
    marked = [a["log_path"] for a in rewritten if a.get("deleted_rows")]
    if marked:
        raise BatchRefusedError(
            label,
            f"{len(marked)} file(s) the merge would rewrite carry deletion vectors (table feature "
            f"deletionVectors, e.g. {marked[0]}), which the delta-rs engine cannot apply when it "
            "rewrites them; nothing was committed. Purge them first (Delta Spark: REORG TABLE ... "
            "APPLY (PURGE)), or load this pipeline with engine='delta-spark'",
        )
