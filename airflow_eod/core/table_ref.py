"""The one reference to a Delta table: parsed once from the user's URI, passed on by every layer.

A user names a table as a string (``/lake/sales``, ``file:///lake/sales``) in an operator,
a sensor or the command line. That string is parsed here, once, into a :class:`TableRef`:
its canonical location, its Airflow asset URI, the storage that holds its bytes, and where
airflow-eod keeps its plan log and the data of its attempts. Every function below the
operators and the CLI takes a :class:`TableRef`, never the string, so no layer parses a URI
again and no layer assumes a POSIX path that the reference did not give it.

A location is a local or shared POSIX path, or an object store's URI: ``s3://bucket/prefix``
(``s3a://`` reads as ``s3://``), ``az://container/prefix`` (``abfs[s]://container@account...``
as written) or ``gs://bucket/prefix``, or a directory on HDFS: ``hdfs://namenode:port/path``
or ``hdfs://nameservice/path`` (the NameNode takes the bucket's place). An object store's
reference also carries its storage options, named as delta-rs names them
(``AWS_ENDPOINT_URL``, ``AZURE_STORAGE_ACCOUNT_NAME``, ...; none on HDFS). They may hold
secrets: they are never printed, compared or serialised with the reference (a spec or a
plan carries the location only; the options come from the connection each time).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.storage import Storage, storage_at
from airflow_eod.core.table_layout import META_DIR, path_part, under

# The object stores a table may live on, by URI scheme, and the scheme a location is kept in.
OBJECT_SCHEMES = {
    "s3": "s3",
    "s3a": "s3",
    "az": "az",
    "abfs": "abfs",
    "abfss": "abfss",
    "gs": "gs",
    "hdfs": "hdfs",
}
# The store each canonical scheme reaches (Azure's three spellings name one service).
# What an HDFS table path may hold: characters a URL path keeps as they are, and Hadoop's
# Path reads as no glob and no URI part (':' is refused in a Path's name).
_HDFS_PLAIN = re.compile(r"[A-Za-z0-9\-._~+=,/]*")
_STORES = {"s3": "S3", "az": "Azure", "abfs": "Azure", "abfss": "Azure", "gs": "GCS", "hdfs": "HDFS"}


def _object_location(uri: str, scheme: str, rest: str) -> str:
    """The canonical ``scheme://bucket/prefix`` of an object store URI (no trailing ``/``)."""
    bucket, _, prefix = rest.partition("/")
    parts = [p for p in prefix.split("/") if p != ""]
    if scheme == "hdfs" and (not bucket or not parts):
        # hdfs:///path would mean "the default file system" of whichever Hadoop configuration
        # reads it: delta-rs, Spark and this process could each take another one.
        raise ConfigurationError(
            f"table URI {uri!r} names no NameNode or no directory: use hdfs://<namenode>:<port>/path "
            "or hdfs://<nameservice>/path (an HA nameservice, from $HADOOP_CONF_DIR)"
        )
    if scheme == "hdfs" and not _HDFS_PLAIN.fullmatch("/".join(parts)):
        # delta-rs takes the location as a URL and percent-encodes such characters: it would
        # read and write the table under "a%20b" while Spark and the storage seam use "a b".
        odd = sorted({c for c in "/".join(parts) if not _HDFS_PLAIN.fullmatch(c)})
        raise ConfigurationError(
            f"table URI {uri!r}: the characters {''.join(odd)!r} in an HDFS path are refused (delta-rs "
            "percent-encodes them, or Hadoop reads them as a glob or a URI's parts, so it and Spark "
            "would use different directories); use letters, digits and -._~+=,"
        )
    if not bucket or not parts:
        # A table at a bucket's root would share it with everything else in the bucket, and
        # the clean-up and the plan log assume a root of their own.
        raise ConfigurationError(
            f"table URI {uri!r} names no folder in the bucket: use {scheme}://bucket/table"
        )
    if any(p in (".", "..") or "\\" in p for p in parts) or "%" in rest or "?" in rest or "#" in rest:
        raise ConfigurationError(
            f"table URI {uri!r}: a '.', '..', '%', '?' or '#' in the path is refused (delta-rs and "
            "Spark read them differently, so a committed batch could not be found again)"
        )
    return f"{OBJECT_SCHEMES[scheme]}://{bucket}/{'/'.join(parts)}"


def _local_path(uri: str) -> str:
    """The absolute local path that ``uri`` (a path or a ``file://`` URI) names."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        path = unquote(parsed.path) if parsed.scheme == "file" else uri
        if not path:
            raise ConfigurationError(f"table URI {uri!r} has no path")
        if "%" in path:
            # delta-rs percent-decodes table paths: "t%41b" would be read as "tAb", so the
            # batch just committed could never be found again.
            raise ConfigurationError(
                f"table path {path!r} holds a '%', which delta-rs decodes as a URI escape; "
                "choose a table path without '%'"
            )
        return os.path.abspath(path)
    if len(parsed.scheme) == 1:  # a Windows drive letter, not a scheme
        return os.path.abspath(uri)
    scheme = parsed.scheme.lower()
    if scheme in OBJECT_SCHEMES:
        return _object_location(uri, scheme, uri.split("://", 1)[1])
    raise ConfigurationError(
        f"table URI {uri!r}: a table is a local or shared-filesystem path, a file:// URI or an "
        f"object store's URI ({', '.join(sorted(f'{s}://' for s in OBJECT_SCHEMES))})"
    )


@dataclass(frozen=True)
class TableRef:
    """A Delta table, parsed once (:meth:`parse`).

    Two references to the same table compare equal, however the user spelled it
    (``/lake/t``, ``file:///lake/t``, ``/lake/./t``).

    :param location: the canonical location: the absolute path of the table's root, or its
        object store URI (``s3://bucket/prefix``).
    :param options: the object store's storage options, named as delta-rs names them; never
        printed or compared (they may hold secrets), and empty for a local table.
    """

    location: str
    options: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def parse(cls, uri: str | TableRef, options: Mapping[str, str] | None = None) -> TableRef:
        """The reference to the table ``uri`` names (a reference is returned as it is, or with
        ``options`` when they are given).

        :param uri: a local path, a ``file://`` URI or an object store URI, as the user wrote it.
        :param options: the object store's storage options (delta-rs' names).
        :raises ConfigurationError: for a URI this release cannot load into (another scheme,
            a path with ``%``, a bucket without a folder), naming the URI and the cause.
        """
        pairs = tuple(sorted((str(k), str(v)) for k, v in (options or {}).items()))
        if isinstance(uri, TableRef):
            return uri if options is None else cls(location=uri.location, options=pairs)
        if not isinstance(uri, str):
            raise ConfigurationError(f"a table is named by a path or a URI, not {uri!r}")
        location = _local_path(uri)
        if pairs and "://" not in location:
            raise ConfigurationError(f"table {location} is a local path: storage options mean nothing to it")
        return cls(location=location, options=pairs)

    @property
    def is_local(self) -> bool:
        """Whether the table lives on a local or shared POSIX file system (not an object store)."""
        return "://" not in self.location

    @property
    def scheme(self) -> str:
        """``file`` for a local table, else the object store's scheme (``s3``, ``az``, ``gs``...)."""
        return "file" if self.is_local else self.location.split("://", 1)[0]

    def neighbour(self, uri: str, what: str) -> TableRef:
        """Another table this one's loads write (a quarantine table), with this table's
        storage options: a load has one connection, so a neighbour on an object store must be
        on this table's store.

        :param uri: the other table's URI.
        :param what: what the other table is, for the error (``quarantine_table_uri``).
        :raises ConfigurationError: for a neighbour on another store than this table's.
        """
        other = TableRef.parse(uri)
        if other.is_local:
            return other
        if self.is_local or _STORES[other.scheme] != _STORES[self.scheme]:
            raise ConfigurationError(
                f"{what} {other} is on {_STORES[other.scheme]}, the table {self} "
                f"{'on a local file system' if self.is_local else 'on ' + _STORES[self.scheme]}: a load "
                "reaches one store, with the table's connection (storage_conn_id); put both on one store"
            )
        return TableRef.parse(other, self.storage_options)

    @property
    def storage_options(self) -> dict[str, str]:
        """The storage options (delta-rs' names) for ``DeltaTable(..., storage_options=)``."""
        return dict(self.options)

    def __str__(self) -> str:
        return self.location

    @property
    def path(self) -> str:
        """The table root as delta-rs reads it: the path on the local (or shared, POSIX) file
        system, or the object store URI; also what messages name."""
        return self.location

    @property
    def asset_uri(self) -> str:
        """The table as an Airflow Asset URI: ``file://`` and the absolute path,
        percent-encoded (Airflow drops a URI's fragment, so a ``#`` must not stay raw), or
        the object store URI as it is."""
        if not self.is_local:
            return self.location
        # POSIX leaves a path that starts with exactly two slashes to the system (Linux reads
        # it as one); "file:////x" would become host "x" in Airflow's URI normalisation.
        return Path("/" + self.location.lstrip("/")).as_uri()

    def storage(self) -> Storage:
        """The bytes of the table (its log and everything airflow-eod keeps beside it).

        A new, short-lived storage on each call: the local backend remembers which
        directories it found to be no link, which must not outlive one read or write.
        """
        return storage_at(self.location, self.storage_options)

    def plan_log_key(self, pipeline_id: str) -> str:
        """The storage key of the plan log of ``pipeline_id`` in this table."""
        return f"{META_DIR}/pipelines/{path_part(pipeline_id, 'pipeline id')}"

    @property
    def plan_logs_key(self) -> str:
        """The storage key under which every pipeline's plan log lives."""
        return f"{META_DIR}/pipelines"

    def dir(self, rel_dir: str) -> str:
        """The local path (or object store URI) of ``rel_dir`` (from
        :func:`~airflow_eod.core.table_layout.batch_dir` or
        :func:`~airflow_eod.core.table_layout.attempt_dir`) in the table, refused when a link
        on the way leads out of the table."""
        if not self.is_local:
            return f"{self.location}/{'/'.join(path_part(p) for p in rel_dir.split('/'))}"
        return under(self.location, *rel_dir.split("/"))


TableLike = str | TableRef
"""What the public entry points (the operators, the sensor, the CLI, ``audit_table``) accept:
the user's string or a reference already parsed."""
