"""A landing directory on an object store (``s3://bucket/prefix``; ``az://``, ``abfss://`` and
``gs://`` through the same seam): its listing, and each planned file's state now.

A store has no links, FIFOs or modification times to trust at nanosecond grain; what tells
one version of an object from another is its ETag (a generation on GCS). So a file on a store
is planned as ``{"path", "size", "etag"}``: the path is the full URI (the landing prefix and
the key), and size and ETag are its fingerprint (invariant I3: a file rewritten after
planning, even with the same size, has another ETag and fails the batch). Files are ordered
oldest first by the listing's ``Last-Modified`` time, then by path, as local files are by
mtime; the time is not kept in the plan (whole seconds on S3, and not what tells a rewrite).

Invariant I11: a planned path comes from the plan log, which whoever controls the table's
files can write. It is read only when it lies below the landing prefix (``s3://b/land/...``,
never ``s3://b/land2/...``) and its key climbs nowhere (no ``..``, ``.`` or empty segment);
the listing applies the same check, and skips hidden names (a segment starting with ``_`` or
``.``) as the local listing does. The storage options (credentials) are held in memory only.

What the listing sees that a directory does not (the second adversarial review of issue 21):
folder markers (empty objects named like a folder, told from empty files by a ``HeadObject``),
a file that is also a folder (both planned), a Delta table below the prefix (never input),
a prefix with no object (a missing source when asked), and keys the store's client cannot
list (refused, naming the key: the client loses the whole listing page with it). A store's
own failures become the product's errors (:meth:`StoreLanding._failure`).
"""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_eod.core.errors import (
    BatchError,
    BatchRefusedError,
    ConfigurationError,
    EodError,
    InputChangedError,
    UnsafePathError,
)
from airflow_eod.core.planlog.restatement import refreeze_hint
from airflow_eod.core.storage import Head, UnlistableKey, is_panic, storage_at

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from airflow_eod.core.storage.object_store import ObjectStorage

log = logging.getLogger(__name__)

# The schemes of the object stores a landing path may name (the storage seam's backends).
STORE_SCHEMES = frozenset({"s3", "s3a", "az", "abfs", "abfss", "gs"})
# Spelled the one way, so that one prefix is one pipeline's directory whatever the spelling.
_SCHEME_ALIASES = {"s3a": "s3"}
_NAMED = 5  # keys spelled out in one warning
# What the stores answer for a bucket (container) that does not exist: S3, Azure, GCS.
_NO_BUCKET = ("NoSuchBucket", "ContainerNotFound", "The specified bucket does not exist")
_DENIED = ("AccessDenied", "AuthorizationPermissionMismatch", "AuthorizationFailure", "status code: 403")
_QUERY = re.compile(r"\?\S*")


def _below(key: str, roots: AbstractSet[str]) -> bool:
    """Whether ``key`` is one of ``roots`` or lies below one."""
    return any(key == r or key.startswith(r + "/") for r in roots)


def is_store_path(path: str) -> bool:
    """Whether ``path`` names a landing directory on an object store (``s3://...``)."""
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme.lower() in STORE_SCHEMES


def check_landing_scheme(path: Any) -> None:
    """Refuse a landing path on a file system no landing listing reads (``hdfs://``, ``ftp://``):
    taken as a local path it would name a folder called ``hdfs:`` in the worker's directory,
    find nothing there, and wait for files that never come.

    :raises ConfigurationError: naming the scheme and what is read instead.
    """
    if not isinstance(path, str) or "{{" in path:
        return
    scheme, sep, _ = path.partition("://")
    if sep and scheme.lower() not in STORE_SCHEMES | {"file"} and "/" not in scheme:
        extra = (
            " (a table may be on HDFS; its landing files are read from a local or shared "
            "directory or an object store)"
            if scheme.lower() == "hdfs"
            else ""
        )
        raise ConfigurationError(
            f"landing path {path!r}: landing files on {scheme}:// are not read in this release; "
            f"use a local or shared directory or an object store prefix "
            f"({', '.join(sorted(s + '://' for s in STORE_SCHEMES))}){extra}"
        )


def _unsafe(key: str) -> bool:
    parts = key.split("/")
    return key.startswith("/") or any(p in ("", ".", "..") or "\0" in p for p in parts)


def store_root(path: str) -> str:
    """The landing prefix's one spelling: the scheme in lower case (``s3a`` as ``s3``), no
    trailing ``/``.

    :raises ConfigurationError: a URI without a bucket (container), or a prefix that climbs.
    """
    scheme, _, rest = path.partition("://")
    scheme = _SCHEME_ALIASES.get(scheme.lower(), scheme.lower())
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.rstrip("/")
    if not bucket or (prefix and _unsafe(prefix)):
        raise ConfigurationError(
            f"landing path {path!r} is no object-store directory: use {scheme}://<bucket>/<prefix>, "
            "with no '..', '.' or empty segment in the prefix"
        )
    return f"{scheme}://{bucket}" + (f"/{prefix}" if prefix else "")


@dataclass(frozen=True)
class StoreLanding:
    """The landing directory at ``root`` on an object store.

    :param root: the landing prefix, as :func:`store_root` spells it.
    :param options: the store's storage options (delta-rs names); never serialized.
    """

    root: str
    options: Mapping[str, str] = field(default_factory=dict, repr=False)

    def storage(self) -> ObjectStorage:
        """The seam's storage rooted at the landing prefix (shared per root and options)."""
        return storage_at(self.root, dict(self.options))  # type: ignore[return-value]

    def key_of(self, path: Any) -> str | None:
        """The key of the planned ``path`` below the landing prefix; ``None`` when it lies
        outside it or climbs (invariant I11): such a path is never read."""
        if not isinstance(path, str) or not path.startswith(self.root + "/"):
            return None
        key = path[len(self.root) + 1 :]
        return None if _unsafe(key) else key

    def list_files(
        self,
        pattern: str,
        label: str | None = None,
        *,
        skip: AbstractSet[str] = frozenset(),
        exclude: Sequence[str] = (),
        required: bool = False,
    ) -> list[dict[str, Any]]:
        """Every candidate file now, oldest first (``Last-Modified``, then path), except those
        in ``skip``: one listing request per 1,000 objects under the prefix, and one
        ``HeadObject`` per empty object (a folder marker or an empty file) not yet loaded.

        Never input: hidden names (a segment starting with ``_`` or ``.``), folder markers (an
        empty object whose key ends in ``/``), and the objects of a Delta table below the
        prefix (a folder holding ``_delta_log/``, or one of ``exclude``): the table's own part
        files would otherwise be loaded again by every batch.

        :param pattern: a glob on file names (the key's last segment).
        :param label: the batch (or the pipeline), for errors and the warning about keys that
            are never read.
        :param skip: the paths loaded already.
        :param exclude: the roots of tables loaded from this prefix (URIs); a landing prefix
            at or below one is refused.
        :param required: a prefix that holds no object at all is a missing source (an error,
            as a missing local directory is) rather than an empty one.
        :raises BatchError: nothing is under the prefix and ``required``; the listing failed
            (retryable).
        :raises BatchRefusedError: a key the store's client cannot list is under the prefix.
        :raises ConfigurationError: the bucket does not exist or may not be listed, the
            storage options are unusable, or the prefix lies inside a table.
        """
        batch = f"batch {label}: " if label else ""
        tables = self._excluded(exclude, batch)
        matches = re.compile(fnmatch.translate(pattern)).match
        found: list[tuple[int, str, dict[str, Any]]] = []
        passed: list[str] = []
        listed = False
        for key, head in self._walk(label):
            listed = True
            if key == "":
                continue  # the prefix's own folder marker: the folder exists
            parts = key.split("/")
            if "_delta_log" in parts:
                tables.add("/".join(parts[: parts.index("_delta_log")]))
            if _unsafe(key):
                passed.append(key)  # it could name another key than the one listed
                continue
            if any(p.startswith(("_", ".")) for p in parts) or not matches(parts[-1]):
                continue
            path = f"{self.root}/{key}"
            if path in skip:
                continue
            found.append((head.mtime_ns, path, {"path": path, "size": head.size, "etag": head.tag}))
        if required and not listed:
            raise BatchError(
                label,
                f"landing prefix {self.root} holds no object (a missing source: the files have not "
                "arrived); nothing was planned. An empty folder that exists on purpose is a folder "
                f"marker: an empty object named {self.root}/",
            )
        if "" in tables:
            raise ConfigurationError(
                f"{batch}landing path {self.root} is the root of a Delta table (it holds _delta_log/): "
                "a table's data files are never landing input; point landing_path at the files' prefix"
            )
        if passed:
            log.warning(
                "%slanding prefix %s holds %d key(s) with a '..', '.' or empty segment, which are never "
                "read: %s%s",
                batch,
                self.root,
                len(passed),
                ", ".join(sorted(passed)[:_NAMED]),
                " ..." if len(passed) > _NAMED else "",
            )
        cut = len(self.root) + 1
        kept = [f for f in found if not _below(f[1][cut:], tables)]
        # A folder marker ("d/", what a console's "Create folder" writes) is listed as "d", size
        # 0, and only its HEAD tells it from an empty file "d": "d" finds nothing.
        kept = [f for f in kept if f[2]["size"] or self._head(f[1][cut:], label) is not None]
        return [entry for _, _, entry in sorted(kept, key=lambda f: (f[0], f[1]))]

    def _excluded(self, tables: Sequence[str], batch: str) -> set[str]:
        """The keys (below the prefix) of the table roots in ``tables`` that lie below it."""
        below: set[str] = set()
        for table in tables:
            if "://" not in table:
                continue
            root = store_root(table)
            if self.root == root or self.root.startswith(root + "/"):
                raise ConfigurationError(
                    f"{batch}landing path {self.root} lies inside the table {root}: a table's files are "
                    "never landing input; land the files under another prefix"
                )
            if root.startswith(self.root + "/"):
                below.add(root[len(self.root) + 1 :])
        return below

    def _walk(self, label: str | None) -> Iterator[tuple[str, Head]]:
        """The store's listing of the prefix, its failures as the product's errors."""
        try:
            yield from self.storage().walk()
        except UnlistableKey as exc:
            raise BatchRefusedError(
                label,
                f"landing prefix {self.root} holds the object {exc.where!r}, whose key the object-store "
                "client cannot list (a control character, or an empty, '.' or '..' segment). It fails "
                "the whole page of the listing it is on, so the other files of that page are unknown: "
                "nothing was planned and nothing was committed. Rename or remove that object with "
                "another client (the AWS CLI, the console), then clear the task",
            ) from None
        except BaseException as exc:
            raise self._failure(exc, label, "listing") from None

    def _head(self, key: str, label: str | None) -> Head | None:
        try:
            return self.storage().head(key)
        except BaseException as exc:
            raise self._failure(exc, label, f"reading the head of {self.root}/{key}") from None

    def _failure(self, exc: BaseException, label: str | None, what: str) -> BaseException:
        """The product's error for a failed request to the landing store (``exc`` itself when it
        is one already, or no error of a request: an interrupt)."""
        if isinstance(exc, EodError) or (not isinstance(exc, Exception) and not is_panic(exc)):
            return exc
        batch = f"batch {label}: " if label else ""
        # A URL's query may carry a SAS token: never echoed.
        first = _QUERY.sub("?...", (str(exc).splitlines() or [type(exc).__name__])[0])
        if is_panic(exc):
            return ConfigurationError(
                f"{batch}{what} the landing prefix failed in the object-store client ({first}): an "
                "unusable storage option, most likely the endpoint (AWS_ENDPOINT_URL, "
                "AZURE_STORAGE_ENDPOINT, GOOGLE_BASE_URL); nothing was planned"
            )
        bucket = self.root.split("/")[2]
        if any(code in str(exc) for code in _NO_BUCKET):
            return ConfigurationError(
                f"{batch}landing path {self.root}: the bucket (container) {bucket} does not exist; "
                "nothing was planned. Create it, or correct the landing path"
            )
        if isinstance(exc, PermissionError) or any(code in str(exc) for code in _DENIED):
            return ConfigurationError(
                f"{batch}landing path {self.root}: access denied ({first}); the landing connection's "
                f"role needs to list and read {bucket} (s3:ListBucket, s3:GetObject or the store's "
                "equivalents); nothing was planned"
            )
        failed = f"{what} the landing prefix {self.root} failed: {first}; nothing was planned"
        return BatchError(label, failed)

    def stat(self, entry: dict[str, Any], label: str) -> dict[str, Any]:
        """The planned file's entry as it is now (one ``HeadObject``).

        :raises UnsafePathError: the path lies outside the landing prefix or climbs; it is
            not read.
        :raises InputChangedError: the file is gone.
        """
        path = entry.get("path")
        key = self.key_of(path)
        if key is None:
            raise UnsafePathError(
                label,
                f"planned landing file {path!r} lies outside the landing prefix {self.root}/ (another "
                "prefix, '..', '.' or an empty segment); it was not read and nothing was committed. "
                "Remove what planted it, or re-freeze the batch on purpose without it (restate=True "
                "with restate_batch_key)",
            )
        head = self._head(key, label)
        if head is None:
            pipeline, _, batch = label.rpartition("/")
            raise InputChangedError(
                label,
                f"landing file {path} was planned but is gone; nothing was committed. Restore "
                f"it, or re-freeze the batch on purpose without it: {refreeze_hint(pipeline, batch)}",
            )
        return {"path": path, "size": head.size, "etag": head.tag}
