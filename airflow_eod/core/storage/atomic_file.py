"""Put-if-absent files: the one primitive the plan log and the local Delta log rely on.

The content goes to a temporary file in the same directory, is flushed to disk, and is
then hard-linked to its final name; ``link`` fails if the name exists, so a reader sees
either nothing or the complete content, and of two writers exactly one wins. The winner
then fsyncs the directory, so that the new name, and not only the content, survives a
power cut.
"""

from __future__ import annotations

import os
import tempfile


def put_if_absent(path: str, text: str) -> bool:
    """Write ``text`` at ``path`` unless something is there; True if this call wrote it."""
    directory = os.path.dirname(path)
    _make_directories(directory)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-eod-", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.link(tmp, path)
    except FileExistsError:
        os.unlink(tmp)
        return False
    except BaseException:
        os.unlink(tmp)
        raise
    # The temporary name goes first so that the directory fsync below persists both the new
    # entry and the removal; a crash in between leaves only a stray ``.tmp-eod-`` file.
    os.unlink(tmp)
    fsync_directory(directory)
    return True


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


def write_private(path: str, text: str) -> None:
    """Write ``text`` at ``path`` readable and writable by this user only (0600), never
    through a link planted at ``path``: a submit spec names the source's database and the
    table's layout, and the directory it sits in may be shared with other teams."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # a file that was there keeps its old mode otherwise
        with os.fdopen(fd, "w") as fh:
            fd = -1
            fh.write(text)
    finally:
        if fd >= 0:
            os.close(fd)
