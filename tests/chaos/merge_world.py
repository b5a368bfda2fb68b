"""The world of a merge trial: landing files that carry changes of a small set of keys.

Each change is ``(id, name, amount, seq, op, part)``: ``seq`` orders the changes of a key
(the merge's ``order_by``), ``op`` is ``I``, ``U`` or ``D`` (``op = 'D'`` deletes the key,
kept as a tombstone), ``part`` is the partition value (awkward ones, and a key may move to
another partition with an update). A file holds inserts of new keys, updates and deletes of
keys seen before, re-inserts of deleted keys, stale changes (a ``seq`` older than one already
written for the key) and several changes of one key. Every ``seq`` is written once in the
whole trial (what a merge's ordering column must guarantee: two changes of a key never tie),
so a row of the table names the change, and the file version, it came from.

The files change as in an append trial (:class:`~tests.chaos.world.World`: rewritten in
place, deleted, moved, late, hidden); the world also keeps each version's fingerprint (its
size and mtime, and its MD5 for a copy on S3), so the checker can tell which version a
committed plan froze.
"""

from __future__ import annotations

import hashlib
import os
import random
from collections import Counter

from tests.chaos.world import PARTS, REQUIRED, Mirror, PathState, World

MERGE_DDL = "id BIGINT, name STRING, amount BIGINT, seq BIGINT, op STRING, part STRING"
MERGE_COLUMNS = ["id", "name", "amount", "seq", "op", "part"]
# The load settings of every merge pipeline of the trial.
MERGE_LOAD: dict[str, object] = {
    "write_mode": "merge",
    "merge_keys": ["id"],
    "order_by": "seq",
    "delete_when": "op = 'D'",
    "keep_tombstones": True,
}
# Few keys: most changes hit a key seen before, and batches of different pipelines and
# backfilled days touch the same keys (and the same files).
KEYS = 24

Change = tuple[int, str, int, int, str, str]  # id, name, amount, seq, op, part


class MergeWorld(World):
    """The change files of one merge trial, every version they had, and every change."""

    def __init__(
        self, root: str, rng: random.Random, parts: list[str] = PARTS, mirror: Mirror | None = None
    ) -> None:
        super().__init__(root, rng, parts, mirror)
        self.changes: dict[int, list[Change]] = {}  # a version (entity) -> its changes
        self.by_seq: dict[int, Change] = {}
        self.newest: dict[int, int] = {}  # a key -> the greatest seq written for it
        self.deleted: set[int] = set()
        # What tells a version of a path apart, as a plan records it: (path, size, mtime_ns)
        # locally, (path, MD5) on S3 (a single PUT's ETag).
        self.by_stat: dict[tuple[str, int, int], int] = {}
        self.by_md5: dict[tuple[str, str], int] = {}
        self.kinds: Counter[str] = Counter()
        self._seq = 0
        self._used: set[int] = set()
        self._pending = 0
        self._script: list[Change] | None = None

    # -- changes -----------------------------------------------------------------------
    def _fresh_seq(self) -> int:
        self._seq += 10
        self._used.add(self._seq)
        return self._seq

    def _stale_seq(self, key: int) -> int | None:
        """An unused ``seq`` below the newest one written for ``key`` (a stale change)."""
        top = self.newest.get(key, 0)
        for _ in range(8):
            s = self.rng.randrange(1, top) if top > 1 else 0
            if s > 0 and s not in self._used:
                self._used.add(s)
                return s
        return None

    def change(self, key: int | None = None, *, op: str | None = None, stale: bool | None = None) -> Change:
        """One change: of ``key``, or of a key picked (a new one, or one seen before);
        ``op`` and ``stale`` (an older ``seq`` than the key's newest) are drawn unless given."""
        rng = self.rng
        if key is None:
            seen = sorted(self.newest)
            key = rng.choice(seen) if seen and rng.random() < 0.7 else rng.randrange(1, KEYS + 1)
        if stale is None:
            stale = key in self.newest and rng.random() < 0.15
        seq = self._stale_seq(key) if stale else None
        if seq is not None:
            kind = "stale"
            op = op or rng.choice(["U", "D", "I"])
        else:
            seq = self._fresh_seq()
            if key not in self.newest:
                kind, op = "insert", op or "I"
            elif key in self.deleted and op is None:
                kind, op = "reinsert", "I"
            else:
                op = op or rng.choice(["U", "U", "U", "D"])
                kind = "update" if op != "D" else "delete"
            if op == "D":
                self.deleted.add(key)
            else:
                self.deleted.discard(key)
        self.newest[key] = max(self.newest.get(key, 0), seq)
        self.kinds[kind] += 1
        c = (key, f"n{seq}", rng.randrange(-1000, 1000), seq, op, rng.choice(self.parts))
        self.by_seq[seq] = c
        return c

    def _content(self, n_rows: int, n_bad: int) -> tuple[list[tuple[str, int, str]], list[str], int]:
        """A version's changes (``n_bad`` is not used: a merge trial has no quarantine). The
        rows :class:`World` keeps name each change by its ``seq``."""
        self._entities += 1
        e = self._entities
        changes: list[Change] = []
        if self._script is not None:
            changes, n_rows = self._script, 0
        for _ in range(n_rows):
            # Several changes of one key in one file: the newest of them wins (stale or not).
            again = changes and self.rng.random() < 0.3
            if again:
                self.kinds["same_key_in_file"] += 1
            changes.append(self.change(changes[-1][0] if again else None))
        self.changes[e] = changes
        self._pending = e
        return [(f"s{c[3]}", c[0], c[5]) for c in changes], [], e

    def land_changes(self, directory: str, changes: list[Change], *, expect: str = REQUIRED) -> PathState:
        """A new file in ``directory`` holding exactly ``changes`` (made by :meth:`change`)."""
        self._script = list(changes)
        try:
            return self.land(directory, len(changes), expect=expect)
        finally:
            self._script = None

    def _write(
        self, path: str, rows: list[tuple[str, int, str]], bad: list[str], mtime: float, extra: bool = False
    ) -> None:
        changes = [self.by_seq[int(r[0][1:])] for r in rows]
        order = list(MERGE_COLUMNS)
        self.rng.shuffle(order)  # CSV headers in another order: columns match by name
        records = [dict(zip(MERGE_COLUMNS, (str(v) for v in c), strict=True)) for c in changes]
        self.rng.shuffle(records)
        lines = [",".join(order)] + [",".join(rec[c] for c in order) for rec in records]
        text = "\n".join(lines) + "\n"
        if not changes and self.rng.random() < 0.5:
            text = ""  # a zero-byte file, not even a header
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.utime(path, (mtime, mtime))
        self._remember(path, self._pending, text.encode("utf-8"))
        if self.mirror is not None:
            self.mirror.put(path, text.encode("utf-8"))

    def _remember(self, path: str, entity: int, data: bytes) -> None:
        st = os.stat(path)
        real = os.path.realpath(path)
        self.by_stat[(real, st.st_size, st.st_mtime_ns)] = entity
        self.by_md5[(real, hashlib.md5(data).hexdigest())] = entity  # an ETag, not a secret

    def move(self, state: PathState) -> PathState:
        """Rename (size and mtime kept): the new path is a new file with the same changes."""
        moved = super().move(state)
        with open(moved.path, "rb") as fh:
            self._remember(moved.path, moved.versions[0].entity, fh.read())
        return moved

    def version_of(self, entry: dict[str, object], landing: str | None = None) -> int | None:
        """The version (entity) a plan's file ``entry`` froze, or ``None`` if the world never
        wrote it. ``landing``: the local landing root an entry on S3 stands for."""
        path = str(entry.get("path"))
        if landing is not None and "://" in path:
            path = os.path.join(landing, path.split("/landing/", 1)[1])
        real = os.path.realpath(path)
        etag = entry.get("etag")
        if isinstance(etag, str):
            return self.by_md5.get((real, etag.strip('"')))
        size, mtime = entry.get("size"), entry.get("mtime_ns")
        if not isinstance(size, int) or not isinstance(mtime, int):
            return None
        return self.by_stat.get((real, size, mtime))
