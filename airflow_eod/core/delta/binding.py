"""The binding of a plan log to its table: ``_eod/table.json`` holds the id of the Delta
table whose batches the plan log describes (and the id of the attempt that wrote it),
written once by the first commit."""

from __future__ import annotations

import json
import os

from airflow_eod.core import bounded_json
from airflow_eod.core.attempt import current_attempt_id
from airflow_eod.core.delta.log import read_log
from airflow_eod.core.errors import PlanLogError, UnsupportedTableError
from airflow_eod.core.storage import put_settled
from airflow_eod.core.table_layout import META_DIR
from airflow_eod.core.table_ref import TableRef

_TABLE_ID_FILE = "table.json"
_KEY = f"{META_DIR}/{_TABLE_ID_FILE}"


def bound_table_id(ref: TableRef) -> str | None:
    """The id of the table the plan log beside ``table_path`` is bound to, if any."""
    table_path = ref.path
    path = os.path.join(table_path, META_DIR, _TABLE_ID_FILE)
    store = ref.storage()
    try:
        store.where(_KEY)  # never through a link out of the table, the last name's included
        body = bounded_json.loads(store.get(_KEY, limit=bounded_json.MAX_SMALL_FILE))
    except FileNotFoundError:
        return None
    except (ValueError, IsADirectoryError) as exc:  # not JSON, or out of bounds (bounded_json)
        raise PlanLogError(f"{path} is corrupt ({exc})") from None
    value = body.get("table_id") if isinstance(body, dict) else None
    if value is not None and not isinstance(value, str):
        raise PlanLogError(f"{path} is corrupt (its table_id is not text)")
    if not isinstance(body, dict):
        raise PlanLogError(f"{path} is corrupt (not a JSON object)")
    return value


def check_table_identity(ref: TableRef, table_id: str | None) -> None:
    """Bind the plan log beside a table to that table, and refuse it for any other.

    The plan log remembers which batches an offset pipeline loaded. A table dropped and
    re-created at the same path, with the old ``_eod/`` left behind, would otherwise have
    its older offset batches counted as loaded (lost), and a deleted table would have them
    all. The first commit's table id is written once; a different one is refused.
    """
    table_path = ref.path
    store = ref.storage()
    store.where(_KEY)  # never through a link out of the table
    bound = bound_table_id(ref)
    if bound is None:
        if table_id is not None:
            # The attempt id beside the table id: a write whose outcome was unknown is
            # known for this attempt's by reading it back (readers read only table_id).
            ident = current_attempt_id()
            body = json.dumps({"table_id": table_id, "attempt": ident}).encode()
            put_settled(store, _KEY, body, attempt=ident)
            check_table_identity(ref, table_id)  # a racer may have bound another id
        return
    if bound != table_id:
        if table_id is None and _created_since(ref, bound):
            return  # a racing first load created the table after the caller looked: ask again
        now = "no Delta table" if table_id is None else f"table {table_id}"
        raise UnsupportedTableError(
            f"the plan log in {os.path.join(table_path, META_DIR)} belongs to table {bound}, and "
            f"{table_path} now holds {now} (dropped and re-created?): its batches say nothing about "
            "this table. Move the _eod directory aside to start every pipeline of this table "
            "afresh (see the runbook, 'a table dropped and re-created')"
        )


def _created_since(ref: TableRef, bound: str) -> bool:
    """Whether the table the plan log is bound to is there now. The caller saw no table; a
    racing first load may have created and bound it since (a parallel backfill): that is
    no dropped table, and the caller's next look finds it."""
    table = read_log(ref)
    return table is not None and str(table.metadata().id) == bound
