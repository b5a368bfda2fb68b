"""An index of a checkpoint's markers beside the table: the ask reads one small bucket of it
instead of decoding the checkpoint's whole marker column.

A Delta checkpoint holds one row per live file and one per live ``txn`` marker; reading the
markers back costs a Parquet decode that grows with them (about 3 ms at 10,000 markers
here, more than everything else the ask reads). When airflow-eod's committer writes a
checkpoint, it reads it back once, as the ask would, and writes under
``_eod/checkpoints/<version>.<identity>/``:

- ``b<N>.json``: the markers whose app id hashes to bucket ``N`` (``{app id: version}``);
- ``index.json``, last: the checkpoint's ``metaData`` and ``protocol`` actions, the number
  of buckets and each bucket's checksum.

The index is derived, never trusted on its own: ``identity`` is the checkpoint files'
sizes and modification times, so a checkpoint re-written at the same version (a table
re-created at the same path) has no index until its own is written; a bucket whose
checksum does not match makes the reading decode the checkpoint itself. Nothing here needs
to be durable: a file a power cut truncated fails its checksum and is read around. Checkpoints
written by other engines have no index and are read as before.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
from collections.abc import Callable
from typing import Any

from airflow_eod.core import bounded_json
from airflow_eod.core.errors import UnsafePathError
from airflow_eod.core.storage import Storage
from airflow_eod.core.table_layout import META_DIR, path_part
from airflow_eod.core.table_ref import TableRef

log = logging.getLogger(__name__)

INDEX_FORMAT = 1
_DIR = "checkpoints"
_PER_BUCKET = 256  # markers per bucket, about 20 KB of JSON
_KEPT = 3  # newest indexes kept: a reading may still be on the one before the newest
# The name of an index's folder (see _index_dir): nothing else under _eod/checkpoints is one,
# and nothing else is removed from there (a link inside the table may lead it elsewhere).
_INDEX_NAME = re.compile(r"^\d{20}\.[0-9a-f]{16}$")


class IndexMismatch(Exception):
    """A bucket is missing or does not match its checksum: read the checkpoint instead."""


def _identity(store: Storage, files: list[str]) -> str:
    parts = []
    for path in files:
        name = os.path.basename(path)
        head = store.head(f"_delta_log/{name}")
        if head is None:
            raise FileNotFoundError(errno.ENOENT, "no checkpoint file", path)
        parts.append(f"{name}:{head.size}:{head.mtime_ns}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def _index_dir(store: Storage, version: int, files: list[str]) -> str:
    """The key of the index of the checkpoint ``files`` at ``version``. The storage refuses
    (UnsafePathError) a link in the table that leads _eod/checkpoints out of it: old indexes
    are removed from there."""
    return f"{META_DIR}/{_DIR}/{path_part(f'{version:020d}.{_identity(store, files)}')}"


def _bucket_of(app_id: str, buckets: int) -> int:
    return int.from_bytes(hashlib.blake2b(app_id.encode(), digest_size=4).digest(), "big") % buckets


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _put(store: Storage, key: str, text: str) -> None:
    """Write ``text`` at ``key`` whole or not at all. Taken already: the same checkpoint
    indexed by a racer (same content, or caught by the checksums)."""
    store.put_if_absent(key, text.encode())


def write_index(
    ref: TableRef, version: int, files: list[str], state: dict[str, Any], markers: dict[str, int]
) -> None:
    """Index the checkpoint at ``version`` from what reading it gave.

    :param files: the checkpoint's files.
    :param state: its ``metaData`` and ``protocol`` actions.
    :param markers: its markers, app id to version.
    """
    store = ref.storage()
    where = _index_dir(store, version, files)
    store.where(where)  # refused before anything is written when a link leads out
    buckets = max(1, -(-len(markers) // _PER_BUCKET))
    split: list[dict[str, int]] = [{} for _ in range(buckets)]
    for app_id, marker in markers.items():
        split[_bucket_of(app_id, buckets)][app_id] = marker
    checksums = []
    for n, part in enumerate(split):
        text = json.dumps(part, sort_keys=True)
        _put(store, f"{where}/b{n}.json", text)
        checksums.append(_digest(text))
    body = {
        "format": INDEX_FORMAT,
        "version": version,
        "metaData": state.get("metaData"),
        "protocol": state.get("protocol"),
        "buckets": buckets,
        "checksums": checksums,
        "markers": len(markers),
    }
    _put(store, f"{where}/index.json", json.dumps(body, sort_keys=True))
    _drop_old(store, where.rsplit("/", 1)[1])


def _drop_old(store: Storage, written: str) -> None:
    """Remove indexes older than the newest few (their checkpoints age out of the log too),
    never the one just ``written`` (a table re-created at the same path starts its versions
    again below its predecessor's)."""
    root = f"{META_DIR}/{_DIR}"
    names = [n for n in store.list(root) if _INDEX_NAME.match(n)]
    versions = sorted({n.split(".", 1)[0] for n in names})
    keep = set(versions[-_KEPT:])
    for name in names:
        if name.split(".", 1)[0] not in keep and name != written:
            store.delete_prefix(f"{root}/{name}")


class IndexedMarkers:
    """The markers of an indexed checkpoint, one bucket read per app id asked about."""

    def __init__(self, store: Storage, where: str, buckets: int, checksums: list[str]) -> None:
        self._store = store
        self._where = where
        self._buckets = buckets
        self._checksums = checksums
        self._loaded: dict[int, dict[str, int]] = {}

    def lookup(self, app_id: str) -> int | None:
        n = _bucket_of(app_id, self._buckets)
        if n not in self._loaded:
            try:
                text = self._store.get(f"{self._where}/b{n}.json", limit=bounded_json.MAX_SMALL_FILE)
            except FileNotFoundError as exc:
                raise IndexMismatch(f"bucket {n} is gone") from exc
            except (OSError, ValueError) as exc:  # a link, a device, too large
                raise IndexMismatch(f"bucket {n} cannot be read: {exc}") from exc
            if hashlib.sha256(text).hexdigest() != self._checksums[n]:
                raise IndexMismatch(f"bucket {n} does not match its checksum")
            try:
                bucket = bounded_json.loads(text)
            except ValueError as exc:
                raise IndexMismatch(f"bucket {n} is not JSON: {exc}") from exc
            # The index is derived and read around when it does not fit: a bucket is an object
            # of app ids to marker versions, or it is not used.
            if not isinstance(bucket, dict) or not all(type(v) is int for v in bucket.values()):
                raise IndexMismatch(f"bucket {n} is not an object of app ids to marker versions")
            self._loaded[n] = bucket
        return self._loaded[n].get(app_id)


def read_index(ref: TableRef, version: int, files: list[str]) -> tuple[dict[str, Any], IndexedMarkers] | None:
    """The checkpoint's ``metaData``/``protocol`` and its markers, from its index; ``None``
    when it has none (or one that does not fit)."""
    store = ref.storage()
    try:
        where = _index_dir(store, version, files)
        body = bounded_json.loads(store.get(f"{where}/index.json", limit=bounded_json.MAX_SMALL_FILE))
    except (OSError, ValueError, UnsafePathError):  # ValueError: not JSON, or out of bounds
        return None
    if (
        not isinstance(body, dict)
        or body.get("format") != INDEX_FORMAT
        or body.get("version") != version
        or not isinstance(body.get("metaData"), dict)
        or not isinstance(body.get("protocol"), dict)
        or not isinstance(body.get("checksums"), list)
        or not all(isinstance(c, str) for c in body["checksums"])
        or type(body.get("buckets")) is not int
        or len(body["checksums"]) != body["buckets"]
        or body["buckets"] < 1
    ):
        return None
    state = {"metaData": body["metaData"], "protocol": body["protocol"]}
    return state, IndexedMarkers(store, where, int(body["buckets"]), list(body["checksums"]))


def index_after_checkpoint(
    ref: TableRef,
    version: int,
    files: list[str],
    read: Callable[[list[str], Storage], tuple[dict[str, Any], dict[str, int]]],
) -> None:
    """Write the index of a checkpoint just written, best effort: without it, readings decode
    the checkpoint, slower and never wrong."""
    table_path = ref.path
    try:
        state, markers = read(files, ref.storage())
        write_index(ref, version, files, state, markers)
    except Exception as exc:
        log.warning("could not index the checkpoint of %s at version %d: %s", table_path, version, exc)
