"""The object-store backend of the storage seam, over obstore (the Python binding of the Rust
``object_store`` crate that delta-rs commits with).

:class:`ObjectStorage` holds what every store shares; :class:`S3Storage` (here), and the
Azure and GCS classes beside it, say how a URL and delta-rs' storage options become an
obstore store, and which answers of their store mean "retry" and "the key is taken".

Keys are relative to a root: a bucket and a prefix within it (``s3://bucket/prefix``). The
six calls of :class:`~airflow_eod.core.storage.base.Storage` map to S3 as follows:

- ``put_if_absent``: ``PutObject`` with ``If-None-Match: *`` (obstore's ``mode="create"``).
  A 412 (obstore's ``AlreadyExistsError``) means the key is taken: someone else's write,
  unless an ``attempt`` is given and the object read back is the bytes meant (this
  attempt's write whose reply was lost, then retried). A 409 ``ConditionalRequestConflict``
  (a concurrent conditional write still in flight) and a 503 ``SlowDown`` are retried with
  bounded, jittered backoff. A timeout, a connection error or another 5xx after the request
  was sent may have landed: :class:`~airflow_eod.core.storage.base.UnknownOutcome` is raised
  and :func:`~airflow_eod.core.storage.base.put_settled` settles it by reading back.
- ``put``: a plain ``PutObject`` (atomic for readers: a reader sees the old object or the
  new one). ``private=True`` means nothing in S3: who may read an object is the bucket's
  policy and the role's, not a mode of the object; it is accepted and ignored.
- ``get``: ``GetObject``; with ``limit``, an object whose ``Content-Length`` is larger is
  refused before its body is read (one request). ``get_range``: a ranged ``GetObject``.
- ``head``: ``HeadObject``; :attr:`Head.tag` is the ETag, :attr:`Head.mtime_ns` the
  ``Last-Modified`` time (whole seconds in S3).
- ``list``: ``ListObjectsV2`` with ``Delimiter="/"`` (every page), the objects and
  sub-prefixes directly under the prefix, sorted.
- ``delete``: ``HeadObject`` then ``DeleteObject`` (S3 answers a delete of nothing with
  204 too; the head tells "removed" from "nothing there"). ``delete_prefix``: a listing of
  everything under the prefix, then ``DeleteObjects`` in batches.

A store has no symbolic links, FIFOs or devices: every key names a plain object, so the
refusals of the local backend (links, non-regular files) have nothing to refuse here; a key
that could climb (``..``, ``.``, an empty segment, a leading ``/``) is still refused, so that
no key names anything outside the root prefix (invariant I11).

:attr:`ObjectStorage.requests` counts the requests this instance made, by S3 operation (the
calls it made to obstore; obstore's own retries of a 5xx or a dropped connection inside one
call are not seen).
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import obstore
from obstore.exceptions import AlreadyExistsError, PreconditionError
from obstore.store import S3Store

if TYPE_CHECKING:
    from obstore.store import ObjectStore

from airflow_eod.core.errors import UnsafePathError
from airflow_eod.core.storage.base import (
    BoundError,
    Head,
    NotFound,
    UnknownOutcome,
    UnlistableKey,
    check_attempt,
    check_key,
    holds,
)
from airflow_eod.core.storage.option_names import OptionNames

# Retries of a 409 ConditionalRequestConflict or a 503 SlowDown that reach this module (after
# obstore's own retries of a 5xx), and the backoff between them.
CONFLICT_RETRIES = 8
BACKOFF_FIRST = 0.05
BACKOFF_MAX = 2.0
# Objects per DeleteObjects request (S3's limit is 1,000).
DELETE_BATCH = 1000

_STATUS = re.compile(r"status code: (\d{3})")
# The key in the debug form of obstore's InvalidPathError (``path: "a/b\tc.csv"``), escaped
# as Rust escapes a string's debug form.
_BAD_PATH = re.compile(r'path: "((?:[^"\\]|\\.)*)"')
_RUST_ESCAPE = re.compile(r"\\(u\{[0-9a-fA-F]+\}|.)")
_RUST_CHARS = {"t": "\t", "n": "\n", "r": "\r", "0": "\0"}

# delta-rs' names of storage options (AWS_*) -> obstore's S3 configuration keys.
S3_OPTIONS = OptionNames(
    store="S3",
    config={
        "AWS_ENDPOINT_URL": "endpoint",
        "AWS_ENDPOINT": "endpoint",
        "AWS_ACCESS_KEY_ID": "access_key_id",
        "AWS_SECRET_ACCESS_KEY": "secret_access_key",
        "AWS_SESSION_TOKEN": "session_token",
        "AWS_REGION": "region",
        "AWS_DEFAULT_REGION": "region",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "virtual_hosted_style_request",
    },
    client_flags={"AWS_ALLOW_HTTP": "allow_http"},
)


def _status(exc: BaseException) -> int | None:
    """The HTTP status in an obstore error's message, when the store answered at all."""
    found = _STATUS.search(str(exc))
    return int(found.group(1)) if found else None


def _unlistable(exc: BaseException, root: str) -> UnlistableKey:
    """The key that made obstore's listing fail, as a URI below ``root``'s bucket."""
    found = _BAD_PATH.search(str(exc))
    if found is None:
        return UnlistableKey(root)

    def char(m: re.Match[str]) -> str:
        esc = m.group(1)
        return chr(int(esc[2:-1], 16)) if esc.startswith("u{") else _RUST_CHARS.get(esc, esc)

    bucket = "/".join(root.split("/")[:3])  # scheme://bucket
    return UnlistableKey(f"{bucket}/{_RUST_ESCAPE.sub(char, found.group(1))}")


def _backoff(n: int) -> None:
    time.sleep(random.uniform(0, min(BACKOFF_MAX, BACKOFF_FIRST * 2**n)))


class ObjectStorage:
    """The bytes under one root of an object store (a table's root), over an obstore store.

    Subclasses build the store from a URL (``from_url``) and may say which errors of their
    store are a conflict to retry (:meth:`_retryable`) rather than a refusal.

    :param store: the obstore store, already rooted at the prefix.
    :param root: the root as a URL, for messages (``s3://bucket/prefix``).
    """

    def __init__(self, *, store: ObjectStore, root: str) -> None:
        self._store = store
        self.root = root.rstrip("/")
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _retryable(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the store asking to be asked again (throttling, a conflicting
        write in flight), so that a backoff and the same request are the answer."""
        return _status(exc) == 503 or "SlowDown" in str(exc)

    def _taken_conflict(self, exc: BaseException) -> bool:
        """Whether a conditional put's "already exists" error is in fact a conflict with a
        write still in flight (S3's 409 ConditionalRequestConflict), to be retried."""
        return False

    def _count(self, operation: str, n: int = 1) -> None:
        with self._lock:
            self.requests[operation] += n

    def where(self, key: str) -> str:
        return f"{self.root}/{key}"

    def key_of(self, where: str) -> str:
        # The root as this storage spells it: az://c/p for abfss://c@account.dfs.core.windows.net/p.
        if not where.startswith(self.root + "/") or where == self.root + "/":
            raise UnsafePathError(None, f"{where} is not below {self.root}")
        return where[len(self.root) + 1 :]

    # -- reading -------------------------------------------------------------------
    def get(self, key: str, *, limit: int | None = None) -> bytes:
        check_key(key, self.root)
        self._count("GetObject")
        try:
            result = obstore.get(self._store, key)
        except FileNotFoundError as exc:
            raise NotFound(2, "no such object", self.where(key)) from exc
        if limit is not None and int(result.meta["size"]) > limit:
            raise BoundError(f"is larger than {limit} bytes")  # its body is never read
        data = bytes(result.bytes())
        if limit is not None and len(data) > limit:
            raise BoundError(f"is larger than {limit} bytes")
        return data

    def get_range(self, key: str, start: int, length: int) -> bytes:
        check_key(key, self.root)
        if length <= 0:
            if self.head(key) is None:
                raise NotFound(2, "no such object", self.where(key))
            return b""
        self._count("GetObject")
        try:
            return bytes(obstore.get_range(self._store, key, start=start, length=length))
        except FileNotFoundError as exc:
            raise NotFound(2, "no such object", self.where(key)) from exc
        except obstore.exceptions.BaseError as exc:
            if _status(exc) == 416:  # the range starts at or past the end: nothing there
                return b""
            raise

    def head(self, key: str) -> Head | None:
        check_key(key, self.root)
        self._count("HeadObject")
        try:
            meta = obstore.head(self._store, key)
        except FileNotFoundError:
            return None
        return Head(int(meta["size"]), int(meta["last_modified"].timestamp() * 1e9), str(meta["e_tag"] or ""))

    def list(self, prefix: str) -> list[str]:
        directory = check_key(prefix.strip("/"), self.root, empty=True)
        self._count("ListObjectsV2")
        found = obstore.list_with_delimiter(self._store, directory or None)
        cut = len(directory) + 1 if directory else 0
        names = [p[cut:] for p in found["common_prefixes"]]
        names += [o["path"][cut:] for o in found["objects"]]
        # Once each: a folder and its marker object (Hadoop's ABFS driver leaves one beside
        # each folder it makes on a Blob endpoint) are one name.
        return sorted({n for n in names if n})

    def walk(self, prefix: str = "") -> Iterator[tuple[str, Head]]:
        """Every object under the directory ``prefix`` at any depth, as (key, head), in the
        store's order (by key), page by page: one ``ListObjectsV2`` per 1,000 objects, and no
        ``HeadObject`` (a listing carries each object's size, ETag and time).

        Not in the :class:`~airflow_eod.core.storage.base.Storage` protocol: a landing
        directory on a store is planned from it (:mod:`airflow_eod.sources.landing_store`);
        the table's own bytes are listed one level at a time. A folder marker (an empty object
        whose key ends in ``/``) is listed without its ``/``, which obstore drops: as ``d`` for
        ``d/``, as ``""`` for the prefix's own; :meth:`head` of that key finds nothing.

        :raises UnlistableKey: a key obstore cannot name (a control character, an empty
            segment) is under the prefix: obstore fails the listing's whole page with it (its
            issue 429), so the listing cannot go past it without losing the page's other keys.
        """
        directory = check_key(prefix.strip("/"), self.root, empty=True)
        pages = obstore.list(self._store, directory + "/" if directory else None, chunk_size=self.list_page)
        while True:
            try:
                page = next(pages)
            except StopIteration:
                return
            except obstore.exceptions.InvalidPathError as exc:
                raise _unlistable(exc, self.root) from None
            self._count("ListObjectsV2")
            for meta in page:
                key = meta["path"]
                # obstore lists "d/" by path segments: "dd/..." is not under it; checked anyway.
                if directory and not key.startswith(directory + "/"):
                    continue
                yield (
                    key,
                    Head(
                        int(meta["size"]),
                        int(meta["last_modified"].timestamp() * 1e9),
                        str(meta["e_tag"] or ""),
                    ),
                )

    def has_prefix(self, prefix: str) -> bool:
        directory = check_key(prefix.strip("/"), self.root)
        self._count("ListObjectsV2")
        # The first page only (obstore asks for up to 1,000 keys a page): one request.
        for page in obstore.list(self._store, directory + "/", chunk_size=1):
            return any(o["path"].startswith(directory + "/") for o in page)
        return False

    # -- writing -------------------------------------------------------------------
    def put_if_absent(self, key: str, data: bytes, *, attempt: str | None = None) -> bool:
        check_attempt(data, attempt)
        check_key(key, self.root)
        for n in range(CONFLICT_RETRIES + 1):
            self._count("PutObject(If-None-Match)")
            try:
                obstore.put(self._store, key, data, mode="create", use_multipart=False)
                return True
            except (AlreadyExistsError, PreconditionError) as exc:
                if self._taken_conflict(exc):
                    if n < CONFLICT_RETRIES:
                        _backoff(n)
                        continue
                    raise UnknownOutcome(f"put-if-absent of {self.where(key)}: still in conflict") from exc
                # 412: the key is taken. Ours only if this attempt's bytes are there (a reply
                # lost and the request retried, by obstore or by the writer).
                if attempt is None:
                    return False
                held = holds(self, key, data)
                if held is not None:
                    return held
                # Taken, then gone (removed meanwhile): put again.
            except (FileNotFoundError, PermissionError):
                raise
            except obstore.exceptions.BaseError as exc:
                status = _status(exc)
                if self._retryable(exc) and n < CONFLICT_RETRIES:
                    _backoff(n)
                    continue
                if status is not None and 400 <= status < 500:
                    raise  # refused (403, 400): nothing was written
                # A timeout, a dropped connection or a 5xx after the request was sent.
                raise UnknownOutcome(f"put-if-absent of {self.where(key)}: {exc}") from exc
        raise UnknownOutcome(f"put-if-absent of {self.where(key)}: still unsettled")

    def put(self, key: str, data: bytes, *, private: bool = False) -> None:
        """A plain ``PutObject``; ``private`` has no meaning in S3 (the bucket policy decides
        who reads an object) and is ignored."""
        check_key(key, self.root)
        for n in range(CONFLICT_RETRIES + 1):
            self._count("PutObject")
            try:
                obstore.put(self._store, key, data, use_multipart=False)
                return
            except obstore.exceptions.BaseError as exc:
                if self._retryable(exc) and n < CONFLICT_RETRIES:
                    _backoff(n)
                    continue
                raise

    def delete(self, key: str) -> bool:
        if self.head(key) is None:
            return False
        self._count("DeleteObject")
        obstore.delete(self._store, key)
        return True

    def rename(self, src: str, dst: str) -> None:
        """Move the object at ``src`` to ``dst`` (overwritten if there): a store has no rename,
        so a copy and a delete (two requests). Not in the
        :class:`~airflow_eod.core.storage.base.Storage` protocol: for objects no one else
        writes (an attempt's staged files)."""
        check_key(src, self.root)
        check_key(dst, self.root)
        self._count("CopyObject")
        self._count("DeleteObject")
        obstore.rename(self._store, src, dst, overwrite=True)

    def delete_prefix(self, prefix: str) -> bool:
        check_key(prefix.strip("/"), self.root)  # never the whole root
        keys = [key for key, _ in self.walk(prefix)]
        for i in range(0, len(keys), self.delete_batch):
            self._count("DeleteObjects")
            self._delete_batch(keys[i : i + self.delete_batch])
        return bool(keys)

    # Objects per batch delete request (S3's DeleteObjects takes 1,000) and per listing page
    # (S3 answers up to 1,000 keys a page).
    delete_batch = DELETE_BATCH
    list_page = 1000

    def _delete_batch(self, keys: Sequence[str]) -> None:
        obstore.delete(self._store, keys)


class S3Storage(ObjectStorage):
    """The bytes under ``s3://bucket/prefix`` (a table's root).

    :param bucket: the bucket.
    :param prefix: the root prefix within it (no leading or trailing ``/``); keys are below it.
    :param config: obstore's S3 configuration (``endpoint``, ``region``, ``access_key_id``,
        ``secret_access_key``, ...).
    :param client_options: obstore's HTTP client options (``allow_http``, ``timeout``, ...).
    :param retry_config: obstore's retry configuration; by default 3 retries within 30 s.
    """

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str = "",
        config: Mapping[str, Any] | None = None,
        client_options: Mapping[str, Any] | None = None,
        retry_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if self.prefix:
            check_key(self.prefix, f"s3://{bucket}")
        store = S3Store(
            bucket,
            prefix=self.prefix or None,
            config=dict(config or {}),  # type: ignore[arg-type]
            client_options=dict(client_options or {}),  # type: ignore[arg-type]
            retry_config=dict(retry_config or default_retry()),  # type: ignore[arg-type]
        )
        super().__init__(store=store, root=f"s3://{bucket}/{self.prefix}")

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, str] | None = None) -> S3Storage:
        """The storage at ``s3://bucket/prefix``, with storage options named as delta-rs names
        them (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_REGION``, ``AWS_ALLOW_HTTP``...).

        :raises ValueError: when ``url`` is no ``s3://`` URL with a bucket, or an option is unknown.
        """
        scheme, _, rest = url.partition("://")
        bucket, _, prefix = rest.partition("/")
        if scheme not in ("s3", "s3a") or not bucket:
            raise ValueError(f"not an S3 URL with a bucket: {url!r}")
        config, client = S3_OPTIONS.map(options)
        return cls(bucket=bucket, prefix=prefix, config=config, client_options=client)

    def _retryable(self, exc: BaseException) -> bool:
        text = str(exc)
        return _status(exc) in (409, 503) or "ConditionalRequestConflict" in text or "SlowDown" in text

    def _taken_conflict(self, exc: BaseException) -> bool:
        return _status(exc) == 409 or "ConditionalRequestConflict" in str(exc)


def default_retry() -> dict[str, Any]:
    """obstore's retries inside one call: 3 within 30 s."""
    from datetime import timedelta

    return {"max_retries": 3, "retry_timeout": timedelta(seconds=30)}
