"""The local backend of the storage seam: a local or shared POSIX filesystem.

The only module of airflow-eod that knows POSIX for the bytes it keeps beside Spark (see
:mod:`airflow_eod.core.storage.base`). Put-if-absent writes the content to a temporary
file in the same directory, flushes it to disk, and hard-links it to its final name:
``link`` fails if the name exists, so a reader sees either nothing or the complete content,
and of two writers exactly one wins. The winner then fsyncs the directory, so that the new
name, and not only the content, survives a power cut. An overwrite renames a temporary
file over the name instead, which readers see whole too.

Every key is joined onto the root with no link on the way that leads out of it (invariant
I11, :func:`airflow_eod.core.table_layout.no_link_out`), and read only as a regular file:
never through a link, never a FIFO or device (whose read would never end).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from typing import BinaryIO

from airflow_eod.core.errors import UnsafePathError
from airflow_eod.core.storage.base import BoundError, Head, NotFound, check_attempt
from airflow_eod.core.table_layout import no_link_out

# The prefix of this backend's temporary files: never listed, never an object.
_TMP = ".tmp-eod-"


class LocalStorage:
    """The bytes under one directory (a table's root).

    :param root: the directory; keys are ``/``-separated names below it.
    """

    def __init__(self, *, root: str) -> None:
        self.root = root
        # Directories found to be no link by this (short-lived) instance: see ``under``.
        self._no_links: set[str] = set()

    def where(self, key: str) -> str:
        return self._path(key)

    def key_of(self, where: str) -> str:
        rel = os.path.relpath(where, self.root)
        if rel == "." or rel.startswith(".." + os.sep) or rel == ".." or os.path.isabs(rel):
            raise UnsafePathError(None, f"{where} is not below {self.root}")
        return rel.replace(os.sep, "/")

    def _path(self, key: str, *, last: bool = True) -> str:
        """The path of ``key``, refused when a segment could climb or a link on the way
        leads out of the root.

        :param last: whether a link at the key's last name is resolved too; a reader that
            opens nothing through a link (``O_NOFOLLOW``, ``lstat``) leaves it to the open,
            which refuses the link itself.
        """
        parts = key.split("/") if key.strip("/") else []
        if key.startswith("/") or any(p in ("", ".", "..") or "\0" in p for p in parts):
            raise UnsafePathError(None, f"storage key {key!r} is not a relative name below {self.root}")
        if last or not parts:
            return no_link_out(self.root, parts, self._no_links)
        return os.path.join(no_link_out(self.root, parts[:-1], self._no_links), parts[-1])

    # -- reading -------------------------------------------------------------------
    def get(self, key: str, *, limit: int | None = None) -> bytes:
        with open_regular(self._path(key, last=False)) as fh:
            data = fh.read() if limit is None else _read_bounded(fh, limit)
        if limit is not None and len(data) > limit:
            raise BoundError(f"is larger than {limit} bytes")
        return data

    def get_range(self, key: str, start: int, length: int) -> bytes:
        with open_regular(self._path(key, last=False)) as fh:
            fh.seek(start)
            return fh.read(length)

    def head(self, key: str) -> Head | None:
        try:
            st = os.lstat(self._path(key, last=False))
        except (FileNotFoundError, NotADirectoryError):
            return None
        return Head(st.st_size, st.st_mtime_ns, f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}")

    def list(self, prefix: str) -> list[str]:
        try:
            names = os.listdir(self._path(prefix.rstrip("/")))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(n for n in names if not n.startswith(_TMP))

    def has_prefix(self, prefix: str) -> bool:
        try:
            return stat.S_ISDIR(os.stat(self._path(prefix.rstrip("/"))).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False

    # -- writing -------------------------------------------------------------------
    def put_if_absent(self, key: str, data: bytes, *, attempt: str | None = None) -> bool:
        check_attempt(data, attempt)
        path = self._path(key)
        directory = os.path.dirname(path)
        _make_directories(directory)
        tmp = _write_temporary(directory, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            os.unlink(tmp)
            return attempt is not None and self._holds(key, data)
        except OSError:
            os.unlink(tmp)
            # The outcome is unknown (a shared filesystem's reply lost after the link was
            # made): the name holding this attempt's bytes is this attempt's write.
            if attempt is not None and self._holds(key, data):
                fsync_directory(directory)
                return True
            raise
        except BaseException:
            os.unlink(tmp)
            raise
        # The temporary name goes first so that the directory fsync below persists both the new
        # entry and the removal; a crash in between leaves only a stray ``.tmp-eod-`` file.
        os.unlink(tmp)
        fsync_directory(directory)
        return True

    def _holds(self, key: str, data: bytes) -> bool:
        """Whether the object at ``key`` is ``data`` exactly (read back, bounded by it)."""
        try:
            return self.get(key, limit=len(data)) == data
        except (FileNotFoundError, BoundError):
            return False

    def put(self, key: str, data: bytes, *, private: bool = False) -> None:
        path = self._path(key)
        directory = os.path.dirname(path)
        _make_directories(directory)
        tmp = _write_temporary(directory, data, mode=0o600 if private else 0o644)
        try:
            # A rename replaces a link planted at ``path`` itself, never what it leads to.
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        fsync_directory(directory)

    def delete(self, key: str) -> bool:
        """Remove the regular file at ``key``; a link or a directory there is no object this
        backend wrote and is left alone (``False``), as is a missing one."""
        self._path(key, last=False)  # a link on the way that leads out of the root: refused
        parent, name = self._open_parent(key)
        if parent is None:
            return False
        try:
            if not stat.S_ISREG(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                return False
            os.unlink(name, dir_fd=parent)
        except (FileNotFoundError, NotADirectoryError):
            return False
        finally:
            os.close(parent)
        return True

    def delete_prefix(self, prefix: str) -> bool:
        """Remove the directory ``prefix`` and everything below it, following no link: a link
        at ``prefix`` is removed itself, its target left alone; a file there is left."""
        key = prefix.strip("/")
        self._path(key, last=False)  # a link on the way that leads out of the root: refused
        parent, name = self._open_parent(key)
        if parent is None:
            return False
        try:
            try:
                mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
            except (FileNotFoundError, NotADirectoryError):
                return False
            if stat.S_ISLNK(mode):
                os.unlink(name, dir_fd=parent)
                return True
            if not stat.S_ISDIR(mode):
                return False  # an object at the prefix itself is not below it
            # Relative to the directory opened above: rmtree follows no link below it either
            # (and refuses a link at its top).
            shutil.rmtree(name, ignore_errors=True, dir_fd=parent)
            return True
        finally:
            os.close(parent)

    def _open_parent(self, key: str) -> tuple[int | None, str]:
        """The directory that holds ``key``'s last name, opened name by name from the root with
        ``O_NOFOLLOW``, and that name; ``(None, name)`` when it is missing or a link is on the
        way. A removal works relative to this descriptor: a directory on the way swapped for a
        link after the key was checked (someone sharing the table, between two removals of a
        clean-up) is never followed out of the root, as a removal by path would be (I11)."""
        parts = key.split("/")
        if not key or not parts[-1]:
            raise UnsafePathError(None, f"storage key {key!r} names no object below {self.root}")
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)  # the root's own path may be a link
        try:
            for part in parts[:-1]:
                below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = below
        except (FileNotFoundError, NotADirectoryError):
            os.close(fd)
            return None, parts[-1]
        except OSError as exc:
            os.close(fd)
            if exc.errno == errno.ELOOP:
                return None, parts[-1]  # a link on the way: nothing is removed through it
            raise
        return fd, parts[-1]


def _read_bounded(fh: BinaryIO, limit: int) -> bytes:
    """At most ``limit`` + 1 bytes of ``fh``, asked for by the file's size: ``read(limit + 1)``
    allocates a buffer of the limit (16 MB for a commit, 256 MB for a plan-log entry) on every
    call, which cost the ask more than reading the small file itself."""
    size = os.fstat(fh.fileno()).st_size
    data = fh.read(min(size, limit) + 1)
    if size < len(data) <= limit:
        # It grew since the fstat (not a file airflow-eod writes): read on, still bounded.
        data += fh.read(limit + 1 - len(data))
    return data


def _write_temporary(directory: str, data: bytes, *, mode: int | None = None) -> str:
    """A temporary file in ``directory`` holding ``data``, flushed to disk."""
    fd, tmp = tempfile.mkstemp(prefix=_TMP, dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def open_regular(path: str) -> BinaryIO:
    """``open(path, "rb")`` for a regular file only: a symbolic link (which may lead out of the
    table, to ``/dev/zero`` say) or a device or FIFO (whose read never ends, or never starts)
    raises :class:`BoundError` without being read; :class:`NotFound` when nothing is there,
    other ``OSError`` as ``open``."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it changes nothing for a file.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError as exc:
        raise NotFound(exc.errno, exc.strerror, path) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise BoundError("is a symbolic link, which is not followed") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BoundError("is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _make_directories(directory: str) -> None:
    """``os.makedirs``, then fsync the parent of every directory it created: a new entry is
    only as durable as the chain of directory entries that leads to it."""
    missing: list[str] = []
    probe = os.path.abspath(directory)
    while not os.path.isdir(probe):
        missing.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    os.makedirs(directory, exist_ok=True)
    for created in reversed(missing):
        fsync_directory(os.path.dirname(created))


def fsync_directory(directory: str) -> None:
    """Make the directory's entries durable.

    Fsyncing a file persists its content, not the name that points at it: until the
    directory itself is fsynced, a power cut can lose the new entry, and a plan or commit
    this process already reported as written would vanish.
    """
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
