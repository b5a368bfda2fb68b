"""Live files that hold the same bytes: copies, found by size first and by hash only then."""

from __future__ import annotations

import hashlib
import os
from typing import BinaryIO

from airflow_eod.core.audit.safe_open import NotInTable, open_in_table
from airflow_eod.core.table_ref import TableRef

_CHUNK = 1 << 20


def _digest(fh: BinaryIO) -> str:
    """SHA-256 of ``fh`` up to the size it had when opened: a file that grows while it is
    read is not read without end."""
    left, digest = os.fstat(fh.fileno()).st_size, hashlib.sha256()
    while left > 0:
        chunk = fh.read(min(_CHUNK, left))
        if not chunk:
            break
        digest.update(chunk)
        left -= len(chunk)
    return digest.hexdigest()


def same_bytes(ref: TableRef, paths: list[str]) -> list[list[str]]:
    """Groups of two or more of ``paths`` (table-relative) whose bytes are equal. Only files of
    equal size are read, so a table without copies costs almost no read at all. Sizes, not
    statistics: a copy added with other statistics, or none, holds the same rows. Only regular
    files under the table's directory are read (:func:`open_in_table`), each up to its size."""
    by_size: dict[int, list[str]] = {}
    for rel in paths:
        try:
            with open_in_table(ref, rel) as fh:
                by_size.setdefault(os.fstat(fh.fileno()).st_size, []).append(rel)
        except (OSError, NotInTable):
            continue  # gone (reported as missing), or not read (reported by check_files)
    out = []
    for candidates in (c for c in by_size.values() if len(c) > 1):
        by_hash: dict[str, list[str]] = {}
        for rel in candidates:
            try:
                with open_in_table(ref, rel) as fh:
                    by_hash.setdefault(_digest(fh), []).append(rel)
            except (OSError, NotInTable):
                continue
        out += [sorted(same) for same in by_hash.values() if len(same) > 1]
    return out
