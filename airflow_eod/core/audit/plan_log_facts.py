"""Every commit record and plan in a table's plan log, and the entries that do not read.

The plan log is listed and read only through the table's storage
(:meth:`~airflow_eod.core.table_ref.TableRef.storage`, :meth:`PlanLog.names`): a folder is a
prefix with entries under it, and a link on the way that leads out of the table is refused
(and reported) before anything under it is read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import EodError, UnsafePathError
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.records.record_files import RecordStore
from airflow_eod.core.storage import Storage
from airflow_eod.core.table_layout import path_part
from airflow_eod.core.table_ref import TableRef

_PLAN = re.compile(r"^(.+?)(?:\.g(\d+))?\.json$")


@dataclass
class PlanLogFacts:
    """Every commit record and plan in a table's plan log.

    :param records: batch -> generation -> (table-relative path, record body) of the records
        named with the table's id (records of another id are of a table once at this path).
    :param plans: batch -> the plan of its newest planned generation.
    :param unreadable: (table-relative path, error) of entries that do not parse or fail
        their checksum.
    """

    records: dict[BatchKey, dict[int, tuple[str, dict[str, Any]]]] = field(default_factory=dict)
    plans: dict[BatchKey, Plan] = field(default_factory=dict)
    unreadable: list[tuple[str, str]] = field(default_factory=list)


def _records(plan_log: PlanLog, ref: TableRef, table_id: str, out: PlanLogFacts) -> None:
    table_path = ref.path
    try:
        path_part(table_id, "table id (metaData.id)")
    except UnsafePathError as exc:
        # No record was ever written under such a name: say so once, read nothing.
        out.unreadable.append((os.path.relpath(plan_log.root, table_path), str(exc)))
        return
    suffix = f".{table_id}.json"
    records = RecordStore(plan_log=plan_log)
    try:
        keys = records.recorded_batches()
    except UnsafePathError as exc:  # the plan log's batches/ is a link leading out
        out.unreadable.append((os.path.relpath(plan_log.root, table_path), str(exc)))
        return
    for key in keys:
        try:
            records.record_dir(key)  # refused when a link on the way leads out of the table
        except UnsafePathError as exc:
            out.unreadable.append((os.path.relpath(plan_log.root, table_path), str(exc)))
            continue
        names = plan_log.names("batches", key)
        gens = [n[1 : -len(suffix)] for n in names if n.startswith("g") and n.endswith(suffix)]
        for gen in sorted(int(g) for g in gens if g.isdigit()):
            where = os.path.relpath(records.commit_record_path(key, gen, table_id), table_path)
            try:
                batch = BatchKey(plan_log.pipeline_id, key)
                body = records.commit_record(key, gen, table_id) or {}
            except EodError as exc:
                out.unreadable.append((where, f"{exc}; every ask of this batch fails until it is fixed"))
                continue
            if (body.get("batch_key"), body.get("generation"), body.get("table_id")) != (key, gen, table_id):
                out.unreadable.append((where, f"commit record {where} describes another batch or table"))
            elif (
                isinstance(body.get("files"), list)
                and isinstance(body.get("table_version"), int)
                and isinstance(body.get("manifest"), dict)
            ):
                out.records.setdefault(batch, {})[gen] = (where, body)
            else:
                out.unreadable.append((where, f"commit record {where} has an unexpected shape"))


def _plans(plan_log: PlanLog, ref: TableRef, out: PlanLogFacts) -> None:
    table_path = ref.path
    for sub in ("offsets", "intervals"):
        folder = os.path.join(plan_log.root, sub)
        try:
            names = plan_log.names(sub)
        except UnsafePathError as exc:  # a link leading out of the table: nothing under it is read
            out.unreadable.append((os.path.relpath(folder, table_path), str(exc)))
            continue
        for name in names:
            m = _PLAN.match(name)
            if m is None or (sub == "offsets" and not m.group(1).isdigit()):
                continue
            try:
                # An offset plan's file is named by its sequence number, its key is inside.
                key = plan_log.get_offset_plan(int(m.group(1))).batch_key if sub == "offsets" else m.group(1)
                plan = plan_log.get_plan(key, int(m.group(2) or 0))
                batch = plan.key if plan else None
            except EodError as exc:
                out.unreadable.append((os.path.relpath(os.path.join(folder, name), table_path), str(exc)))
                continue
            if plan is None or batch is None:
                continue
            if batch not in out.plans or plan.generation > out.plans[batch].generation:
                out.plans[batch] = plan


def is_folder(store: Storage, key: str) -> bool:
    """Whether ``key`` is a folder of the plan log: a prefix with entries under it, or a link
    there that leads out of the table (the plan log's own readers refuse it, and the audit
    reports what they refused). A file, a FIFO or an empty folder is none.

    :param store: the table's storage.
    :param key: the folder's key.
    """
    try:
        return bool(store.list(key))
    except UnsafePathError:
        return True


def read_plan_log_facts(ref: TableRef, table_id: str) -> PlanLogFacts:
    """Every record (of table ``table_id``) and plan of every pipeline of the table.

    :param ref: the table.
    :param table_id: the table's ``metaData.id``.
    """
    out, store = PlanLogFacts(), ref.storage()
    try:
        pipelines = store.list(ref.plan_logs_key)
    except UnsafePathError as exc:  # _eod or its pipelines/ is a link leading out: nothing there is read
        out.unreadable.append((ref.plan_logs_key, str(exc)))
        return out
    for pipeline in pipelines:
        if not is_folder(store, f"{ref.plan_logs_key}/{pipeline}"):
            continue  # a file someone left there: no pipeline
        try:
            plan_log = PlanLog(ref, pipeline)
        except EodError:
            continue  # not a directory airflow-eod made
        _records(plan_log, ref, table_id, out)
        _plans(plan_log, ref, out)
    return out
