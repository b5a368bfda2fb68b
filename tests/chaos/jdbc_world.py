"""The database tables a chaos trial's JDBC pipelines load from, and every state they had.

Each source table is ``(<key>, id, n, part)``: an integer key ``k`` for the offset pipeline,
a timestamp ``ts`` for the interval pipeline. The harness inserts rows, updates and deletes
rows below the frontier, deletes and re-inserts a row under the same key (the count kept,
the content not), and inserts rows whose key is NULL. After every change it records the
table's rows with the moment the change was done, so the checker can tell what a batch
frozen at any moment had to hold (``JdbcHistory.at``). ``id`` is unique per row written (a
re-inserted row gets a new one), so a row in the Delta table names the row it came from.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

Row = tuple[Any, str, int, str]


class JdbcHistory:
    """One source table over a trial: its rows after each change, timed."""

    def __init__(self, pg: Any, name: str, key: str, parts: list[str]) -> None:
        self.pg = pg
        self.name = name
        self.key = key
        self.parts = parts
        self.snapshots: list[tuple[float, list[Row]]] = [(0.0, [])]
        self.lock = threading.Lock()
        self._ids = 0

    def create(self, key_type: str) -> None:
        # No primary key: rows whose key is NULL are part of the fault model.
        self.pg.execute(f"CREATE TABLE {self.name} ({self.key} {key_type}, id text, n integer, part text)")

    def now(self) -> list[Row]:
        return self.snapshots[-1][1]

    def at(self, moment: float) -> list[Row]:
        """The rows as they were at ``moment`` (the newest change done by then)."""
        found = self.snapshots[0][1]
        for t, rows in self.snapshots:
            if t <= moment:
                found = rows
        return found

    def null_counts_since(self, index: int) -> set[int]:
        return {sum(1 for r in rows if r[0] is None) for _, rows in self.snapshots[index:]}

    def _record(self) -> None:
        rows = self.pg.rows(f"SELECT {self.key}, id, n, part FROM {self.name}")
        self.snapshots.append((time.time(), [(r[0], r[1], r[2], r[3]) for r in rows]))  # type: ignore[misc]

    def _new_id(self) -> str:
        self._ids += 1
        return f"{self.name[-4:]}-{self._ids}"

    def change(self, work: Callable[[], None]) -> None:
        """Do ``work`` on the table and record the rows after it (one change at a time)."""
        with self.lock:
            work()
            self._record()

    # -- changes -----------------------------------------------------------------
    def insert(self, keys: list[Any], r: random.Random) -> None:
        rows = [(k, self._new_id(), r.randrange(-1000, 1000), r.choice(self.parts)) for k in keys]
        if rows:
            self.change(
                lambda: self.pg.execute(f"INSERT INTO {self.name} VALUES (%s, %s, %s, %s)", rows, many=True)
            )

    def update(self, row: Row, r: random.Random) -> None:
        """New values, same key and id: the row count stays."""
        n, part = row[2] + 1 + r.randrange(100), r.choice(self.parts)
        sql = f"UPDATE {self.name} SET n = %s, part = %s WHERE id = %s"
        self.change(lambda: self.pg.execute(sql, (n, part, row[1])))

    def delete(self, row: Row) -> None:
        self.change(lambda: self.pg.execute(f"DELETE FROM {self.name} WHERE id = %s", (row[1],)))

    def reinsert(self, row: Row, r: random.Random) -> None:
        """Delete the row and insert another under the same key, in one transaction: the
        count stays, the content does not."""
        new = (row[0], self._new_id(), r.randrange(-1000, 1000), r.choice(self.parts))

        def work() -> None:
            with self.pg.connect() as conn, conn.cursor() as cur:
                cur.execute(f"DELETE FROM {self.name} WHERE id = %s", (row[1],))
                cur.execute(f"INSERT INTO {self.name} VALUES (%s, %s, %s, %s)", new)

        self.change(work)

    def apply(self, what: str, candidates: list[Row], r: random.Random) -> bool:
        """One change of kind ``what`` to one of ``candidates`` (rows with a key); False when
        there is nothing to change."""
        if what == "null_key":
            self.insert([None] * r.randrange(1, 3), r)
            return True
        if not candidates:
            return False
        row = r.choice(sorted(candidates, key=lambda x: x[1]))
        if what == "update":
            self.update(row, r)
        elif what == "delete":
            self.delete(row)
        else:
            self.reinsert(row, r)
        return True


def keyed(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r[0] is not None]


def moment_of(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def day_time(base: datetime, day: int, r: random.Random) -> datetime:
    """A UTC moment (naive, as a ``timestamp`` column holds it) at a random time of ``day``."""
    moment = base + timedelta(days=day, seconds=r.randrange(86_400), microseconds=r.randrange(1_000_000))
    return moment.replace(tzinfo=None)
