"""Change-data files for the merge tests, and the checker: the table against the source's
newest row per key, row by row."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from airflow_eod.sources.landing_files import LandingFilesSource

CDC_DDL = "id BIGINT, name STRING, amount BIGINT, seq BIGINT, op STRING"
CDC_COLUMNS = ["id", "name", "amount", "seq", "op"]
MERGE_SETTINGS: dict[str, Any] = {
    "write_mode": "merge",
    "merge_keys": ["id"],
    "order_by": "seq",
    "delete_when": "op = 'D'",
}

Change = tuple[int, str, int, int, str]  # id, name, amount, seq, op ('I', 'U' or 'D')


def cdc_source(landing: str, **kw: Any) -> LandingFilesSource:
    return LandingFilesSource(path=landing, file_format="csv", schema=CDC_DDL, **kw)


def write_changes(folder: str, name: str, changes: list[Change]) -> str:
    """One CSV file of ``changes`` in ``folder``."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, "w") as fh:
        fh.write(",".join(CDC_COLUMNS) + "\n")
        for c in changes:
            fh.write(",".join(str(v) for v in c) + "\n")
    return path


def newest(changes: list[Change]) -> dict[int, Change]:
    """The source's newest change per key (greatest seq; a tie goes to the greatest row,
    as the merge breaks it by content: the tests avoid ties unless they test them)."""
    out: dict[int, Change] = {}
    for c in changes:
        if c[0] not in out or c[3] > out[c[0]][3]:
            out[c[0]] = c
    return out


def expected_rows(changes: list[Change], *, tombstones: bool = True) -> dict[int, Change]:
    """What the merge table must hold: the newest change per key; deletes as tombstones, or
    gone."""
    return {k: c for k, c in newest(changes).items() if tombstones or c[4] != "D"}


@dataclass
class MergeCheck:
    expected: int
    missing: list[int]
    unexpected: list[int]
    duplicated: list[int]
    wrong: list[int]

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.duplicated or self.wrong)


def table_rows(table: str, storage_options: dict[str, str] | None = None) -> list[dict[str, Any]]:
    dt = DeltaTable(table, storage_options=storage_options)
    return pa.table(dt.to_pyarrow_dataset().to_table()).to_pylist()


def check_merge(
    table: str,
    changes: list[Change],
    *,
    tombstones: bool = True,
    storage_options: dict[str, str] | None = None,
) -> MergeCheck:
    """Compare the table with the source's newest row per key, row by row."""
    want = expected_rows(changes, tombstones=tombstones)
    seen: dict[int, list[dict[str, Any]]] = {}
    for r in table_rows(table, storage_options):
        seen.setdefault(r["id"], []).append(r)
    duplicated = sorted(k for k, rs in seen.items() if len(rs) > 1)
    missing = sorted(k for k in want if k not in seen)
    unexpected = sorted(k for k in seen if k not in want)
    wrong = sorted(
        k
        for k, rs in seen.items()
        if k in want
        and len(rs) == 1
        and (rs[0]["name"], rs[0]["amount"], rs[0]["seq"], rs[0]["op"]) != want[k][1:]
    )
    return MergeCheck(len(want), missing, unexpected, duplicated, wrong)
