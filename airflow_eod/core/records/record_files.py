"""Where commit records are kept: ``batches/<batch key>/g<N>.<table id>.json`` in a
pipeline's plan log, one write-once, checksummed entry per committed generation (what a
record says, and when it is believed, is :mod:`airflow_eod.core.records.store`'s job)."""

from __future__ import annotations

from typing import Any

from airflow_eod.core.errors import UnsafePathError
from airflow_eod.core.planlog.store import PlanLog, record_name, recorded_generations
from airflow_eod.core.table_layout import path_part


def _is_name(name: str) -> bool:
    try:
        path_part(name)
    except UnsafePathError:
        return False
    return True


class RecordStore:
    """The commit records of one pipeline on one table, in its plan log.

    :param plan_log: the plan log the records are kept in.
    """

    def __init__(self, *, plan_log: PlanLog) -> None:
        self.plan_log = plan_log

    def record_dir(self, batch_key: str) -> str:
        return self.plan_log.entry_path("batches", batch_key)

    def put_commit_record(self, batch_key: str, generation: int, table_id: str, body: dict[str, Any]) -> None:
        """Store the commit record of ``batch_key`` at ``generation`` in table ``table_id``
        (first writer wins: every writer describes the same commit)."""
        self.plan_log.write_entry(self.commit_record_path(batch_key, generation, table_id), body)

    def newest_commit_record(self, batch_key: str, table_id: str) -> dict[str, Any] | None:
        """The commit record of the newest generation recorded for ``batch_key`` in table
        ``table_id``, or ``None``."""
        gens = recorded_generations(self.plan_log.names("batches", batch_key), table_id)
        return self.commit_record(batch_key, max(gens), table_id) if gens else None

    def commit_record_path(self, batch_key: str, generation: int, table_id: str) -> str:
        return self.plan_log.entry_path("batches", batch_key, record_name(generation, table_id))

    def commit_record(self, batch_key: str, generation: int, table_id: str) -> dict[str, Any] | None:
        """The commit record of ``batch_key`` at ``generation`` in table ``table_id``, or ``None``."""
        return self.plan_log.read_entry(self.commit_record_path(batch_key, generation, table_id))

    def recorded_batches(self) -> list[str]:
        """Every batch key with a commit record (for status reports, not for the ask). A name
        airflow-eod never writes there (another writer's) is no batch key, and is passed over."""
        return [n for n in self.plan_log.names("batches") if _is_name(n)]
