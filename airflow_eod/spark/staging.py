"""Staging: Spark writes a batch's Parquet files into the attempt's own directory.

Nothing written here is visible in the table until the commit adds it. The files' Delta
statistics and partition values are read back from the footers and the directory names.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.delta.parquet_stats import file_stats
from airflow_eod.core.errors import BatchRefusedError, ConfigurationError, UnsafePathError
from airflow_eod.core.staged_files import StagedBatch, StagedFile
from airflow_eod.core.storage.object_file import open_object
from airflow_eod.core.table_layout import attempt_dir
from airflow_eod.core.table_ref import TableRef

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Types whose partition directory name is also the Delta partition value string.
PARTITION_TYPES = ("string", "integer", "long", "short", "byte", "date", "boolean")
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
# What a partition directory keeps as it is; anything else is percent-encoded (see
# _ascii_partition_dirs). '%' stays: Spark's own escapes are already in that form.
_PLAIN = re.compile(r"[A-Za-z0-9._=%-]*")


def _check_partitions(df: DataFrame, partition_by: list[str], label: str) -> None:
    types = {f.name: f.dataType.typeName() for f in df.schema.fields}
    for col in partition_by:
        if col not in types:
            raise BatchRefusedError(label, f"partition column {col} is not in the data ({sorted(types)})")
        if types[col] not in PARTITION_TYPES:
            raise BatchRefusedError(
                label,
                f"partition column {col} has type {types[col]}; partition by one of "
                f"{', '.join(PARTITION_TYPES)}",
            )
    if partition_by and len(partition_by) == len(types):
        raise BatchRefusedError(label, "every column is a partition column; keep at least one data column")


def _ascii_partition_dirs(out: str, label: str) -> None:
    """Rename the partition directories Spark wrote so that their names are plain ASCII:
    ``customer=日`` becomes ``customer=%E6%97%A5``, the name deltalake itself writes.

    Writers spell a file's path in the log differently (Delta Spark leaves non-ASCII
    letters as they are, deltalake percent-encodes them), and each matches a ``remove`` to
    its ``add`` by its own spelling: Delta Spark's VACUUM deletes live files whose ``add``
    is spelled the other way, and deltalake's OPTIMIZE or DELETE leaves them live beside
    their rewrite. Names of plain ASCII are spelled alike by all of them. The values read
    back the same (:func:`urllib.parse.unquote` of the name), and the attempt's folder is
    its own until the commit."""
    for dirpath, dirs, _names in os.walk(out, topdown=False):
        for name in dirs:
            if "=" in name and not _PLAIN.fullmatch(name):
                plain = quote(name, safe="=%")
                if len(plain) > 255:
                    raise BatchRefusedError(
                        label,
                        f"the partition folder {name!r} is {len(plain)} characters long once "
                        "percent-encoded, more than a file name may be (255); use shorter partition "
                        "values. Nothing was committed",
                    )
                os.rename(os.path.join(dirpath, name), os.path.join(dirpath, plain))


def spark_uri(df: DataFrame, ref: TableRef, location: str) -> str:
    """The URI Spark's Hadoop file systems write ``location`` (in the table ``ref``) by, with
    the store's settings (from the reference's storage options) set on the session first."""
    if ref.is_local:
        return f"file://{location}"
    if ref.scheme == "hdfs":
        # Spark's own file system: the NameNode is in the URI, or (an HA nameservice) in the
        # Hadoop configuration of $HADOOP_CONF_DIR, which Spark reads as the storage seam does.
        return location
    if ref.scheme == "gs":
        # Hadoop 3.5's GCS connector has no setting for another endpoint, so Spark's writes to
        # gs:// cannot be tested against an emulator here: not offered (docs/object-stores.md).
        raise ConfigurationError(f"{ref}: Spark does not write to {ref.scheme}:// in this release")
    from airflow_eod.spark.object_store_conf import prepare_session

    return prepare_session(df.sparkSession, location, ref.storage_options, f"table {ref}")


def _plain_store_keys(ref: TableRef, rel_dir: str) -> None:
    """The store's :func:`_ascii_partition_dirs`: a store has no folders to rename, so each
    object below a partition folder whose name is not plain ASCII moves to the plain spelling
    (a copy and a delete on a store, a rename on HDFS; the attempt's folder is its own until
    the commit)."""
    store: Any = ref.storage()
    if not (hasattr(store, "walk") and hasattr(store, "rename")):
        raise TypeError(f"{ref} is not on an object store or HDFS")
    for key, _head in list(store.walk(rel_dir)):
        segs = key[len(rel_dir) + 1 :].split("/")
        plain = [quote(s, safe="=%") if "=" in s and not _PLAIN.fullmatch(s) else s for s in segs]
        if plain != segs:
            store.rename(key, "/".join([rel_dir, *plain]))


def _partition_values(segments: list[str], label: str) -> dict[str, str | None]:
    parts: dict[str, str | None] = {}
    for seg in segments:
        if "=" in seg:
            if not _PLAIN.fullmatch(seg):  # _plain_store_keys moved them all; someone else wrote here
                why = f"the partition folder {seg!r} is not plain ASCII after staging; nothing was committed"
                raise BatchRefusedError(label, why)
            col, _, raw = seg.partition("=")
            value = unquote(raw)
            parts[unquote(col)] = None if value == _HIVE_NULL else value
    return parts


def _stored_files(ref: TableRef, rel_dir: str, label: str) -> list[StagedFile]:
    """The Parquet files Spark wrote under ``rel_dir`` on the table's object store, listed and
    their footers read through the storage seam (one listing per folder, one ranged read or
    two per file)."""
    store = ref.storage()
    files: list[StagedFile] = []
    folders = [rel_dir]
    while folders:
        folder = folders.pop()
        # A set: on Azure's Blob endpoint Hadoop leaves an empty marker object per folder,
        # so a partition folder is listed twice (the marker and the prefix), and would be
        # walked, and its files staged, twice.
        for name in sorted(set(store.list(folder))):
            key = f"{folder}/{name}"
            if not name.endswith(".parquet"):
                if "=" in name and not name.startswith(("_", ".")):
                    folders.append(key)  # a partition folder
                continue
            head = store.head(key)
            if head is None:
                continue  # a folder named like a file: Spark writes none
            with open_object(store, key, head.size) as fh:
                rows, stats = file_stats(fh)
            parts = _partition_values(key[len(rel_dir) + 1 :].split("/")[:-1], label)
            files.append(StagedFile(key, head.size, head.mtime_ns // 1_000_000, parts, rows, stats))
    files.sort(key=lambda f: f.path)
    return files


def stage_dataframe(
    df: DataFrame,
    ref: TableRef,
    batch: BatchKey,
    generation: int,
    attempt_id: str,
    partition_by: list[str],
) -> StagedBatch:
    """Write ``df`` as Parquet under the attempt's directory and describe the files."""
    _check_partitions(df, partition_by, batch.label)
    root = ref.path
    rel_dir = attempt_dir(batch, generation, attempt_id)
    try:
        # Refused if a link in the table leads the attempt's directory out of it.
        out = ref.dir(rel_dir)
    except UnsafePathError as exc:
        raise UnsafePathError(batch.label, f"{exc.cause}; nothing was written") from None
    writer = df.write.mode("errorifexists").format("parquet")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    if not ref.is_local:
        writer.save(spark_uri(df, ref, out))
        if partition_by:
            _plain_store_keys(ref, rel_dir)
        stored = _stored_files(ref, rel_dir, batch.label)
        return StagedBatch(df.schema.json(), list(partition_by), rel_dir, stored)
    writer.save(f"file://{out}")
    _ascii_partition_dirs(out, batch.label)
    files: list[StagedFile] = []
    for dirpath, _dirs, names in os.walk(out):
        for name in sorted(names):
            full = os.path.join(dirpath, name)
            if name.startswith("."):
                os.unlink(full)  # Hadoop's .crc side files are not data
                continue
            if not name.endswith(".parquet"):
                continue
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            parts: dict[str, str | None] = {}
            for seg in os.path.relpath(dirpath, out).split(os.sep):
                if "=" in seg:
                    col, _, raw = seg.partition("=")
                    value = unquote(raw)
                    parts[unquote(col)] = None if value == _HIVE_NULL else value
            rows, stats = file_stats(full)
            st = os.stat(full)
            files.append(StagedFile(rel, st.st_size, int(st.st_mtime * 1000), parts, rows, stats))
    files.sort(key=lambda f: f.path)
    return StagedBatch(df.schema.json(), list(partition_by), rel_dir, files)
