"""Per-file Delta statistics (numRecords, minValues, maxValues, nullCount) read from
Parquet footers, so data skipping works on files the engine commits.

Only values that can be stated exactly are written: a missing min/max never makes a
reader skip a file that holds matching rows, a wrong one would. Long strings, binary,
booleans, NaN and decimals that a JSON number cannot hold exactly get no min/max.
Timestamps are floored (min) or ceiled (max) to the millisecond precision of the stats.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from typing import Any

import pyarrow.parquet as pq

MAX_STRING_STAT = 32
_UNSET = object()
# Spark marks a file whose dates and timestamps it rebased to the hybrid Julian calendar
# (spark.sql.parquet.datetimeRebaseModeInWrite=LEGACY): the footer's values are not the ones
# Spark reads back (1000-01-01 is stored as 1000-01-06), so they state no min/max.
_LEGACY_CALENDAR_KEYS = (b"org.apache.spark.legacyDateTime", b"org.apache.spark.legacyINT96")


def _ts_to_stat(value: dt.datetime, *, ceil: bool, utc: bool) -> str:
    micros = value.microsecond
    # A nanosecond timestamp (pandas' Timestamp) keeps its nanoseconds past the microsecond.
    nanos = getattr(value, "nanosecond", 0)
    value = value.replace(microsecond=(micros // 1000) * 1000)
    if ceil and (micros % 1000 or nanos):
        value += dt.timedelta(milliseconds=1)
    if utc and value.tzinfo is not None:
        value = value.astimezone(dt.UTC)
    text = value.replace(tzinfo=None).isoformat(timespec="milliseconds")
    return text + ("Z" if utc else "")


def _stat_value(value: Any, *, ceil: bool, utc: bool) -> Any:
    """The JSON value for a min/max, or ``_UNSET`` when it cannot be stated exactly."""
    if isinstance(value, bool) or value is None:
        return _UNSET
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _UNSET
    if isinstance(value, Decimal):
        as_float = float(value)
        return as_float if Decimal(repr(as_float)) == value else _UNSET
    if isinstance(value, str):
        return value if len(value) <= MAX_STRING_STAT else _UNSET
    if isinstance(value, dt.datetime):
        try:
            return _ts_to_stat(value, ceil=ceil, utc=utc)
        except OverflowError:  # 9999-12-31 23:59:59.999999 ceiled: past the last datetime
            return _UNSET
    if isinstance(value, dt.date):
        return value.isoformat()
    return _UNSET


def _set_nested(target: dict[str, Any], path: list[str], value: Any) -> None:
    for part in path[:-1]:
        target = target.setdefault(part, {})
    target[path[-1]] = value


def file_stats(path: Any) -> tuple[int, str]:
    """``(numRecords, stats JSON)`` for the Parquet file at ``path`` (a local path, or a
    seekable file object: an object read through the storage seam)."""
    meta = pq.read_metadata(path)
    schema = meta.schema
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    legacy_calendar = any(k in (meta.metadata or {}) for k in _LEGACY_CALENDAR_KEYS)
    leaves = _leaf_paths(schema.to_arrow_schema())
    if len(leaves) != meta.num_columns:  # a schema this walk does not know: no stats, never wrong ones
        leaves = []
    for col, (parts, in_list_or_map) in enumerate(leaves):
        # Leaves inside lists and maps get no stats: Delta keeps stats for structs only. A
        # leaf whose Parquet path is not the one walked from the schema gets none either.
        if in_list_or_map or ".".join(parts) != schema.column(col).path:
            continue
        column = schema.column(col)
        lo: Any = _UNSET
        hi: Any = _UNSET
        null_count: int | None = 0
        have_minmax = True
        utc = _is_utc_timestamp(column)
        for rg in range(meta.num_row_groups):
            if meta.row_group(rg).num_rows == 0:
                continue
            st = meta.row_group(rg).column(col).statistics
            if st is None:
                have_minmax, null_count = False, None
                break
            if null_count is not None:
                null_count = null_count + st.null_count if st.has_null_count else None
            if not st.has_min_max:
                # A row group of nulls only has no min/max; it does not widen the range.
                if st.has_null_count and st.null_count == meta.row_group(rg).num_rows:
                    continue
                have_minmax = False
                continue
            if legacy_calendar and isinstance(st.min, dt.date):
                have_minmax = False
                continue
            cand_lo = _stat_value(st.min, ceil=False, utc=utc)
            cand_hi = _stat_value(st.max, ceil=True, utc=utc)
            if cand_lo is _UNSET or cand_hi is _UNSET:
                have_minmax = False
                continue
            lo = cand_lo if lo is _UNSET or cand_lo < lo else lo
            hi = cand_hi if hi is _UNSET or cand_hi > hi else hi
        if have_minmax and lo is not _UNSET:
            _set_nested(mins, parts, lo)
            _set_nested(maxs, parts, hi)
        if null_count is not None:
            _set_nested(nulls, parts, null_count)
    stats = {"numRecords": meta.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    return meta.num_rows, json.dumps(stats, sort_keys=True)


def _is_utc_timestamp(column: Any) -> bool:
    logical = str(column.logical_type)
    return "isAdjustedToUTC=true" in logical.replace(" ", "") or "is_adjusted_to_utc=true" in logical


def _leaf_paths(arrow_schema: Any) -> list[tuple[list[str], bool]]:
    """Each Parquet leaf column's path as field names, in the file's column order, and
    whether it sits inside a list or a map.

    Parquet's own ``column.path`` joins the names with dots, so it cannot tell a top-level
    column named ``v.x`` (Delta allows it) from field ``x`` of a struct ``v``: the names are
    walked from the schema instead, in the depth-first order Parquet stores leaves in.
    """
    import pyarrow as pa

    leaves: list[tuple[list[str], bool]] = []

    def walk(field_type: Any, path: list[str], nested: bool) -> None:
        if pa.types.is_struct(field_type):
            for child in field_type:
                walk(child.type, [*path, child.name], nested)
        elif pa.types.is_map(field_type):
            walk(field_type.key_type, [*path, "key"], True)
            walk(field_type.item_type, [*path, "value"], True)
        elif (
            pa.types.is_list(field_type)
            or pa.types.is_large_list(field_type)
            or pa.types.is_fixed_size_list(field_type)
        ):
            walk(field_type.value_type, [*path, "element"], True)
        else:
            leaves.append((path, nested))

    for field in arrow_schema:
        walk(field.type, [field.name], False)
    return leaves
