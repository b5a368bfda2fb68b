"""What a table's log and plan log hold, read without trusting any writer's summary of it.

:mod:`airflow_eod.core.audit.verify` judges these facts; the modules named here only read
them, and read all of them (an audit is not the hot path): the live files with their
statistics as delta-rs reports them (:mod:`~airflow_eod.core.audit.live_files`), every JSON
commit still in ``_delta_log/`` and the markers of the newest checkpoint
(:mod:`~airflow_eod.core.audit.log_facts`), and every commit record and plan in the plan log
(:mod:`~airflow_eod.core.audit.plan_log_facts`). Unlike the ask (:mod:`airflow_eod.core.ask`)
they neither repair nor judge anything. A data file is opened only for the Parquet footer of
a file without statistics and, in :func:`~airflow_eod.core.audit.copies.same_bytes`, for the
bytes of files the audit suspects to be copies; and only through
:func:`~airflow_eod.core.audit.safe_open.open_in_table`, which follows no link and opens
nothing but a regular file under the table's directory (a live file that is a link to
``/dev/zero`` would otherwise be hashed forever).

This module keeps the names the facts were once read from in one place.
"""

from __future__ import annotations

from airflow_eod.core.audit.copies import same_bytes
from airflow_eod.core.audit.live_files import LiveFile, file_rows, read_live_files
from airflow_eod.core.audit.log_facts import LogFacts, read_log_facts
from airflow_eod.core.audit.plan_log_facts import PlanLogFacts, read_plan_log_facts
from airflow_eod.core.audit.safe_open import NotInTable, local_file, open_in_table, probe

__all__ = [
    "LiveFile",
    "LogFacts",
    "NotInTable",
    "PlanLogFacts",
    "file_rows",
    "local_file",
    "open_in_table",
    "probe",
    "read_live_files",
    "read_log_facts",
    "read_plan_log_facts",
    "same_bytes",
]
