"""Settling a committed batch: what is due once the table holds it, and a crash may have
cut off. The load job does it after its commit, the task after a submitted driver ends and
whenever it finds the batch already committed; none of it starts Spark."""

from __future__ import annotations

from airflow_eod.core.ask import BatchStatus
from airflow_eod.core.cleanup import remove_uncommitted_attempts
from airflow_eod.core.quarantine_outbox import deliver_outbox
from airflow_eod.core.spec_files import remove_decided_specs
from airflow_eod.core.table_ref import TableRef


def settle_committed(ref: TableRef, status: BatchStatus, quarantine: TableRef | None = None) -> None:
    """Deliver the batch's quarantine outbox, and remove other attempts' files: their data
    directories, and the specs of submitted attempts a SIGKILLed task left behind.

    :param ref: the main table.
    :param status: the table's answer, for a committed batch.
    :param quarantine: the task's quarantine table, the only one an outbox is delivered to.
    """
    deliver_outbox(ref, status, quarantine)
    remove_uncommitted_attempts(ref, status)
    remove_decided_specs(ref, status)
