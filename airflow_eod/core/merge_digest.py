"""Where a merge batch's key digest lives: the evidence ``verify`` judges merge tables by.

A merge commit rewrites files that hold other batches' rows, and later merges remove its
own files, so a merge batch's rows cannot be counted file by file the way an append's are.
What can be checked is the rule itself: each key the batch loaded is live at the batch's
ordering value or a newer one, unless a delete superseded it. For that the merge job writes,
before its commit, the batch's rows after the in-batch dedupe reduced to their key columns,
their ordering value and whether they delete their key (``DELETE_COLUMN``), as Parquet in a
folder of its own attempt, named in the manifest's ``extra["merge"]["keys_dir"]``::

    _eod/merge_keys/<pipeline>/<batch key>/g<generation>-<attempt>/

The folder is under ``_eod`` (VACUUM leaves it alone, readers never list it) and holds only
airflow-eod's files. :func:`digest_dir` builds it for the writer, :func:`checked_digest_dir`
refuses any other value a manifest names (the manifest is table content: a hostile one
naming ``../../etc`` is refused by :func:`~airflow_eod.core.table_layout.path_part` before
anything is read).
"""

from __future__ import annotations

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import UnsafePathError
from airflow_eod.core.table_layout import META_DIR, path_part

DIGEST_DIR = "merge_keys"
# The digest's column that says whether the row deletes its key (merge_rules reserves the
# ``_eod_`` prefix, so no key or ordering column can be called that).
DELETE_COLUMN = "_eod_delete"
# The manifest's ``extra["merge"]`` entry that names the digest folder.
KEYS_DIR_ENTRY = "keys_dir"


def batch_digests(batch: BatchKey) -> str:
    """The folder, relative to the table root, that holds every attempt's digest of ``batch``."""
    return "/".join(
        (META_DIR, DIGEST_DIR, path_part(batch.pipeline_id, "pipeline id"), path_part(batch.key, "batch key"))
    )


def digest_dir(batch: BatchKey, generation: int, attempt_id: str) -> str:
    """The digest folder, relative to the table root, of one attempt of ``batch``."""
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        raise UnsafePathError(None, f"generation {generation!r} is not a non-negative integer")
    return f"{batch_digests(batch)}/g{generation}-{path_part(attempt_id, 'attempt id')}"


def checked_digest_dir(value: object, batch: BatchKey, generation: int) -> str:
    """``value`` (a manifest's ``keys_dir``) if it names a digest folder of ``batch`` at
    ``generation``; else :class:`UnsafePathError` saying why, before anything is read.

    :param value: what the manifest says.
    :param batch: the batch whose manifest it is.
    :param generation: the generation the manifest is of.
    """
    if not isinstance(value, str):
        raise UnsafePathError(batch.label, f"keys_dir {value!r} is not a relative path")
    parts = value.split("/")
    for part in parts:  # a "..", an empty part (a leading "/"), a NUL: refused here
        path_part(part, "keys_dir component")
    own = batch_digests(batch).split("/")
    prefix = f"g{generation}-"
    if len(parts) != len(own) + 1 or parts[:-1] != own or not parts[-1].startswith(prefix):
        raise UnsafePathError(
            batch.label,
            f"keys_dir {value!r} is not a folder {'/'.join(own)}/{prefix}<attempt> of the batch's own",
        )
    path_part(parts[-1][len(prefix) :], "attempt id")
    return value
