"""Spark paths, CSV headers and the check of what Spark resolved, for landing files.

Spark's reader treats every path as a Hadoop glob, so :func:`spark_path` escapes glob
characters, and :func:`path_of_uri` turns what Spark reports back into a local path. A CSV
header is read here, in Python, with the reader options' dialect (separator, quote,
escape, encoding, comment, line separator, a byte-order mark, gzip or bzip2), so that
columns can be matched by name. Once Spark has resolved the paths, :func:`check_resolved`
compares the files it will scan with the plan.

The landing files are local here (:class:`LocalFiles`); files on an object store are
reached through another :class:`LandingFiles` (:mod:`airflow_eod.spark.landing_store_files`).
"""

from __future__ import annotations

import bz2
import csv
import gzip
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlparse

from airflow_eod.core.errors import BatchRefusedError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_NAMED_FILES = 5  # files spelled out in one error message

_GLOB_CHARS = re.compile(r"([\\\[\]{}*?])")
# Enough of a file's start to hold its header; a header longer than this reads truncated.
_HEAD_BYTES = 1 << 16
# Codecs Hadoop decompresses by file extension that Python's standard library cannot.
_SPARK_ONLY_CODECS = (".deflate", ".lz4", ".snappy", ".zst", ".zstd")


def spark_path(path: str) -> str:
    """The URI that makes Spark read exactly the local file ``path`` (glob characters escaped).

    :param path: an absolute local path.
    """
    return "file://" + _GLOB_CHARS.sub(r"\\\1", path)


def path_of_uri(uri: str) -> str:
    """The local path of a file URI as Spark reports it (percent-encoded, or not).

    :param uri: e.g. ``file:///landing/x%5B1%5D.csv``.
    """
    return unquote(urlparse(uri).path)


class LandingFiles(Protocol):
    """Where a batch's planned files are, as Spark and Python reach them."""

    def spark_path(self, path: str) -> str:
        """The URI that makes Spark read exactly the planned file ``path``."""
        ...

    def path_of_uri(self, uri: str) -> str:
        """The planned path of a file Spark reports reading."""
        ...

    def readable(self, path: str) -> str | IO[bytes]:
        """What Python reads ``path`` from: a local path, or an open binary file."""
        ...


class LocalFiles:
    """Landing files on the local file system (or a shared one)."""

    def spark_path(self, path: str) -> str:
        return spark_path(path)

    def path_of_uri(self, uri: str) -> str:
        return path_of_uri(uri)

    def readable(self, path: str) -> str | IO[bytes]:
        return path


LOCAL_FILES = LocalFiles()


@dataclass(frozen=True)
class CsvDialect:
    """How Spark splits a CSV file, as far as reading a header or a record in Python needs.

    :param header: whether each file's first line names its columns.
    :param sep: the field separator.
    :param quote: the quote character (empty: no quoting).
    :param escape: the escape character inside quoted values.
    :param encoding: the files' character set.
    :param comment: lines starting with it are skipped (empty: none).
    :param line_sep: the line separator (empty: any of ``\\n``, ``\\r\\n``, ``\\r``).
    :param null_value: the text that reads as null.
    """

    header: bool = False
    sep: str = ","
    quote: str = '"'
    escape: str = "\\"
    encoding: str = "utf-8"
    comment: str = ""
    line_sep: str = ""
    null_value: str = ""

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> CsvDialect:
        """The dialect Spark's CSV reader uses with ``options`` (keys in lower case)."""
        return cls(
            header=options.get("header", "false").strip().lower() == "true",
            sep=_unescape(options.get("sep", options.get("delimiter", ","))),
            quote=options.get("quote", '"'),
            escape=options.get("escape", "\\"),
            encoding=options.get("encoding", options.get("charset", "utf-8")),
            comment=options.get("comment", ""),
            line_sep=options.get("linesep", ""),
            null_value=options.get("nullvalue", ""),
        )

    def first_record(self, text: str) -> list[str] | None:
        """The first record of ``text`` as this dialect splits it (blank and comment lines
        skipped); ``None`` when there is none."""
        lines = (
            ln
            for ln in (text.split(self.line_sep) if self.line_sep else text.splitlines(keepends=True))
            if ln.strip() and not (self.comment and ln.startswith(self.comment))
        )
        if len(self.sep) != 1:  # Python's csv module takes one-character separators only
            return next((ln.rstrip("\r\n").split(self.sep) for ln in lines), None)
        escape = self.escape if self.escape and self.escape != self.quote else None
        if self.quote:
            reader = csv.reader(lines, delimiter=self.sep, quotechar=self.quote, escapechar=escape)
        else:
            reader = csv.reader(lines, delimiter=self.sep, escapechar=escape, quoting=csv.QUOTE_NONE)
        try:
            return next(reader, None)
        except csv.Error:
            first = next(iter(text.splitlines()), "")
            return first.split(self.sep) if first.strip() else None


def _unescape(sep: str) -> str:
    """Spark accepts separators written as escapes (``\\t``, ``\\u0001``)."""
    if sep.startswith("\\") and len(sep) > 1:
        try:
            return sep.encode("latin-1").decode("unicode_escape")
        except (UnicodeDecodeError, UnicodeEncodeError):
            return sep
    return sep


def _head_text(
    path: str, encoding: str, spark: SparkSession | None, files: LandingFiles = LOCAL_FILES
) -> str:
    """The first part of a (possibly compressed) file, decoded."""
    lower = path.lower()
    if lower.endswith(_SPARK_ONLY_CODECS) and spark is not None:
        rows = spark.read.text(files.spark_path(path)).limit(64).collect()
        return "\n".join(r[0] for r in rows)
    opener: Any = gzip.open if lower.endswith(".gz") else bz2.open if lower.endswith(".bz2") else open
    source = files.readable(path)
    if not isinstance(source, str) and opener is open:
        with source as fh:
            raw: bytes = fh.read(_HEAD_BYTES)
    else:
        with opener(source, "rb") as fh:
            raw = fh.read(_HEAD_BYTES)
    return raw.decode(encoding, errors="replace")


def csv_header(
    path: str, dialect: CsvDialect, spark: SparkSession | None = None, files: LandingFiles = LOCAL_FILES
) -> list[str] | None:
    """The column names in a CSV file's header; ``None`` when the file holds no line.

    :param path: the planned file.
    :param dialect: how the file is split.
    :param spark: reads files whose codec Python lacks.
    :param files: where the planned files are (local by default).
    :raises OSError, LookupError: the file cannot be read, or the encoding is unknown.
    """
    text = _head_text(path, dialect.encoding, spark, files).removeprefix("\ufeff")
    # The head, not its first line: a quoted header name may hold a line break.
    header = dialect.first_record(text)
    return None if header is None else [name.strip() for name in header]


# -- what Spark resolved -------------------------------------------------------------------
def resolved_files(df: DataFrame, files: LandingFiles = LOCAL_FILES) -> list[str]:
    """The planned path of every file ``df`` scans, once per scan of it.

    ``DataFrame.inputFiles()`` is a set, so a file resolved twice (a glob and a plain path
    naming the same file) shows once there; the file relations' own lists keep repeats.
    """
    try:
        # The analyzed plan: built when the DataFrame was, where optimizing it would be a
        # planning pass of its own on every load (the write plans its own query anyway).
        leaves = df._jdf.queryExecution().analyzed().collectLeaves()
        uris: list[str] = []
        for i in range(leaves.size()):
            leaf = leaves.apply(i)
            if leaf.getClass().getSimpleName() == "LogicalRelation":
                uris.extend(leaf.relation().inputFiles())
    except Exception:  # another Spark's internals: fall back on the public, de-duplicated list
        uris = list(df.inputFiles())
    return [files.path_of_uri(u) for u in uris]


def check_resolved(label: str, planned: Sequence[str], resolved: Sequence[str]) -> None:
    """Fail unless Spark resolved each planned file exactly once and nothing else.

    :param label: the batch.
    :param planned: the plan's files.
    :param resolved: the files Spark's index resolved (:func:`resolved_files`).
    :raises BatchError: naming the files that differ.
    """
    want = Counter(os.path.normpath(p) for p in planned)
    have = Counter(os.path.normpath(p) for p in resolved)
    if want == have:
        return
    parts = []
    unread = sorted(want - have)
    if unread:
        parts.append(f"planned but not read: {', '.join(unread[:_NAMED_FILES])}")
    unplanned = sorted(p for p in have if p not in want)
    if unplanned:
        parts.append(f"read but not planned: {', '.join(unplanned[:_NAMED_FILES])}")
    repeated = sorted(p for p, n in have.items() if p in want and n > want[p])
    if repeated:
        parts.append(f"read more than once: {', '.join(repeated[:_NAMED_FILES])}")
    raise BatchRefusedError(
        label,
        "Spark resolved other files than the batch's plan holds ("
        + "; ".join(parts)
        + "); nothing was committed. This is a bug in handing the paths to Spark: rename the "
        "odd files (avoid [ ] { } * ? \\ in names) and report it",
    )
