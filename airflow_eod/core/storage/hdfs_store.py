"""The HDFS backend of the storage seam, over ``hdfs-native`` (a maintained HDFS client in
Rust, speaking the NameNode's and DataNodes' own protocols: no JVM, no libhdfs).

A table on HDFS is named ``hdfs://<namenode-host>:<port>/path`` or, for an HA nameservice,
``hdfs://<nameservice>/path``; the client reads the nameservice's NameNodes from the Hadoop
configuration in ``$HADOOP_CONF_DIR`` (``core-site.xml``, ``hdfs-site.xml``), as Spark does.

HDFS is a file system with one authority for names, the NameNode, so the calls of
:class:`~airflow_eod.core.storage.base.Storage` map to it as the local backend's map to POSIX:

- ``put_if_absent``: the bytes go to a temporary file beside the key (``.tmp-eod-<uuid>``,
  created without overwrite, written, closed), then a ``rename`` without overwrite gives it
  its name. The NameNode performs a rename atomically and refuses it when the name is taken
  (``FileAlreadyExistsException``): of two writers exactly one wins, and a reader sees
  nothing or the whole file, never one still being written (a file created in place is
  visible, and readable up to what the DataNodes acknowledged, while its writer holds the
  lease). This is what Delta Spark's ``HDFSLogStore`` and delta-rs' HDFS store do for a
  commit. When the rename's reply is lost (the NameNode or the connection failed during
  the call), the outcome is unknown: :class:`~airflow_eod.core.storage.base.UnknownOutcome`,
  settled by reading back (:func:`~airflow_eod.core.storage.base.put_settled`).
- ``put``: the same temporary file, renamed over the key with ``OVERWRITE`` (one atomic
  NameNode operation). ``private=True`` creates it with permission ``0600``.
- ``get``/``get_range``: a read of the file (its length from the NameNode first: a
  ``limit`` is checked before any byte is read); a directory is no object (BoundError).
- ``head``: ``getFileInfo``; a directory has no head. :attr:`Head.tag` is the modification
  time (milliseconds) and the length: HDFS's file id is not exposed by the client.
- ``list``: ``getListing`` of the directory (temporary files of this backend left out);
  ``has_prefix``: whether the prefix is a directory (one request, as a local ``stat``).
- ``delete``: a non-recursive delete of a file (a directory is left alone);
  ``delete_prefix``: a recursive delete of the directory.

HDFS has symbolic links in its protocol but they are disabled by default and this client does
not follow them; keys that could climb (``..``, ``.``, an empty segment, a leading ``/``) are
refused before any request (invariant I11). Kerberos (``hadoop.security.authentication=
kerberos`` in the configuration) is handled by the client through the system's GSSAPI
library; it is not tested here (docs/object-stores.md).
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from hdfs_native import Client, FileStatus, WriteOptions

from airflow_eod.core.errors import UnsafePathError
from airflow_eod.core.storage.base import (
    BoundError,
    Head,
    NotFound,
    UnknownOutcome,
    check_attempt,
    check_key,
    holds,
)

# The prefix of this backend's temporary files: never listed, never an object.
TMP = ".tmp-eod-"


def split_url(url: str) -> tuple[str, str]:
    """``(hdfs://authority, /path)`` of an ``hdfs://`` URL (no trailing ``/`` on the path).

    :raises ValueError: when ``url`` is no ``hdfs://`` URL naming a NameNode (or nameservice).
    """
    scheme, _, rest = url.partition("://")
    authority, _, path = rest.partition("/")
    if scheme.lower() != "hdfs" or not authority:
        raise ValueError(
            f"not an HDFS URL with a NameNode: {url!r} (use hdfs://<namenode>:<port>/path or "
            "hdfs://<nameservice>/path)"
        )
    return f"hdfs://{authority}", "/" + path.strip("/")


def _mapped(exc: BaseException) -> BaseException:
    """The Python error an error of the client stands for: the NameNode's refusals arrive as
    ``RuntimeError('RPCError("<Java class>", "<message>")')``; the ones that say "not a
    directory" or "permission denied" become the ``OSError`` a caller can tell apart."""
    text = str(exc)
    # A path below a file: the NameNode says ParentNotDirectoryException when creating, and an
    # AccessControlException "(is not a directory)" when resolving it for a read.
    if any(
        m in text for m in ("ParentNotDirectoryException", "must both be directories", "(is not a directory)")
    ):
        return NotADirectoryError(20, text.split("\n", 1)[0])
    if "AccessControlException" in text:
        return PermissionError(13, text.split("\n", 1)[0])
    return exc


class HdfsStorage:
    """The bytes under one directory of HDFS (a table's root).

    :param client: the ``hdfs_native.Client`` of the NameNode (or nameservice).
    :param root: the root as a URL (``hdfs://namenode:8020/lake/t``); keys are below its path.
    """

    def __init__(self, *, client: Client, root: str) -> None:
        self._client = client
        self.root = root.rstrip("/")
        self._base = split_url(self.root)[1]
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, str] | None = None) -> HdfsStorage:
        """The storage at ``hdfs://authority/path``. HDFS takes no storage options: the
        NameNode's address is in the URL, and everything else (HA nameservices, Kerberos) in
        the Hadoop configuration the client reads from ``$HADOOP_CONF_DIR``.

        :raises ValueError: for a URL with no authority, or any storage option (by name).
        """
        for name in options or {}:
            raise ValueError(
                f"unknown HDFS storage option {name!r}: a table on HDFS takes none (the NameNode "
                "is in the URI; HA and Kerberos settings come from $HADOOP_CONF_DIR)"
            )
        authority, path = split_url(url)
        if path != "/":
            check_key(path.strip("/"), authority)
        try:
            client = Client(authority)
        except RuntimeError as exc:
            # A name without a port is a nameservice to this client (Hadoop's own would try
            # port 8020): one not in the configuration is found at once, and no retry mends it.
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise ValueError(
                f"the HDFS client cannot reach {authority}: {first} (a single NameNode is named "
                "with its port, hdfs://<host>:8020/path; an HA nameservice needs its NameNodes in "
                "$HADOOP_CONF_DIR/hdfs-site.xml)"
            ) from None
        return cls(client=client, root=f"{authority}{path}")

    def _count(self, operation: str) -> None:
        with self._lock:
            self.requests[operation] += 1

    def where(self, key: str) -> str:
        return f"{self.root}/{key}"

    def key_of(self, where: str) -> str:
        if not where.startswith(self.root + "/") or where == self.root + "/":
            raise UnsafePathError(None, f"{where} is not below {self.root}")
        return where[len(self.root) + 1 :]

    def _path(self, key: str, *, empty: bool = False) -> str:
        """The absolute HDFS path of ``key``, refused when a segment could climb."""
        key = check_key(key, self.root, empty=empty)
        return f"{self._base.rstrip('/')}/{key}" if key else self._base

    def _info(self, path: str) -> FileStatus | None:
        self._count("getFileInfo")
        try:
            return self._client.get_file_info(path)
        except FileNotFoundError:
            return None
        except RuntimeError as exc:
            raise _mapped(exc) from exc

    # -- reading -------------------------------------------------------------------
    def _open(self, key: str) -> Any:
        """A reader of the file at ``key``: NotFound when nothing is there, BoundError for
        a directory (no object), the NameNode's other refusals as ``OSError``."""
        path = self._path(key)
        self._count("getBlockLocations")
        try:
            return self._client.read(path)
        except FileNotFoundError as exc:
            if "not a file" in str(exc):
                raise BoundError("is a directory, not a file") from None
            raise NotFound(2, "no such file", self.where(key)) from None
        except RuntimeError as exc:
            mapped = _mapped(exc)
            if isinstance(mapped, NotADirectoryError):
                raise NotFound(2, "no such file (a file on the way)", self.where(key)) from None
            raise mapped from exc

    def get(self, key: str, *, limit: int | None = None) -> bytes:
        with self._open(key) as reader:
            size = int(reader.size)
            if limit is not None and size > limit:
                raise BoundError(f"is larger than {limit} bytes")  # no byte of it is read
            data = bytes(reader.read_range(0, size)) if size else b""
        if limit is not None and len(data) > limit:
            raise BoundError(f"is larger than {limit} bytes")
        return data

    def get_range(self, key: str, start: int, length: int) -> bytes:
        with self._open(key) as reader:
            size = int(reader.size)
            # The client panics on a range that reaches past the end: clamp it here.
            if length <= 0 or start >= size:
                return b""
            return bytes(reader.read_range(start, min(length, size - start)))

    def head(self, key: str) -> Head | None:
        try:
            info = self._info(self._path(key))
        except NotADirectoryError:
            return None
        if info is None or info.isdir:
            return None
        ms = int(info.modification_time)
        return Head(int(info.length), ms * 1_000_000, f"{ms}:{info.length}")

    def list(self, prefix: str) -> list[str]:
        path = self._path(prefix.strip("/"), empty=True)
        self._count("getListing")
        try:
            found = list(self._client.list_status(path))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except RuntimeError as exc:
            if isinstance(_mapped(exc), NotADirectoryError):
                return []
            raise _mapped(exc) from exc
        if len(found) == 1 and not found[0].isdir and found[0].path.rstrip("/") == path.rstrip("/"):
            if not prefix.strip("/"):
                # The table's root is a file: no table can be made there, and no retry mends it.
                raise NotADirectoryError(20, "is a file, not a directory", self.root)
            return []  # the prefix is a file: nothing is below it
        names = {status.path.rstrip("/").rsplit("/", 1)[-1] for status in found}
        return sorted(n for n in names if n and not n.startswith(TMP))

    def has_prefix(self, prefix: str) -> bool:
        try:
            info = self._info(self._path(prefix.strip("/")))
        except NotADirectoryError:
            return False
        return info is not None and bool(info.isdir)

    def walk(self, prefix: str = "") -> Iterator[tuple[str, Head]]:
        """Every file under the directory ``prefix`` at any depth, as (key, head): one
        recursive listing. Not in the :class:`~airflow_eod.core.storage.base.Storage`
        protocol: staging renames the partition folders Spark wrote from it, as it does on an
        object store (:func:`airflow_eod.spark.staging._plain_store_keys`)."""
        path = self._path(prefix.strip("/"), empty=True)
        cut = len(self._base.rstrip("/")) + 1
        self._count("getListing")
        try:
            found = list(self._client.list_status(path, recursive=True))
        except FileNotFoundError:
            return
        for status in found:
            if status.isdir or not status.path.startswith(path.rstrip("/") + "/"):
                continue
            ms = int(status.modification_time)
            yield status.path[cut:], Head(int(status.length), ms * 1_000_000, f"{ms}:{status.length}")

    # -- writing -------------------------------------------------------------------
    def _write_temporary(self, path: str, data: bytes, *, private: bool = False) -> str:
        """A temporary file beside ``path`` holding ``data``, closed (complete on the
        DataNodes and the NameNode) before it is given any other name."""
        directory = path.rsplit("/", 1)[0] or "/"
        tmp = f"{directory}/{TMP}{uuid.uuid4().hex}"
        options = WriteOptions(overwrite=False, create_parent=True, permission=0o600 if private else 0o644)
        self._count("create")
        try:
            with self._client.create(tmp, options) as fh:
                fh.write(data)
        except RuntimeError as exc:
            self._discard(tmp)
            raise _mapped(exc) from exc
        except BaseException:
            self._discard(tmp)
            raise
        return tmp

    def _discard(self, tmp: str) -> None:
        """Remove a temporary file, best effort: a stray one is never listed, and what is
        left of an attempt is removed with its folder."""
        try:
            self._client.delete(tmp, False)
        except Exception:  # the NameNode may be the reason we are here
            pass

    def put_if_absent(self, key: str, data: bytes, *, attempt: str | None = None) -> bool:
        check_attempt(data, attempt)
        path = self._path(key)
        tmp = self._write_temporary(path, data)
        self._count("rename")
        try:
            self._client.rename(tmp, path, False)
        except FileExistsError:
            self._discard(tmp)
            if attempt is None:
                return False
            # Taken: ours only if this attempt's bytes are there (a rename whose reply was
            # lost, then retried).
            return holds(self, key, data) is True
        except RuntimeError as exc:
            self._discard(tmp)
            mapped = _mapped(exc)
            if mapped is not exc:
                raise mapped from exc  # refused (a file on the way, no permission): not written
            raise UnknownOutcome(f"put-if-absent of {self.where(key)}: {str(exc)[:300]}") from exc
        except OSError as exc:
            # A connection lost during the rename: the NameNode may have renamed.
            self._discard(tmp)
            raise UnknownOutcome(f"put-if-absent of {self.where(key)}: {exc}") from exc
        return True

    def put(self, key: str, data: bytes, *, private: bool = False) -> None:
        path = self._path(key)
        tmp = self._write_temporary(path, data, private=private)
        self._count("rename")
        try:
            self._client.rename(tmp, path, True)
        except RuntimeError as exc:
            self._discard(tmp)
            raise _mapped(exc) from exc
        except BaseException:
            self._discard(tmp)
            raise

    def rename(self, src: str, dst: str) -> None:
        """Move the file at ``src`` to ``dst`` (overwritten if there), creating ``dst``'s
        folder. Not in the :class:`~airflow_eod.core.storage.base.Storage` protocol: for
        files no one else writes (an attempt's staged files)."""
        source, target = self._path(src), self._path(dst)
        self._count("mkdirs")
        self._count("rename")
        try:
            self._client.mkdirs(target.rsplit("/", 1)[0], 0o755, True)
            self._client.rename(source, target, True)
        except RuntimeError as exc:
            raise _mapped(exc) from exc

    def delete(self, key: str) -> bool:
        """Remove the file at ``key``; a directory there is no object (``False``), as is a
        missing one."""
        path = self._path(key)
        try:
            info = self._info(path)
        except NotADirectoryError:
            return False
        if info is None or info.isdir:
            return False
        self._count("delete")
        return bool(self._client.delete(path, False))

    def delete_prefix(self, prefix: str) -> bool:
        """Remove the directory ``prefix`` and everything below it (never the root; a file
        at ``prefix`` is not below it and is left)."""
        path = self._path(prefix.strip("/"))
        try:
            info = self._info(path)
        except NotADirectoryError:
            return False
        if info is None or not info.isdir:
            return False
        self._count("delete")
        return bool(self._client.delete(path, True))
