"""Landing files on an object store, as Spark and Python reach them.

Spark reads the frozen list of files by their Hadoop URIs (``s3a://bucket/prefix/key``),
glob characters escaped in the whole path (the prefix's as well as the key's: a prefix
``land[1]`` is no pattern), with the store's Hadoop settings (from the
landing prefix's storage options) set on the session first, as staging does for a table
(:func:`airflow_eod.spark.staging.spark_uri`). Python reads a CSV header or a Parquet footer
through the storage seam, in ranged reads of the planned file, never past its planned size.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING
from urllib.parse import unquote

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.storage.object_file import open_object
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.sources.landing_store import StoreLanding
from airflow_eod.spark.landing_paths import LOCAL_FILES, LandingFiles
from airflow_eod.spark.object_store_conf import prepare_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from airflow_eod.core.planlog.store import Plan

_GLOB_CHARS = re.compile(r"([\\\[\]{}*?])")


class StoreFiles:
    """The planned files of a landing prefix on an object store.

    :param landing: the landing prefix (with its storage options, in memory).
    :param spark_root: the prefix as Spark's Hadoop file system names it (``s3a://...``), as
        written (not percent-encoded, glob characters not escaped).
    :param sizes: each planned file's size, by path: Python reads no further.
    """

    def __init__(self, *, landing: StoreLanding, spark_root: str, sizes: Mapping[str, int]) -> None:
        self.landing = landing
        self.spark_root = spark_root.rstrip("/")
        self.sizes = dict(sizes)
        # The bucket (container@account) cannot hold a glob character; the path after it can.
        cut = self.spark_root.find("/", self.spark_root.find("://") + 3)
        head, tail = (self.spark_root, "") if cut < 0 else (self.spark_root[:cut], self.spark_root[cut:])
        self._escaped_root = head + _GLOB_CHARS.sub(r"\\\1", tail)

    def _key(self, path: str) -> str:
        key = self.landing.key_of(path)
        if key is None:  # planning and verify refuse it first (invariant I11): never read
            raise ConfigurationError(f"{path!r} is not a file of the landing prefix {self.landing.root}")
        return key

    def spark_path(self, path: str) -> str:
        escaped = _GLOB_CHARS.sub(r"\\\1", self._key(path))
        return f"{self._escaped_root}/{escaped}"

    def path_of_uri(self, uri: str) -> str:
        # Spark reports a file by its URI, percent-encoded (a space as %20): the prefix is
        # compared decoded, as written.
        plain = unquote(uri)
        if not plain.startswith(self.spark_root + "/"):
            return uri  # not under the prefix: the check of what Spark resolved names it
        return f"{self.landing.root}/{plain[len(self.spark_root) + 1 :]}"

    def readable(self, path: str) -> str | IO[bytes]:
        return open_object(self.landing.storage(), self._key(path), self.sizes.get(path, 0))


def landing_files(spark: SparkSession, source: LandingFilesSource, plan: Plan) -> LandingFiles:
    """Where the batch's files are: the local file system, or the source's object store, with
    its Hadoop settings set on ``spark`` (before the session's first read of that bucket).

    :raises ConfigurationError: the store's Hadoop connector is not on the driver's class
        path, or a storage option cannot be expressed for it.
    """
    if not source.on_store:
        return LOCAL_FILES
    landing = source.store()
    spark_uri = prepare_session(spark, landing.root, landing.options, f"landing path {landing.root}")
    # The connector's scheme and bucket, and the prefix exactly as the landing root spells it
    # (a URI parser would take a '?' or '#' in it for a query or a fragment).
    scheme_bucket = spark_uri.split("/", 3)[:3]
    prefix = landing.root.split("/", 3)[3:]
    spark_root = "/".join(scheme_bucket + prefix)
    sizes = {str(e.get("path")): int(e.get("size") or 0) for e in plan.inputs}
    return StoreFiles(landing=landing, spark_root=spark_root, sizes=sizes)
