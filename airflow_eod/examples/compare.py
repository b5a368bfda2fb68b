"""Compare a Delta table with its landing files row by row: every source row in the table
exactly once, and nothing else. ``make demo`` prints this comparison after its crash and
retry; the fault tests use it too. (``airflow-eod verify`` is the audit for users' tables.)
"""

from __future__ import annotations

import glob
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq
from deltalake import DeltaTable

from airflow_eod.core.table_ref import TableLike, TableRef


@dataclass
class Comparison:
    """The result of a row-by-row comparison."""

    source_rows: int
    table_rows: int
    missing: list[tuple[Any, ...]] = field(default_factory=list)
    duplicates: list[tuple[Any, ...]] = field(default_factory=list)
    unexpected: list[tuple[Any, ...]] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not (self.missing or self.duplicates or self.unexpected)

    def describe(self) -> str:
        return (
            f"source rows {self.source_rows}, table rows {self.table_rows}, "
            f"missing {len(self.missing)}, duplicates {len(self.duplicates)}, "
            f"unexpected {len(self.unexpected)}"
        )


def _rows(table: pa.Table, columns: list[str]) -> list[tuple[Any, ...]]:
    data = table.select(columns).to_pylist()
    return [tuple(r[c] for c in columns) for r in data]


def compare_rows(source: list[tuple[Any, ...]], target: list[tuple[Any, ...]]) -> Comparison:
    """Multiset comparison: each source row must appear exactly as often in the target."""
    want, have = Counter(source), Counter(target)
    cmp = Comparison(len(source), len(target))
    for row, n in want.items():
        got = have.get(row, 0)
        if got < n:
            cmp.missing.extend([row] * (n - got))
        elif got > n:
            cmp.duplicates.extend([row] * (got - n))
    cmp.unexpected = [row for row, n in have.items() if row not in want for _ in range(n)]
    return cmp


def read_delta_rows(table_uri: TableLike, columns: list[str]) -> list[tuple[Any, ...]]:
    """Every visible row of the Delta table (read with delta-rs, not Spark; on an object
    store with the reference's storage options)."""
    ref = TableRef.parse(table_uri)
    table = DeltaTable(ref.location, storage_options=ref.storage_options)
    return _rows(pa.table(table.to_pyarrow_table()), columns)


def replay_log(table_uri: str) -> dict[str, dict[str, Any]]:
    """The live files of a Delta table by replaying its JSON commits, independent of delta-rs:
    decoded path -> its ``add`` action. Needs every commit file from version 0 (no log
    cleanup), which is what the tests that use it keep."""
    log_dir = os.path.join(table_uri, "_delta_log")
    live: dict[str, dict[str, Any]] = {}
    for name in sorted(n for n in os.listdir(log_dir) if n.endswith(".json") and n[:20].isdigit()):
        with open(os.path.join(log_dir, name)) as fh:
            for line in fh:
                if not line.strip():
                    continue
                action = json.loads(line)
                if "add" in action:
                    live[unquote(action["add"]["path"])] = action["add"]
                elif "remove" in action:
                    live.pop(unquote(action["remove"]["path"]), None)
    return live


def read_rows_by_log(table_uri: str, columns: list[str]) -> list[tuple[Any, ...]]:
    """Every visible row, read by a second reader: the log replayed here, the files read with
    pyarrow, partition values taken from the log. A path the log encodes wrongly fails here."""
    rows: list[tuple[Any, ...]] = []
    for path, add in sorted(replay_log(table_uri).items()):
        data = pq.read_table(os.path.join(table_uri, path))
        for record in data.to_pylist():
            record.update(add.get("partitionValues") or {})
            rows.append(tuple(record.get(c) for c in columns))
    return rows


def read_landing_rows(
    directory: str, file_format: str, columns: list[str], schema: pa.Schema | None = None
) -> list[tuple[Any, ...]]:
    """Every row of every data file in a landing directory (read with pyarrow). As for the
    landing source, links and anything but regular files are not input."""
    tables = []
    real_root = os.path.realpath(directory)
    for path in sorted(glob.glob(os.path.join(directory, "**", "*"), recursive=True)):
        name = os.path.basename(path)
        if os.path.isdir(path) or name.startswith(("_", ".")):
            continue
        rel = os.path.relpath(path, directory)
        if os.path.realpath(path) != os.path.join(real_root, rel) or not os.path.isfile(path):
            continue  # a link (or a file reached through one), a FIFO: never loaded
        if file_format == "csv":
            opts = pacsv.ConvertOptions(column_types=schema) if schema is not None else None
            tables.append(pacsv.read_csv(path, convert_options=opts))
        elif file_format == "json":
            tables.append(pajson.read_json(path, parse_options=pajson.ParseOptions(explicit_schema=schema)))
        else:
            tables.append(pq.read_table(path))
    rows: list[tuple[Any, ...]] = []
    for t in tables:
        rows.extend(_rows(t, columns))
    return rows


def read_store_landing_rows(
    prefix: str,
    storage_options: dict[str, str] | None,
    file_format: str,
    columns: list[str],
    schema: pa.Schema | None = None,
) -> list[tuple[Any, ...]]:
    """Every row of every data file under a landing prefix on an object store
    (``s3://bucket/prefix``), listed and read whole through the storage seam, parsed with
    pyarrow: a reader independent of the source's planning and of Spark. As for the landing
    source, names with a segment starting with ``_`` or ``.`` are not input."""
    import io

    from airflow_eod.core.storage import storage_at

    store = storage_at(prefix.rstrip("/"), storage_options)
    rows: list[tuple[Any, ...]] = []
    for key, _head in sorted(store.walk()):  # type: ignore[attr-defined]
        if any(part.startswith(("_", ".")) for part in key.split("/")):
            continue
        data = io.BytesIO(store.get(key))
        if file_format == "csv":
            opts = pacsv.ConvertOptions(column_types=schema) if schema is not None else None
            table = pacsv.read_csv(data, convert_options=opts)
        elif file_format == "json":
            table = pajson.read_json(data, parse_options=pajson.ParseOptions(explicit_schema=schema))
        else:
            table = pq.read_table(data)
        rows.extend(_rows(table, columns))
    return rows


def compare_table_with_landing(
    table_uri: TableLike,
    directory: str | TableRef,
    file_format: str,
    columns: list[str],
    schema: pa.Schema | None = None,
) -> Comparison:
    """Compare the table with the landing directory, row by row, on ``columns``. A landing
    prefix on an object store is given as the reference of its URI and storage options
    (a :class:`TableRef`), or as a URI whose store needs no options."""
    if isinstance(directory, TableRef) or "://" in directory:
        ref = TableRef.parse(directory)
        landing = read_store_landing_rows(ref.location, ref.storage_options, file_format, columns, schema)
    else:
        landing = read_landing_rows(directory, file_format, columns, schema)
    return compare_rows(landing, read_delta_rows(table_uri, columns))
