"""An object of the storage seam as a read-only, seekable file: for readers that seek, such
as a Parquet reader taking the footer and then only the columns it wants.

A checkpoint can hold a row per data file of the table (hundreds of megabytes); reading it
whole to look at its ``txn`` column would cost what the bounded reading of the log avoids.
Every read is a :meth:`~airflow_eod.core.storage.base.Storage.get_range` (an HTTP range in
a store), so any backend serves it, and the backend's refusals (a link, a device) hold.
"""

from __future__ import annotations

import io
from typing import Any

from airflow_eod.core.storage.base import Storage


class ObjectFile(io.RawIOBase):
    """The first ``size`` bytes of the object at ``key``, as a file opened for reading.

    :param store: the storage.
    :param key: the object.
    :param size: its size when the caller looked (from ``head``): a reader never reads past it.
    """

    def __init__(self, *, store: Storage, key: str, size: int) -> None:
        super().__init__()
        self._store, self._key, self._size, self._pos = store, key, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self._size - self._pos)
        if want <= 0:
            return 0
        data = self._store.get_range(self._key, self._pos, want)
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)

    @property
    def size(self) -> int:
        """The bytes this file holds."""
        return self._size


def open_object(store: Storage, key: str, size: int, *, buffer: int = 1 << 20) -> io.BufferedReader:
    """The object at ``key`` as a buffered, seekable binary file (see :class:`ObjectFile`).

    :param store: the storage.
    :param key: the object.
    :param size: its size (from ``head``).
    :param buffer: the bytes read ahead at a time.
    """
    return io.BufferedReader(ObjectFile(store=store, key=key, size=size), buffer_size=buffer)
