"""The audit (``verify``, ``status``) reads the Delta log and the plan log only through the
storage seam (issue 20, item 3): an object-store backend (issue 21) can then serve the audit
as it serves the load, and the local backend's refusals (a link, a FIFO) hold for it too.

No Spark: batches are staged with pyarrow and committed by the real commit engine.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask_table
from airflow_eod.core.audit.status import batch_known, table_status
from airflow_eod.core.audit.verify import audit_table
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.delta import log as delta_log
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.storage import Storage
from airflow_eod.core.storage.local import LocalStorage
from airflow_eod.core.table_ref import TableRef
from tests.support.helpers import land_and_plan, stage_rows

PIPE = "tests.seam"
PLANNED = BatchKey(PIPE, "i-20261125T000000Z-20261126T000000Z")
NOW = datetime(2026, 11, 30, tzinfo=UTC)


def _load(table: str, plan: Plan, rows: list[int]) -> None:
    staged = stage_rows(table, plan, plan.generation, f"{plan.batch_key}/g{plan.generation}", rows)
    ours, _ = commit_batch(TableRef.parse(table), plan.key, plan.generation, *staged)
    assert ours


def _loaded(table: str, tmp_path: Any) -> None:
    """Interval batches before and after a checkpoint, an offset batch, a plan never committed."""
    log = PlanLog(TableRef.parse(table), PIPE)
    for day in (20, 21, 22):
        key = f"i-202611{day}T000000Z-202611{day + 1}T000000Z"
        _load(table, log.put_plan(Plan(PIPE, key, "interval", {"day": day}, [])), [day, day + 100])
        if day == 21:
            DeltaTable(table).create_checkpoint()
    log.put_plan(Plan(PIPE, PLANNED.key, "interval", {"day": 25}, []))
    offsets = land_and_plan(table, str(tmp_path / "landing"), f"{PIPE}.files", 0)
    _load(table, offsets, [500, 501])


_READS = ("get", "get_range", "head", "list")


class _Fence:
    """While on: ``os.listdir``, ``os.path.isdir`` and ``os.open`` refuse every path under a
    ``_delta_log`` or ``_eod`` unless the storage seam's local backend makes the call; and the
    reads made through storages that :meth:`TableRef.storage` handed out are counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()  # (method, first key segment)
        self.refused: list[str] = []
        self._seam = 0
        self._handed: list[Storage] = []
        self._wrap_storage(monkeypatch)
        for name in _READS:
            monkeypatch.setattr(LocalStorage, name, self._counted(name, getattr(LocalStorage, name)))
        for owner, name in ((os, "listdir"), (os.path, "isdir"), (os, "open")):
            monkeypatch.setattr(owner, name, self._fenced(getattr(owner, name)))

    def _wrap_storage(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = TableRef.storage

        def storage(ref: TableRef) -> Storage:
            store = real(ref)
            self._handed.append(store)
            return store

        monkeypatch.setattr(TableRef, "storage", storage)

    def _counted(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(store: LocalStorage, key: str, *args: Any, **kw: Any) -> Any:
            if any(store is handed for handed in self._handed):
                self.calls[(name, key.split("/")[0])] += 1
            self._seam += 1
            try:
                return method(store, key, *args, **kw)
            finally:
                self._seam -= 1

        return call

    def _fenced(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(path: Any = ".", *args: Any, **kw: Any) -> Any:
            parts = os.fspath(path).split(os.sep) if isinstance(path, str | os.PathLike) else []
            if not self._seam and ("_delta_log" in parts or "_eod" in parts):
                self.refused.append(os.fspath(path))
                raise PermissionError(f"{path} read beside the storage seam")
            return real(path, *args, **kw)

        return call


def _known(ref: TableRef) -> list[tuple[bool, bool]]:
    """What ``airflow-eod ask`` says of a planned batch, another pipeline's and an unknown one."""
    table = open_table(ref)
    keys = (PLANNED, BatchKey(f"{PIPE}.files", PLANNED.key), BatchKey("tests.none", PLANNED.key))
    return [batch_known(table, key, ask_table(table, key)) for key in keys]


def test_the_audit_reads_the_log_and_the_plan_log_only_through_the_storage_seam(
    table: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _loaded(table, tmp_path)
    ref = TableRef.parse(table)
    report, status, known = audit_table(ref, now=NOW).to_dict(), table_status(ref), _known(ref)
    assert report["ok"] and len(report["batches"]) == 4, report
    assert known == [(True, True), (True, False), (False, False)]
    delta_log.clear_cache()

    fence = _Fence(monkeypatch)
    with pytest.raises(PermissionError):  # the fence holds outside the seam
        os.listdir(os.path.join(table, "_delta_log"))
    fence.refused.clear()
    assert audit_table(ref, now=NOW).to_dict() == report
    assert table_status(ref) == status
    assert _known(ref) == known
    assert fence.refused == []
    # The audit's own reads went through the storages the table reference hands out: the
    # log and the plan log listed, commits and the checkpoint read in ranges, records read.
    for call in (
        ("list", "_delta_log"),
        ("get_range", "_delta_log"),
        ("head", "_delta_log"),
        ("list", "_eod"),
        ("get", "_eod"),
    ):
        assert fence.calls[call] > 0, (call, fence.calls)
