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
"""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_eod.core.errors import ConfigurationError, InputChangedError, UnsafePathError
from airflow_eod.core.planlog.restatement import refreeze_hint
from airflow_eod.core.storage import storage_at

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from airflow_eod.core.storage.object_store import ObjectStorage

log = logging.getLogger(__name__)

# The schemes of the object stores a landing path may name (the storage seam's backends).
STORE_SCHEMES = frozenset({"s3", "s3a", "az", "abfs", "abfss", "gs"})
# Spelled the one way, so that one prefix is one pipeline's directory whatever the spelling.
_SCHEME_ALIASES = {"s3a": "s3"}
_NAMED = 5  # keys spelled out in one warning


def is_store_path(path: str) -> bool:
    """Whether ``path`` names a landing directory on an object store (``s3://...``)."""
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme.lower() in STORE_SCHEMES


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
        self, pattern: str, label: str | None = None, *, skip: AbstractSet[str] = frozenset()
    ) -> list[dict[str, Any]]:
        """Every candidate file now, oldest first (``Last-Modified``, then path), except those
        in ``skip``: one listing request per 1,000 objects under the prefix, none per file.

        :param pattern: a glob on file names (the key's last segment).
        :param label: the batch, for the warning about keys that are never read.
        :param skip: the paths loaded already.
        """
        matches = re.compile(fnmatch.translate(pattern)).match
        found: list[tuple[int, str, dict[str, Any]]] = []
        folders: set[str] = set()
        passed: list[str] = []
        for key, head in self.storage().walk():
            parts = key.split("/")
            folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
            if _unsafe(key):
                passed.append(key)  # it could name another key than the one listed
                continue
            if any(p.startswith(("_", ".")) for p in parts) or not matches(parts[-1]):
                continue
            path = f"{self.root}/{key}"
            if path in skip:
                continue
            found.append((head.mtime_ns, path, {"path": path, "size": head.size, "etag": head.tag}))
        if passed:
            log.warning(
                "%slanding prefix %s holds %d key(s) with a '..', '.' or empty segment, which are never "
                "read: %s%s",
                f"batch {label}: " if label else "",
                self.root,
                len(passed),
                ", ".join(sorted(passed)[:_NAMED]),
                " ..." if len(passed) > _NAMED else "",
            )
        # A folder marker (an empty object named like the folder) is no file.
        cut = len(self.root) + 1
        found = [f for f in found if f[1][cut:] not in folders]
        return [entry for _, _, entry in sorted(found, key=lambda f: (f[0], f[1]))]

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
        head = self.storage().head(key)
        if head is None:
            pipeline, _, batch = label.rpartition("/")
            raise InputChangedError(
                label,
                f"landing file {path} was planned but is gone; nothing was committed. Restore "
                f"it, or re-freeze the batch on purpose without it: {refreeze_hint(pipeline, batch)}",
            )
        return {"path": path, "size": head.size, "etag": head.tag}
