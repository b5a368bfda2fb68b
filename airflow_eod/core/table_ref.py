"""The one reference to a Delta table: parsed once from the user's URI, passed on by every layer.

A user names a table as a string (``/lake/sales``, ``file:///lake/sales``) in an operator,
a sensor or the command line. That string is parsed here, once, into a :class:`TableRef`:
its canonical location, its Airflow asset URI, the storage that holds its bytes, and where
airflow-eod keeps its plan log and the data of its attempts. Every function below the
operators and the CLI takes a :class:`TableRef`, never the string, so no layer parses a URI
again and no layer assumes a POSIX path that the reference did not give it.

This release knows one kind of location, a local or shared POSIX path; object stores
(issue 21) are new kinds of :class:`TableRef`, with a storage backend of their own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.storage import Storage, storage_at
from airflow_eod.core.table_layout import META_DIR, path_part, under


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
    raise ConfigurationError(
        f"table URI {uri!r}: only local or shared-filesystem paths (or file:// URIs) "
        "are supported by this release, because the plan log needs put-if-absent files"
    )


@dataclass(frozen=True)
class TableRef:
    """A Delta table, parsed once (:meth:`parse`).

    Two references to the same table compare equal, however the user spelled it
    (``/lake/t``, ``file:///lake/t``, ``/lake/./t``).

    :param location: the canonical location: the absolute path of the table's root.
    """

    location: str

    @classmethod
    def parse(cls, uri: str | TableRef) -> TableRef:
        """The reference to the table ``uri`` names (a reference is returned as it is).

        :param uri: a local path or a ``file://`` URI, as the user wrote it.
        :raises ConfigurationError: for a URI this release cannot load into (an object
            store, a path with ``%``), naming the URI and the cause.
        """
        if isinstance(uri, TableRef):
            return uri
        if not isinstance(uri, str):
            raise ConfigurationError(f"a table is named by a path or a file:// URI, not {uri!r}")
        return cls(location=_local_path(uri))

    def __str__(self) -> str:
        return self.location

    @property
    def path(self) -> str:
        """The table root on the local (or shared, POSIX) filesystem, for the engines that
        read it by path (delta-rs, Spark) and for messages."""
        return self.location

    @property
    def asset_uri(self) -> str:
        """The table as an Airflow Asset URI: ``file://`` and the absolute path,
        percent-encoded (Airflow drops a URI's fragment, so a ``#`` must not stay raw)."""
        # POSIX leaves a path that starts with exactly two slashes to the system (Linux reads
        # it as one); "file:////x" would become host "x" in Airflow's URI normalisation.
        return Path("/" + self.location.lstrip("/")).as_uri()

    def storage(self) -> Storage:
        """The bytes of the table (its log and everything airflow-eod keeps beside it).

        A new, short-lived storage on each call: the local backend remembers which
        directories it found to be no link, which must not outlive one read or write.
        """
        return storage_at(self.location)

    def plan_log_key(self, pipeline_id: str) -> str:
        """The storage key of the plan log of ``pipeline_id`` in this table."""
        return f"{META_DIR}/pipelines/{path_part(pipeline_id, 'pipeline id')}"

    @property
    def plan_logs_key(self) -> str:
        """The storage key under which every pipeline's plan log lives."""
        return f"{META_DIR}/pipelines"

    def dir(self, rel_dir: str) -> str:
        """The local path of ``rel_dir`` (from :func:`~airflow_eod.core.table_layout.batch_dir`
        or :func:`~airflow_eod.core.table_layout.attempt_dir`) in the table, refused when a link
        on the way leads out of the table."""
        return under(self.location, *rel_dir.split("/"))


TableLike = str | TableRef
"""What the public entry points (the operators, the sensor, the CLI, ``audit_table``) accept:
the user's string or a reference already parsed."""
