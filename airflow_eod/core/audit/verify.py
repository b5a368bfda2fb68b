"""The audit behind ``airflow-eod verify``: does a table keep the exactly-once guarantee?

It trusts no writer, airflow-eod included: it neither asks (:mod:`airflow_eod.core.ask`) nor
judges commit records the way the load path does. It reads the facts itself
(:mod:`airflow_eod.core.audit.facts`: the live files and their statistics, the ``txn``
markers and the commits still in ``_delta_log/``, the commit records and plans in the plan
log) and reports where they break the guarantee, as :class:`Finding` objects of the fixed
kinds in :data:`SAYS` (errors: the guarantee is broken, or will be; warnings: worth a look).
docs/reference.md says what each kind means, docs/runbook.md what to do about it.

:func:`audit_table` reads the facts and runs the checks in order, each in a module of its
own: which generation each batch holds
(:mod:`~airflow_eod.core.audit.committed_generation`), the live files
(:mod:`~airflow_eod.core.audit.live_file_checks`), each batch's files and rows
(:mod:`~airflow_eod.core.audit.batch_checks`), the table-wide row count
(:mod:`~airflow_eod.core.audit.row_total`), the keys of merge batches, whose files and rows
those checks pass over (:mod:`~airflow_eod.core.audit.merge_batches`,
:mod:`~airflow_eod.core.audit.merge_checks`), plans over time
(:mod:`~airflow_eod.core.audit.plan_checks`) and the quarantine table
(:mod:`~airflow_eod.core.audit.quarantine_check`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from deltalake import DeltaTable

from airflow_eod.core.audit.batch_checks import check_batches
from airflow_eod.core.audit.committed_generation import resolve
from airflow_eod.core.audit.findings import ERROR, SAYS, WARNING, AuditReport, BatchSummary, Finding
from airflow_eod.core.audit.findings import SECTIONS as _SECTION
from airflow_eod.core.audit.live_file_checks import check_duplicates, check_files
from airflow_eod.core.audit.live_files import read_live_files
from airflow_eod.core.audit.log_facts import read_log_facts
from airflow_eod.core.audit.merge_batches import mark_merge_batches
from airflow_eod.core.audit.merge_checks import check_merge_keys
from airflow_eod.core.audit.plan_checks import check_overlapping_intervals, check_plans
from airflow_eod.core.audit.plan_log_facts import read_plan_log_facts
from airflow_eod.core.audit.quarantine_check import check_quarantine
from airflow_eod.core.audit.row_total import check_total
from airflow_eod.core.audit.state import AuditState
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.durations import parse_interval
from airflow_eod.core.errors import UnsupportedTableError
from airflow_eod.core.planlog.retention import RETENTION_KEY
from airflow_eod.core.table_ref import TableLike, TableRef

# The report's types and the kinds of finding live in findings; they are named here too,
# where callers and tests have always found them.
__all__ = [
    "ERROR",
    "SAYS",
    "WARNING",
    "_SECTION",
    "AuditReport",
    "BatchSummary",
    "Finding",
    "audit_table",
    "read_live_files",
]


def audit_table(
    table: TableLike,
    *,
    stuck_after: timedelta = timedelta(days=1),
    expiry_warning: float = 0.8,
    now: datetime | None = None,
) -> AuditReport:
    """Audit the table at ``table`` against the guarantee, trusting none of its writers.

    :param table: the Delta table (a local path, a ``file://`` URI, or a :class:`TableRef`).
    :param stuck_after: a plan not committed this long after it was planned is reported.
    :param expiry_warning: the fraction of ``delta.setTransactionRetentionDuration`` past
        which markers and uncommitted plans are reported.
    :param now: the time ages are measured at (default: now; a naive value is taken as UTC).
    :raises UnsupportedTableError: when there is no Delta table at ``table``.
    """
    ref = TableRef.parse(table)
    path = ref.path
    if open_table(ref) is None:
        raise UnsupportedTableError(f"there is no Delta table at {path} (no _delta_log with a commit)")
    now = now or datetime.now(UTC)
    now = now if now.tzinfo else now.replace(tzinfo=UTC)
    audit = _read(ref, now, stuck_after, expiry_warning)
    resolve(audit)
    mark_merge_batches(audit)
    check_files(audit)
    batches = check_batches(audit)
    check_duplicates(audit)
    check_total(audit)
    check_merge_keys(audit)
    check_plans(audit)
    check_overlapping_intervals(audit)
    check_quarantine(audit)
    return AuditReport(path, audit.version, now, batches, audit.findings)


def _read(ref: TableRef, now: datetime, stuck_after: timedelta, expiry_warning: float) -> AuditState:
    """The facts of the table ``ref``, all read at its current version: the snapshot's
    live files first, then the log and the plan log (a record of a load that commits while
    they are read is told apart by its table version, see ``AuditState``)."""
    dt = DeltaTable(ref.path, storage_options=ref.storage_options)
    version, table_id = dt.version(), str(dt.metadata().id)
    retention = (dt.metadata().configuration or {}).get(RETENTION_KEY)
    live = read_live_files(ref, dt)  # looked up here: tests wrap it to commit mid-audit
    return AuditState(
        ref=ref,
        now=now,
        stuck_after=stuck_after,
        expiry_warning=expiry_warning,
        version=version,
        window=parse_interval(retention) if retention else None,
        live=live,
        log=read_log_facts(ref, version),
        plan_log=read_plan_log_facts(ref, table_id),
    )
