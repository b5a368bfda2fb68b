"""The checker of merge loads from PostgreSQL: the Delta table against the database's newest
row per key, row by row (:func:`airflow_eod` 's merge tables hold one live row per key).

PostgreSQL answers "which row is newest" itself (``DISTINCT ON (keys) ... ORDER BY keys,
order_by DESC``), so the checker does not share the merge's own code for it. A source table
that holds one row per key (``updated_at`` tables) is its own newest row; a change log holds
many, and the newest decides. Deleting rows are expected in the table as tombstones, or not
at all (``keep_tombstones=False``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.support.merge_helpers import table_rows


def _plain(value: Any) -> Any:
    """A value as both sides can compare it: timestamps naive in UTC (PostgreSQL's
    ``timestamp`` is naive, Spark writes UTC-adjusted ones), ``CHAR(n)`` without padding."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    if isinstance(value, str):
        return value.rstrip(" ")
    return value


@dataclass
class PgMergeCheck:
    """The differences between a merge table and PostgreSQL's newest rows, by key."""

    expected: int
    table_rows: int
    missing: list[Any] = field(default_factory=list)
    unexpected: list[Any] = field(default_factory=list)
    duplicated: list[Any] = field(default_factory=list)
    wrong: list[tuple[Any, dict[str, Any], dict[str, Any]]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.duplicated or self.wrong)

    def describe(self) -> str:
        return (
            f"expected {self.expected} rows, table holds {self.table_rows}; missing keys {self.missing[:5]}, "
            f"unexpected {self.unexpected[:5]}, duplicated {self.duplicated[:5]}, "
            f"wrong {self.wrong[:3]} ({len(self.wrong)} in all)"
        )


def newest_rows(
    pg: Any, source: str, keys: Sequence[str], order_by: str, columns: Sequence[str]
) -> list[dict[str, Any]]:
    """PostgreSQL's newest row of each key of ``source`` (keys that are NULL excluded)."""
    key_list = ", ".join(keys)
    not_null = " AND ".join(f"{k} IS NOT NULL" for k in keys)
    sql = (
        f"SELECT DISTINCT ON ({key_list}) {', '.join(columns)} FROM {source} WHERE {not_null} "
        f"ORDER BY {key_list}, {order_by} DESC"
    )
    return [dict(zip(columns, (_plain(v) for v in row), strict=True)) for row in pg.rows(sql)]


def check_merge_with_postgres(
    pg: Any,
    source: str,
    table: str,
    *,
    keys: Sequence[str],
    order_by: str,
    columns: Sequence[str],
    is_delete: Any = None,
    tombstones: bool = True,
    storage_options: dict[str, str] | None = None,
) -> PgMergeCheck:
    """Compare the Delta ``table`` with ``source``'s newest row per key, row by row.

    :param pg: the PostgreSQL server (``tests.support.postgres_server.PostgresServer``).
    :param source: the source table (or a parenthesised query with an alias).
    :param keys: the merge keys.
    :param order_by: the ordering column: the greatest value per key is the newest row.
    :param columns: the columns compared (the table's columns, named as in PostgreSQL).
    :param is_delete: a predicate on a newest row (a dict) that says it deletes its key.
    :param tombstones: deletes stay in the table as tombstones (``True``) or are gone.
    """
    want: dict[Any, dict[str, Any]] = {}
    for row in newest_rows(pg, source, keys, order_by, columns):
        if tombstones or is_delete is None or not is_delete(row):
            want[tuple(row[k] for k in keys)] = row
    seen: dict[Any, list[dict[str, Any]]] = {}
    rows = table_rows(table, storage_options)
    for row in rows:
        plain = {c: _plain(row[c]) for c in columns}
        seen.setdefault(tuple(plain[k] for k in keys), []).append(plain)
    check = PgMergeCheck(len(want), len(rows))
    check.duplicated = sorted(k for k, rs in seen.items() if len(rs) > 1)
    check.missing = sorted(k for k in want if k not in seen)
    check.unexpected = sorted(k for k in seen if k not in want)
    check.wrong = sorted(
        ((k, rs[0], want[k]) for k, rs in seen.items() if k in want and len(rs) == 1 and rs[0] != want[k]),
        key=lambda w: w[0],
    )
    return check
