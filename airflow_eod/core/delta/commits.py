"""The commit files of a Delta log: where each lives, and its actions, read bounded."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

from airflow_eod.core import bounded_json
from airflow_eod.core.bounded_json import MAX_ACTION_LINE, MAX_COMMIT
from airflow_eod.core.delta.reading import LOG_DIR
from airflow_eod.core.errors import CorruptTableError
from airflow_eod.core.storage import Storage, object_lines
from airflow_eod.core.table_ref import TableRef

_ACTION_BYTES = re.compile(rb'^\s*\{\s*"(\w+)"')


COMMIT_NAME = re.compile(r"^(\d{20})\.json$")


# Commits up to this size are read whole (and skipped at once when they hold no wanted
# action); larger ones line by line, each line bounded.
_WHOLE_COMMIT = 16 << 20


def commit_path(ref: TableRef, version: int) -> str:
    table_path = ref.path
    return os.path.join(table_path, LOG_DIR, f"{version:020d}.json")


def commit_exists(ref: TableRef, version: int) -> bool:
    """Whether commit ``version`` is in the log (not yet written, or aged out, otherwise)."""
    return ref.storage().head(f"{LOG_DIR}/{version:020d}.json") is not None


def read_commit_actions(
    ref: TableRef, version: int, wanted: set[str], *, store: Storage | None = None
) -> list[dict[str, Any]] | None:
    """The actions named in ``wanted`` of commit ``version`` (others are not parsed), or
    ``None`` when the commit file is gone.

    :param ref: the table.
    :param store: the table's storage, when the caller reads several commits in one reading
        (the log's tail): one storage for the whole reading checks the way to ``_delta_log/``
        once, not once per commit.

    :raises CorruptTableError: when the commit is not a regular file, has a line longer than
        :data:`~airflow_eod.core.bounded_json.MAX_ACTION_LINE`, or a wanted action that is
        not a bounded JSON object.
    """
    table_path = ref.path
    path = commit_path(ref, version)
    store, key = store or ref.storage(), f"{LOG_DIR}/{version:020d}.json"
    try:
        # The bounded get first, and a head only when it refuses: nearly every commit is small,
        # and a head before each get cost the ask a stat and a key check per commit read.
        data = store.get(key, limit=_WHOLE_COMMIT)
    except (FileNotFoundError, NotADirectoryError):
        return None  # not written yet, or removed by a log cleanup
    except bounded_json.JsonBoundError as exc:
        head = store.head(key)
        if head is None:
            return None  # removed since it was seen (a log cleanup)
        if head.size <= _WHOLE_COMMIT:
            raise CorruptTableError(table_path, path, str(exc)) from None  # a link, a FIFO, a device
        try:
            # Too large to hold whole: read in ranges, line by line, each line bounded.
            return _wanted_actions(ref, path, commit_lines(store, key, head.size), wanted)
        except bounded_json.JsonBoundError as too_large:
            raise CorruptTableError(table_path, path, str(too_large)) from None
        except FileNotFoundError:
            return None  # removed while it was read (a log cleanup)
    # Most commits of a loaded table are a batch's adds and its marker: only lines that can
    # hold a wanted action are split out and matched (bytes: no decoding).
    if not any(b'"' + name.encode() + b'"' in data for name in wanted):
        return []
    return _wanted_actions(ref, path, data.splitlines(), wanted)


def commit_lines(store: Storage, key: str, size: int) -> Iterator[bytes]:
    """The lines of the commit at ``key`` (``size`` bytes when looked at), read in ranges,
    each bounded; :class:`~airflow_eod.core.bounded_json.JsonBoundError` at once, unread,
    when it claims more than :data:`~airflow_eod.core.bounded_json.MAX_COMMIT` bytes."""
    if size > MAX_COMMIT:
        raise bounded_json.JsonBoundError(
            f"is larger than {MAX_COMMIT} bytes, which no Delta writer's commit is; it is not read"
        )
    return object_lines(store, key, size, limit=MAX_ACTION_LINE)


def _wanted_actions(
    ref: TableRef, path: str, lines: Iterable[bytes], wanted: set[str]
) -> list[dict[str, Any]]:
    table_path = ref.path
    out: list[dict[str, Any]] = []
    try:
        for raw in lines:
            m = _ACTION_BYTES.match(raw)
            if m is not None and m.group(1).decode() in wanted:
                action, name = bounded_json.loads(raw), m.group(1).decode()
                if not isinstance(action, dict) or not isinstance(action.get(name), dict):
                    raise bounded_json.JsonBoundError(f"has a {name} action that is not an object")
                out.append(action)
    except ValueError as exc:  # JsonBoundError, or a line that is not JSON
        raise CorruptTableError(table_path, path, f"is not a Delta commit ({exc})") from None
    return out
