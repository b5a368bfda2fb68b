"""Opening a table's files for the audit, and only its files.

The audit opens a data file only for the Parquet footer of a file without statistics and for
the bytes of files it suspects to be copies, and only through :func:`open_in_table`, which
follows no link and opens nothing but a regular file under the table's directory (a live
file that is a link to ``/dev/zero`` would otherwise be hashed forever).

This is the one door through which the audit reads data files: they are Spark's (or
another writer's) bytes, not airflow-eod's own, so they stay off the storage seam that the
audit reads the log and the plan log through, and an object-store backend will serve this
door with ranged gets through the storage (:func:`_open_in_store`): a store holds no links,
devices or FIFOs, so there the door checks only that the key stays under the table.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO
from urllib.parse import unquote, urlparse

from airflow_eod.core.storage.object_file import open_object
from airflow_eod.core.table_ref import TableRef


def local_file(ref: TableRef, rel: str) -> str:
    """Where the table's file ``rel`` (relative, absolute or a ``file:`` URI) is on disk."""
    table_path = ref.path
    if rel.startswith("file:"):
        return unquote(urlparse(rel).path)
    return rel if os.path.isabs(rel) else os.path.join(table_path, rel)


class NotInTable(Exception):
    """A path the audit does not open: a link, out of the table, or not a regular file."""


def _table_relative(ref: TableRef, rel: str) -> str:
    """``rel`` (relative, absolute or a ``file:`` URI) as a path under the table's directory
    made of plain names; :class:`NotInTable` when it leads elsewhere."""
    table_path = ref.path
    where = local_file(ref, rel)
    if "://" in rel and not rel.startswith("file:"):
        raise NotInTable("is on another file system (a URI), outside the table's directory")
    root = os.path.normpath(table_path)
    if not os.path.isabs(rel) and not rel.startswith("file:"):
        parts = rel.split("/")
    elif os.path.normpath(where).startswith(root + os.sep):
        parts = os.path.normpath(where)[len(root) + 1 :].split("/")
    else:
        raise NotInTable("is outside the table's directory")
    if any(p in ("", ".", "..") for p in parts):
        raise NotInTable("leads out of the table's directory (a '..', '.' or empty part)")
    return "/".join(parts)


def open_in_table(ref: TableRef, rel: str) -> BinaryIO:
    """Open the table's file ``rel`` for reading, name by name from the table's directory
    and following no symbolic link, and only if it is a regular file.

    :raises NotInTable: a link on the way, a path out of the table, a device or FIFO.
    :raises OSError: the file is not there (``FileNotFoundError``) or cannot be opened.
    """
    if not ref.is_local:
        return _open_in_store(ref, rel)
    table_path = ref.path
    parts = _table_relative(ref, rel).split("/")
    fd = os.open(table_path, os.O_RDONLY | os.O_DIRECTORY)  # the table's own path may be a link
    try:
        for i, name in enumerate(parts):
            last = i == len(parts) - 1
            # O_NONBLOCK: opening a FIFO must not wait for a writer.
            flags = os.O_RDONLY | os.O_NOFOLLOW | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            try:
                nxt = os.open(name, flags, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(
                    os.lstat(name, dir_fd=fd).st_mode
                ):
                    at = "/".join(parts[: i + 1])
                    raise NotInTable(f"is a symbolic link (at {at}), which is not followed") from None
                raise
            os.close(fd)
            fd = nxt
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotInTable("is not a regular file (a device, a FIFO or a directory)")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _open_in_store(ref: TableRef, rel: str) -> BinaryIO:
    """The table's object ``rel`` (relative, or a URI under the table) as a seekable file
    read in ranges through the table's storage."""
    if "://" in rel:
        if not rel.startswith(ref.location + "/"):
            raise NotInTable("is outside the table's prefix")
        rel = rel[len(ref.location) + 1 :]
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise NotInTable("leads out of the table's prefix (a '..', '.' or empty part)")
    store = ref.storage()
    head = store.head(rel)
    if head is None:
        raise FileNotFoundError(errno.ENOENT, "no such object", f"{ref.location}/{rel}")
    return open_object(store, rel, head.size)


def probe(ref: TableRef, rel: str) -> tuple[bool, str | None]:
    """``(on disk, why the audit does not open it)`` of the table's file ``rel``."""
    try:
        with open_in_table(ref, rel):
            return True, None
    except NotInTable as exc:
        return True, str(exc)
    except OSError:
        return False, None
