"""The world a chaos trial loads from: landing directories whose files have awkward names,
every version each file ever had, and what the checker may expect of each.

Row ids are unique per written version (``e<entity>r<row>``), so a row in the table names
the version it came from. A moved file keeps its rows (and ids): it is a new file at a new
path, and the checker counts both paths.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Protocol

COLUMNS = ["id", "n", "part"]
DDL = "id STRING, n INT, part STRING"
# Partition values and file names that broke readers, writers and logs elsewhere: glob
# characters, URI-reserved characters, percent escapes, spaces, non-ASCII.
PARTS = ["a", "b c", "x%y", "é", "k=v", "[1]", "p#q", "日", "50%", "a:b"]
NAME_PIECES = [
    "x[1]",
    "a*b",
    "q?",
    "{c,d}",
    "sp ace",
    "pct%41",
    "h#1",
    "p+l",
    "c:o",
    "é",
    "日本",
    "a&b",
    "semi;",
    "eq=1",
    "plain",
]

# What the checker may expect of a path at the end of a trial.
REQUIRED = "required"  # exactly one of its versions is in the table
OPTIONAL = "optional"  # at most one of its versions is in the table
NEVER = "never"  # none of its versions is in the table (files starting with _ or .)


class Mirror(Protocol):
    """Where the landing files are copied as they change (tests/chaos/store.LandingMirror)."""

    def put(self, path: str, data: bytes) -> None: ...

    def delete(self, path: str) -> None: ...

    def folder(self, path: str) -> None: ...


@dataclass
class Version:
    """One content a path held: its good rows and its malformed lines."""

    entity: int
    path: str
    rows: list[tuple[str, int, str]]
    bad: list[str] = field(default_factory=list)
    extra: bool = False  # the file carries a column ``x`` the declared schema lacks


def extra_value(row_id: str) -> str:
    """The value of the extra column ``x`` in a row of a file that has it."""
    return f"x-{row_id}"


@dataclass
class PathState:
    """A landing path over the trial: its versions, whether it is there now, what is due."""

    path: str
    versions: list[Version] = field(default_factory=list)
    exists: bool = True
    expect: str = REQUIRED
    table: str = "main"  # the table its pipeline loads into


class World:
    """The landing files of one trial, and every version they had."""

    def __init__(
        self, root: str, rng: random.Random, parts: list[str] = PARTS, mirror: Mirror | None = None
    ) -> None:
        self.root = root
        self.rng = rng
        # The landing files on S3 as well (``--landing-store s3``): each change done there too.
        self.mirror = mirror
        self.parts = parts  # the partition values rows get
        self.paths: dict[str, PathState] = {}
        self._entities = 0
        self._mtime = 1_700_000_000.0

    # -- writing -----------------------------------------------------------------
    def _next_mtime(self) -> float:
        # Every write gets a distinct, increasing mtime (with nanoseconds), so a rewrite is
        # seen as a change even within one clock tick.
        self._mtime += 1.000_001
        return self._mtime

    def new_name(self, directory: str, hidden: bool = False) -> str:
        while True:
            piece = self.rng.choice(NAME_PIECES)
            name = f"{'_' if hidden else ''}{piece}-{self.rng.randrange(10_000)}.csv"
            if os.path.join(directory, name) not in self.paths:
                return name

    def _content(self, n_rows: int, n_bad: int) -> tuple[list[tuple[str, int, str]], list[str], int]:
        self._entities += 1
        e = self._entities
        rng = self.rng
        rows = [(f"e{e}r{i}", rng.randrange(-1000, 1000), rng.choice(self.parts)) for i in range(n_rows)]
        bad = [f"e{e}b{i}" for i in range(n_bad)]
        return rows, bad, e

    def _write(
        self, path: str, rows: list[tuple[str, int, str]], bad: list[str], mtime: float, extra: bool = False
    ) -> None:
        order = COLUMNS + (["x"] if extra else [])
        self.rng.shuffle(order)  # CSV headers in another order: columns match by name
        lines = [",".join(order)]
        records = [dict(zip(COLUMNS, (r[0], str(r[1]), r[2]), strict=True)) for r in rows]
        for rec in records:
            rec["x"] = extra_value(rec["id"])
        records += [{"id": b, "n": "not-a-number", "part": "a", "x": ""} for b in bad]
        self.rng.shuffle(records)
        lines += [",".join(rec[c] for c in order) for rec in records]
        text = "\n".join(lines) + "\n"
        if not rows and not bad and self.rng.random() < 0.5:
            text = ""  # a zero-byte file, not even a header
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.utime(path, (mtime, mtime))
        if self.mirror is not None:
            # A store has no settable modification time: a late file is simply a new object.
            self.mirror.put(path, text.encode("utf-8"))

    def land(
        self,
        directory: str,
        n_rows: int,
        *,
        n_bad: int = 0,
        hidden: bool = False,
        expect: str = REQUIRED,
        late: bool = False,
        extra: bool = False,
        table: str = "main",
    ) -> PathState:
        """A new file in ``directory``; ``late`` gives it an mtime older than every file so far,
        ``extra`` a column ``x`` the declared schema lacks."""
        path = os.path.join(directory, self.new_name(directory, hidden))
        rows, bad, e = self._content(n_rows, n_bad)
        mtime = self._next_mtime()
        if late:
            mtime -= 10_000_000
        self._write(path, rows, bad, mtime, extra)
        version = Version(e, path, rows, bad, extra)
        state = PathState(path, [version], True, NEVER if hidden else expect, table)
        self.paths[path] = state
        return state

    def rewrite(self, state: PathState) -> None:
        """New content in place (new row ids): a new version of the same path."""
        rows, bad, e = self._content(self.rng.randrange(0, 4), 0)
        extra = state.versions[-1].extra
        self._write(state.path, rows, bad, self._next_mtime(), extra)
        state.versions.append(Version(e, state.path, rows, bad, extra))

    def delete(self, state: PathState) -> None:
        os.remove(state.path)
        if self.mirror is not None:
            self.mirror.delete(state.path)
        state.exists = False
        if state.expect == REQUIRED:
            state.expect = OPTIONAL

    def move(self, state: PathState) -> PathState:
        """Rename: the old path is gone, the new path is a new file with the same rows."""
        directory = os.path.dirname(state.path)
        new = os.path.join(directory, self.new_name(directory))
        os.rename(state.path, new)
        if self.mirror is not None:
            # A store has no rename: the new key is written, then the old one deleted.
            with open(new, "rb") as fh:
                self.mirror.put(new, fh.read())
            self.mirror.delete(state.path)
        old = state.versions[-1]
        state.exists = False
        if state.expect == REQUIRED:
            state.expect = OPTIONAL
        copy = Version(old.entity, new, old.rows, old.bad, old.extra)
        moved = PathState(new, [copy], True, REQUIRED, state.table)
        self.paths[new] = moved
        return moved

    def files_in(self, directory: str) -> list[PathState]:
        return [s for s in self.paths.values() if s.exists and os.path.dirname(s.path) == directory]
