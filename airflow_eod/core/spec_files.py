"""The spec files of submitted attempts, and their removal once their batch is decided.

A submit-mode attempt writes its load spec to ``<table>/_eod/specs/`` for the driver to read
when it starts (and the driver may leave an ``.error.json`` beside it). The task removes
both once spark-submit returns; a task that is SIGKILLed (a worker's OOM, a lost node)
never gets there, so its files would stay forever. The name of a spec says whose it is
(``<batch hash>-g<generation>-<attempt>.json``), so the step that settles a committed batch
removes every earlier attempt's files of that batch, at the committed generation or older,
without reading any of them: once the table holds the batch at that generation, every such
attempt is fenced, and a driver still starting that finds its spec gone fails without
writing anything. Specs of a newer generation (a restatement in flight) and of other
batches are left alone.
"""

from __future__ import annotations

import logging
import os
import re

from airflow_eod.core import bounded_json
from airflow_eod.core.ask import BatchStatus
from airflow_eod.core.batch import BatchKey, fingerprint
from airflow_eod.core.errors import UnsafePathError
from airflow_eod.core.table_layout import META_DIR, path_part
from airflow_eod.core.table_ref import TableRef

log = logging.getLogger(__name__)

SPECS_DIR = os.path.join(META_DIR, "specs")
_SPECS_KEY = f"{META_DIR}/specs"
# The name of the file a driver that failed leaves beside its spec (spark/driver.py).
ERROR_SUFFIX = ".error.json"
_NAME = re.compile(r"^(?P<batch>[0-9a-f]{24})-g(?P<gen>[0-9]{1,9})-(?P<attempt>[0-9A-Za-z_-]{1,64})\.json")


def _batch_tag(batch: BatchKey) -> str:
    # A hash, not the ids themselves: pipeline ids and batch keys may be long, and a file
    # name must stay short; the hash also keeps one batch's prefix from matching another's.
    return fingerprint([batch.pipeline_id, batch.key])[:24]


def spec_key(batch: BatchKey, generation: int, attempt_id: str) -> str:
    """The storage key of the spec of ``attempt_id`` (of ``batch`` at ``generation``), in the
    table: the attempt id ends up in a name, so it must be one safe name."""
    return f"{_SPECS_KEY}/{_batch_tag(batch)}-g{generation}-{path_part(attempt_id, 'attempt id')}.json"


def spec_path(ref: TableRef, batch: BatchKey, generation: int, attempt_id: str) -> str:
    """Where the spec of ``attempt_id`` lives (for the driver, which reads it by this name),
    refused when a link inside the table would lead it out."""
    return ref.storage().where(spec_key(batch, generation, attempt_id))


def write_spec(ref: TableRef, batch: BatchKey, generation: int, attempt_id: str, text: str) -> str:
    """Write the spec of an attempt, readable by this user only (it names the source's
    database and the table's layout, and ``_eod/`` may be shared with other teams);
    return where it is (for ``--spec``).

    :param ref: the table.
    :param batch: the batch.
    :param generation: the generation the attempt loads.
    :param attempt_id: the attempt.
    :param text: the spec's JSON.
    """
    store, key = ref.storage(), spec_key(batch, generation, attempt_id)
    store.put(key, text.encode(), private=True)
    return store.where(key)


def take_spec_files(ref: TableRef, batch: BatchKey, generation: int, attempt_id: str) -> bytes | None:
    """Remove the spec of an attempt whose spark-submit returned, and the error file its
    driver may have left beside it; the error file's bytes (bounded), or ``None``."""
    store, key = ref.storage(), spec_key(batch, generation, attempt_id)
    try:
        error: bytes | None = store.get(key + ERROR_SUFFIX, limit=bounded_json.MAX_SMALL_FILE)
    except (OSError, ValueError):  # none, or no plain file, or out of bounds: no error to tell
        error = None
    for name in (key, key + ERROR_SUFFIX):
        try:
            store.delete(name)
        except OSError:
            pass
    return error


def remove_decided_specs(ref: TableRef, status: BatchStatus) -> list[str]:
    """Remove the spec files (and drivers' error files) of every attempt of ``status``'s batch
    at the committed generation or older. Nothing happens unless the table holds the batch.

    :returns: the names removed.
    """
    if not status.committed or status.committed_generation is None:
        return []
    store = ref.storage()
    try:
        names = store.list(_SPECS_KEY)
    except UnsafePathError as exc:
        log.warning("batch %s: spec files left alone: %s", status.batch, exc)
        return []
    tag = _batch_tag(status.batch)
    removed: list[str] = []
    for name in names:
        m = _NAME.match(name)
        if m is None or m["batch"] != tag or int(m["gen"]) > status.committed_generation:
            continue
        try:
            # A plain file only: a link or directory that matches the name is not ours, and
            # the storage leaves it (as it does a file a racer removed first).
            if store.delete(f"{_SPECS_KEY}/{name}"):
                removed.append(name)
        except OSError:
            pass
    if removed:
        log.info("batch %s: removed %d spec file(s) of decided attempts", status.batch, len(removed))
    return removed
