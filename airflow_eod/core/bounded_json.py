"""JSON read from a table or its plan log, bounded before and while it is parsed.

Whoever can write a table's files (another team sharing the lake) writes these bytes, and
the ask runs inside processes that many tasks share (the triggerer). So no JSON that
airflow-eod reads from a table's ``_delta_log/`` or ``_eod/`` is parsed whole without a
bound: its size is capped before it is read (a file is read up to its cap, never to its
end), its nesting is capped (Python's decoder would otherwise recurse until it raises
``RecursionError``, and what follows it, such as a checksum, recurses too), and the
non-JSON constants ``NaN`` and ``Infinity`` that Python's decoder accepts are refused.

A violation raises :class:`JsonBoundError`, a ``ValueError``: the callers that already
treated "not JSON" as a corrupt entry (the plan log, the manifest, the checkpoint index)
treat an unbounded one the same way.
"""

from __future__ import annotations

import json
from typing import Any, BinaryIO

from airflow_eod.core.storage import local
from airflow_eod.core.storage.base import BoundError

# One small metadata file: `_delta_log/_last_checkpoint`, `_eod/table.json`, a checkpoint
# index's `index.json` and buckets (a bucket holds 256 markers, about 20 KB).
MAX_SMALL_FILE = 16 << 20
# One plan-log entry: a plan lists its frozen inputs, and a loaded index the inputs of every
# batch up to it (a landing pipeline's millionth file makes it about 100 MB).
MAX_PLAN_LOG_ENTRY = 256 << 20
# Objects and arrays in one document. A parsed ``{}`` costs Python about 45 times its 3 bytes:
# within the size caps alone, a plan-log entry of empty objects would parse to gigabytes. An
# entry listing a million landing files holds about a million objects.
MAX_CONTAINERS = 2_000_000
# One line (one action) of a Delta commit: an ``add`` with its statistics, a ``metaData``
# whose schema has thousands of columns, a ``commitInfo`` with its manifest.
MAX_ACTION_LINE = 64 << 20
# One commit file of a Delta log, read in ranges line by line once it is over 16 MB: a
# commit of a million adds with their statistics is about 1 GB. A file claiming more is
# refused unread: the ask runs in the shared triggerer, and a sparse file of zeros costs its
# writer nothing per terabyte and a reader about five seconds per gigabyte.
MAX_COMMIT = 2 << 30
# Containers inside containers: a Delta schema nests about three levels per struct level.
MAX_DEPTH = 256


# The out-of-bounds error of the storage seam, under the name this module's callers know:
# a link, a device or an object over its limit met while reading is the same refusal.
JsonBoundError = BoundError


def _reject_constant(name: str) -> Any:
    raise JsonBoundError(f"holds {name}, which is not JSON")


def _check_depth(value: Any, limit: int) -> None:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            raise JsonBoundError(f"is nested more than {limit} levels deep")
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))


def loads(data: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(data)``, with ``NaN``/``Infinity``, nesting deeper than ``max_depth`` and
    more than :data:`MAX_CONTAINERS` objects and arrays refused (:class:`JsonBoundError`);
    other defects raise ``ValueError`` as ``json`` does."""
    # Counted before parsing, at memchr speed: brackets inside strings count too, which only
    # errs on the side of refusing. Fewer than the depth limit cannot nest deeper, so only a
    # large document pays for the walk after parsing.
    if isinstance(data, str):
        opened = data.count("[") + data.count("{")
    else:
        opened = data.count(b"[") + data.count(b"{")
    if opened > MAX_CONTAINERS:
        raise JsonBoundError(f"holds more than {MAX_CONTAINERS} objects and arrays")
    try:
        value = json.loads(data, parse_constant=_reject_constant)
    except RecursionError:
        raise JsonBoundError(f"is nested more than {max_depth} levels deep") from None
    if opened > max_depth and isinstance(value, dict | list):
        _check_depth(value, max_depth)
    return value


def open_regular(path: str) -> BinaryIO:
    """``open(path, "rb")`` for a regular file only: a symbolic link (which may lead out of the
    table, to ``/dev/zero`` say) or a device or FIFO (whose read never ends, or never starts)
    raises :class:`JsonBoundError` without being read. ``OSError`` as ``open``."""
    return local.open_regular(path)


def read_bytes(path: str, limit: int) -> bytes:
    """The bytes of the regular file at ``path`` (see :func:`open_regular`), reading no more
    than ``limit`` + 1 of them; :class:`JsonBoundError` when it holds more than ``limit``."""
    with open_regular(path) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise JsonBoundError(f"is larger than {limit} bytes")
    return data
