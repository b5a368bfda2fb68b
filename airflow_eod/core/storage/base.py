"""The storage seam: every byte airflow-eod reads or writes beside Spark goes through it.

The Delta log airflow-eod reads and appends to, ``_last_checkpoint``, the checkpoint index,
the plan log and its claims, commit records, submit specs and the staged files of
attempts that never committed all live in one place per table. :class:`Storage` is the
one small interface to that place; :class:`~airflow_eod.core.storage.local.LocalStorage`
(a local or shared POSIX filesystem) is its first backend, and the only module of
airflow-eod that knows about links, renames and fsync for these bytes.

Keys are ``/``-separated names relative to the backend's root (the table), such as
``_delta_log/00000000000000000042.json``; a key never starts with ``/`` and holds no
``.`` or ``..`` segment. A "directory" is only a key prefix: :meth:`Storage.list` names what
lies directly under one, as an object store's delimiter listing does.

Put-if-absent is the primitive the protocol rests on (a Delta commit, a frozen plan, a
claim: of two writers exactly one wins). A writer must be able to tell "I wrote it" from
"someone else did" even when the outcome of its write is unknown (a timeout after the
write landed, a retried request that then finds the key taken). So every body airflow-eod
writes with put-if-absent carries the id of the writing attempt
(:func:`airflow_eod.core.attempt.current_attempt_id`: a plan-log entry, a claim and a
commit record in their envelope, the table binding beside its table id, a Delta commit in
its manifest), and the writer passes it as ``attempt``. When the key is taken, the backend
reads the object back and reports this attempt's write when the stored bytes are the bytes
it meant to write (they carry the attempt id, so no other attempt wrote them).

When a backend cannot tell whether a write landed, its ``put_if_absent`` raises
:class:`UnknownOutcome`. Every writer of airflow-eod writes through :func:`put_settled`,
which settles it once, here, with :func:`settle_put`: read the object back and compare it
with the bytes meant (the same bytes: ours; other bytes: another attempt's; nothing: the
write did not land, so put again). :class:`~airflow_eod.core.storage.local.LocalStorage`
never raises it: a link is made or it is not, and a shared filesystem's lost reply after
the link was made is read back in place.

The object-store backends of the next issue implement the same six calls:

- S3: ``PutObject`` with ``If-None-Match: *`` (412 when taken); ``put`` is a plain
  ``PutObject`` (atomic for readers); ``list`` is ``ListObjectsV2`` with ``Delimiter="/"``.
- Azure Blob: ``Put Blob`` with ``If-None-Match: *`` (409 when taken).
- GCS: an upload with ``ifGenerationMatch=0`` (412 when taken).

On an unknown outcome (a timeout, a connection reset, a 5xx after the request may have
landed) each raises :class:`UnknownOutcome` from ``put_if_absent`` rather than guess, and
:func:`put_settled` settles it; on a taken key (412, 409) each reads back as
:meth:`Storage.put_if_absent` says. The contract suite in
``tests/core/test_storage_contract.py`` runs unchanged against every backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from airflow_eod.core.errors import UnsafePathError


class NotFound(FileNotFoundError):
    """No object at the key (a ``FileNotFoundError``: callers that treated a missing file as
    "nothing there" treat a missing object the same way)."""


class UnknownOutcome(OSError):
    """A backend cannot tell whether a put-if-absent landed (a timeout, a connection reset or
    a 5xx after the request was sent): the object may be there or not. A writer settles it
    with :func:`settle_put` (:func:`put_settled` does), never by guessing."""


class UnlistableKey(OSError):
    """A listing met a key that the store's client cannot name (a control character, an empty,
    ``.`` or ``..`` segment): obstore drops the whole page of the listing with it, so what else
    that page held is unknown, and no listing of the prefix can get past it.

    :param where: the key as a URI (``s3://bucket/key``), or the listed root when the client
        did not say which key it was.
    """

    def __init__(self, where: str) -> None:
        self.where = where
        super().__init__(f"the store's client cannot list the key {where!r}")


class BoundError(ValueError):
    """An object a reader refuses to read: larger than the reader's limit, or not a plain
    object (a symbolic link, a device, a FIFO, a directory)."""


@dataclass(frozen=True)
class Head:
    """What is known of an object without reading it.

    :param size: bytes.
    :param mtime_ns: when it was last written, nanoseconds since the epoch.
    :param tag: what tells this version of the object from another written at the same key
        later (inode and modification time locally; an ETag or generation in a store).
    """

    size: int
    mtime_ns: int
    tag: str

    @property
    def mtime(self) -> float:
        """When it was last written, seconds since the epoch."""
        return self.mtime_ns / 1e9


class Storage(Protocol):
    """The bytes of one table: its Delta log and everything airflow-eod keeps beside it."""

    def where(self, key: str) -> str:
        """The full location of ``key`` (a path, a URL), for messages and for engines that
        read the object themselves."""
        ...

    def key_of(self, where: str) -> str:
        """The key whose location (:meth:`where`) is ``where``: its inverse.

        :raises UnsafePathError: when ``where`` is not below this storage's root.
        """
        ...

    def get(self, key: str, *, limit: int | None = None) -> bytes:
        """The bytes of the object at ``key``.

        :param limit: read no more than this many bytes (+1): :class:`BoundError` when the
            object holds more.
        :raises NotFound: when there is no object at ``key``.
        :raises BoundError: when it is larger than ``limit`` or not a plain object.
        """
        ...

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """Bytes ``start`` up to ``start + length`` of the object at ``key``: fewer at its end,
        none past it. A ranged ``get`` (an HTTP ``Range`` in a store), for objects read in
        pieces because they may be too large to hold whole (a commit with a million adds).

        :raises NotFound: when there is no object at ``key``.
        :raises BoundError: when it is not a plain object.
        """
        ...

    def head(self, key: str) -> Head | None:
        """Size, time and tag of the object at ``key``; ``None`` when there is none."""
        ...

    def list(self, prefix: str) -> list[str]:
        """The names directly under the directory ``prefix`` (objects and deeper prefixes
        alike, without the prefix), sorted; empty when nothing is there. Names under
        another prefix that merely starts the same way (``a`` and ``ab``) are not listed."""
        ...

    def has_prefix(self, prefix: str) -> bool:
        """Whether anything is under the directory ``prefix``, at the cost of one request
        whatever it holds (a listing would grow with it)."""
        ...

    def put_if_absent(self, key: str, data: bytes, *, attempt: str | None = None) -> bool:
        """Write ``data`` at ``key`` unless an object is there, and whole or not at all.

        :param attempt: the id of the writing attempt, which ``data`` carries. When given
            and the key is taken (or the outcome of the write is unknown), the object is
            read back: the attempt's own write (``data`` exactly) counts as written.
        :returns: ``True`` when the object at ``key`` is this write (this attempt's),
            ``False`` when someone else's is there.
        :raises ValueError: when ``attempt`` is given and ``data`` does not carry it.
        :raises UnknownOutcome: when the backend cannot tell whether the write landed
            (:func:`put_settled` settles it).
        """
        ...

    def put(self, key: str, data: bytes, *, private: bool = False) -> None:
        """Write ``data`` at ``key``, replacing what is there; a reader sees the old bytes
        or the new ones, never a mix.

        :param private: readable by this user only, where the backend knows users.
        """
        ...

    def delete(self, key: str) -> bool:
        """Remove the object at ``key`` (a link locally: never what it leads to).

        :returns: ``False`` when there was nothing to remove (deleting twice is no error).
        """
        ...

    def delete_prefix(self, prefix: str) -> bool:
        """Remove everything under the directory ``prefix`` (a link there: only the link).

        :returns: ``False`` when there was nothing to remove.
        """
        ...


def object_lines(store: Storage, key: str, size: int, *, limit: int, chunk: int = 8 << 20) -> Iterator[bytes]:
    """The lines of the object at ``key`` (each with its ``\\n``, the last one perhaps
    without), read in ranges of ``chunk`` bytes up to ``size`` (its size when the caller
    looked: what was appended since is not read); :class:`BoundError` at the first line
    longer than ``limit``, before more than ``limit + chunk`` bytes of it are held, or when
    the object is not a plain one.

    :param store: the storage.
    :param key: the object.
    :param size: how much of it to read.
    :param limit: the longest line taken.
    :param chunk: the bytes read at a time.
    """
    pos, carry = 0, b""
    if size <= 0:
        store.get_range(key, 0, 0)  # an empty object has no line; a FIFO or a link is refused
    while pos < size:
        data = store.get_range(key, pos, min(chunk, size - pos))
        if not data:
            break  # shorter than when the caller looked (replaced meanwhile): read what is there
        pos += len(data)
        lines = (carry + data).split(b"\n")
        carry = lines.pop()
        for line in lines:
            if len(line) >= limit:
                raise BoundError(f"has a line longer than {limit} bytes")
            yield line + b"\n"
        if len(carry) > limit:
            raise BoundError(f"has a line longer than {limit} bytes")
    if carry:
        yield carry


def check_attempt(data: bytes, attempt: str | None) -> None:
    """:class:`ValueError` unless ``data`` carries ``attempt`` (when one is given): a
    read-back can only tell this attempt's write from another's if the bytes differ."""
    if attempt is not None and (not attempt or attempt.encode() not in data):
        raise ValueError(f"the body does not carry the attempt id {attempt!r}")


def holds(storage: Storage, key: str, data: bytes) -> bool | None:
    """Whether the object at ``key`` is ``data`` exactly, read back bounded by it (a larger
    object, or no plain object, is not); ``None`` when there is none."""
    try:
        return storage.get(key, limit=len(data)) == data
    except NotFound:
        return None
    except BoundError:
        return False


def settle_put(storage: Storage, key: str, data: bytes, *, attempt: str, puts: int = 3) -> bool:
    """Whether the put-if-absent of ``data`` at ``key``, whose outcome is unknown, is this
    attempt's write: read the object back and compare it with the bytes meant.

    ``data`` carries the attempt id, so the same bytes at ``key`` are this attempt's write
    (``True``) and other bytes another attempt's (``False``). Nothing at ``key``: the write did
    not land, so it is put again (and a put whose outcome is unknown again is settled again,
    up to ``puts`` times).

    :param attempt: the id of the writing attempt, which ``data`` carries.
    :param puts: how many times to put again while nothing is there.
    :raises ValueError: when ``data`` does not carry ``attempt``.
    :raises UnknownOutcome: when the outcome is still unknown after ``puts`` puts.
    """
    check_attempt(data, attempt)
    again = 0
    while True:
        held = holds(storage, key, data)
        if held is not None:
            return held
        if again == puts:
            raise UnknownOutcome(f"put-if-absent of {storage.where(key)}: still unknown after {puts} puts")
        again += 1
        try:
            return storage.put_if_absent(key, data, attempt=attempt)
        except UnknownOutcome:
            continue


def put_settled(storage: Storage, key: str, data: bytes, *, attempt: str | None) -> bool:
    """:meth:`Storage.put_if_absent`, its unknown outcome settled: the call every put-if-absent
    writer of airflow-eod makes.

    :param attempt: the id of the writing attempt, which ``data`` carries; without one an
        unknown outcome cannot be settled (the same bytes could be another writer's) and
        :class:`UnknownOutcome` stands.
    :returns: ``True`` when the object at ``key`` is this attempt's write, ``False`` when it
        is someone else's.
    """
    try:
        return storage.put_if_absent(key, data, attempt=attempt)
    except UnknownOutcome:
        if attempt is None:
            raise
        return settle_put(storage, key, data, attempt=attempt)


def check_key(key: str, root: str, *, empty: bool = False) -> str:
    """``key`` when it names something below the root; :class:`UnsafePathError` when a segment
    could climb out of it (``..``, ``.``, an empty one, a leading ``/``)."""
    if empty and key == "":
        return key
    parts = key.split("/")
    if key.startswith("/") or any(p in ("", ".", "..") or "\0" in p for p in parts):
        raise UnsafePathError(None, f"storage key {key!r} is not a relative name below {root}")
    return key
