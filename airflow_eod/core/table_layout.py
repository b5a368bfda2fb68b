"""Where things live in and beside a table: URIs, local paths, and the directories
airflow-eod writes (the plan log, and one data directory per batch attempt)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import ConfigurationError

# Directory inside the table root that holds the plan log. The leading underscore keeps
# Delta's VACUUM away from it, and readers never look outside ``_delta_log``'s list.
META_DIR = "_eod"
# Directory inside the table root that holds staged and committed data files. No leading
# underscore or dot: VACUUM must be able to delete files that a restatement removed.
DATA_DIR = "eod_data"


def local_path(table_uri: str) -> str:
    """The local filesystem path of ``table_uri`` (a path or a ``file://`` URI).

    The plan log needs put-if-absent, which this release implements with the local (or
    shared, POSIX) filesystem; object-store URIs are refused with a clear error.
    """
    parsed = urlparse(table_uri)
    if parsed.scheme in ("", "file"):
        path = unquote(parsed.path) if parsed.scheme == "file" else table_uri
        if not path:
            raise ConfigurationError(f"table URI {table_uri!r} has no path")
        if "%" in path:
            # delta-rs percent-decodes table paths: "t%41b" would be read as "tAb", so the
            # batch just committed could never be found again.
            raise ConfigurationError(
                f"table path {path!r} holds a '%', which delta-rs decodes as a URI escape; "
                "choose a table path without '%'"
            )
        return os.path.abspath(path)
    if len(parsed.scheme) == 1:  # a Windows drive letter, not a scheme
        return os.path.abspath(table_uri)
    raise ConfigurationError(
        f"table URI {table_uri!r}: only local or shared-filesystem paths (or file:// URIs) "
        "are supported by this release, because the plan log needs put-if-absent files"
    )


def table_asset_uri(table_uri: str) -> str:
    """The table as an Airflow Asset URI: ``file://`` and the absolute path, percent-encoded
    (Airflow drops a URI's fragment, so a ``#`` in a path must not be left raw)."""
    # POSIX leaves a path that starts with exactly two slashes to the system (Linux reads it
    # as one); "file:////x" would become host "x" in Airflow's URI normalisation.
    return Path("/" + local_path(table_uri).lstrip("/")).as_uri()


def normalise(table_uri: str) -> str:
    """The canonical form of a table URI used in results and logs (an absolute path)."""
    return local_path(table_uri)


def batch_dir(batch: BatchKey) -> str:
    """The directory, relative to the table root, that holds every attempt of ``batch``."""
    return f"{DATA_DIR}/{batch.pipeline_id}/{batch.key}"


def attempt_dir(batch: BatchKey, generation: int, attempt_id: str) -> str:
    """The directory, relative to the table root, unique to one attempt of ``batch``."""
    return f"{batch_dir(batch)}/g{generation}-{attempt_id}"
