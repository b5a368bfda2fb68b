"""Where things live in a table: the directories airflow-eod writes (the plan log, and one
data directory per batch attempt), and the one safe way to join a name onto a root."""

from __future__ import annotations

import functools
import os
import re
import stat

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import UnsafePathError

# Directory inside the table root that holds the plan log. The leading underscore keeps
# Delta's VACUUM away from it, and readers never look outside ``_delta_log``'s list.
META_DIR = "_eod"
# Directory inside the table root that holds staged and committed data files. No leading
# underscore or dot: VACUUM must be able to delete files that a restatement removed.
DATA_DIR = "eod_data"


# One path component airflow-eod builds from a value it did not choose itself (a table id,
# a batch key, an attempt id, a name listed in the plan log): no separator, no NUL, not
# "." or "..", no leading dot or dash. Every such value is a single name, never a path.
# (A leading "_" is allowed: the provider's own directories, "_eod", start with one.)
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}$")


@functools.lru_cache(maxsize=4096)
def _is_part(value: str) -> bool:
    # The same few names (pipeline ids, batch keys, "_eod") are checked on every path built.
    return _PART.match(value) is not None


def path_part(value: object, what: str = "path component") -> str:
    """``value`` if it is one safe file name (see ``_PART``), else :class:`UnsafePathError`.

    :param value: a name read from a table, a plan log, a landing directory or a setting.
    :param what: what the value is, for the error (``table id``, ``attempt id``...).
    """
    if not isinstance(value, str) or not _is_part(value):
        raise UnsafePathError(
            None,
            f"{what} {value!r} cannot name a file: airflow-eod builds paths only from names of "
            "1-255 letters, digits, '_', '.', '-' that start with a letter, digit or '_' (no "
            "'/', '..', NUL or leading dot). A table, plan log or setting holding such a value was "
            "written by something other than airflow-eod; nothing was read or written there",
        )
    return value


def is_inside(path: str, root: str) -> bool:
    """Whether ``path``, links resolved, is ``root`` or below it (``root`` resolved too)."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def under(root: str, *parts: str, what: str = "path component", seen: set[str] | None = None) -> str:
    """``root`` joined with ``parts``, each checked by :func:`path_part`, and refused unless
    the result, with every link on the way resolved, stays under ``root``.

    The one way airflow-eod joins a name it did not choose onto a root: a hostile name
    (``../x``, ``/etc``) and a link planted inside the root (``_eod`` pointing elsewhere)
    are both refused here, before anything is read, written or removed (invariant I11).

    :param root: the table root, or a directory airflow-eod owns inside it.
    :param parts: single names, in order.
    :param what: what the names are, for the error.
    :param seen: directories already found to be no link by this caller (one ask or one
        load builds several paths in the same directories): not looked at again.
    """
    for part in parts:
        path_part(part, what)
    return no_link_out(root, parts, seen)


def no_link_out(root: str, parts: tuple[str, ...] | list[str], seen: set[str] | None = None) -> str:
    """``root`` joined with ``parts`` (names already checked by the caller), refused with
    :class:`UnsafePathError` when a link on the way leads out of ``root`` (see :func:`under`).

    :param seen: as for :func:`under`.
    """
    base = root.rstrip(os.sep)
    path = base + os.sep + os.sep.join(parts) if parts else root
    # Plain names cannot climb, so only a link below the root can lead out: look for one
    # (an lstat per existing component, not a realpath from "/" on every call: the ask
    # builds several plan-log paths), and resolve the whole path only when there is one.
    probe, linked = base, False
    for part in parts:
        probe = probe + os.sep + part
        if seen is not None and probe in seen:
            continue
        try:
            mode = os.lstat(probe).st_mode
        except (FileNotFoundError, NotADirectoryError):
            break  # nothing exists below a missing entry, so no link either
        if stat.S_ISLNK(mode):
            linked = True
            break
        if seen is not None and stat.S_ISDIR(mode):
            seen.add(probe)
    if linked and not is_inside(path, root):
        raise UnsafePathError(
            None,
            f"{path} resolves to {os.path.realpath(path)}, outside {root}: a link inside the "
            "table leads out of it. airflow-eod reads, writes and removes nothing outside the "
            "table; remove the link (see the runbook, 'hostile input')",
        )
    return path


def batch_dir(batch: BatchKey) -> str:
    """The directory, relative to the table root, that holds every attempt of ``batch``."""
    return f"{DATA_DIR}/{path_part(batch.pipeline_id, 'pipeline id')}/{path_part(batch.key, 'batch key')}"


def attempt_dir(batch: BatchKey, generation: int, attempt_id: str) -> str:
    """The directory, relative to the table root, unique to one attempt of ``batch``."""
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        raise UnsafePathError(None, f"generation {generation!r} is not a non-negative integer")
    return f"{batch_dir(batch)}/g{generation}-{path_part(attempt_id, 'attempt id')}"
