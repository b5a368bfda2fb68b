"""What one audit has read and found so far: the facts, each batch as the audit sees it,
the findings, and the roles of the live files (for messages).

The checks (:mod:`~airflow_eod.core.audit.committed_generation`,
:mod:`~airflow_eod.core.audit.live_file_checks`, :mod:`~airflow_eod.core.audit.batch_checks`,
:mod:`~airflow_eod.core.audit.row_total` and the others) read an :class:`AuditState` and add
their findings to it; :func:`airflow_eod.core.audit.verify.audit_table` runs them in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from deltalake import DeltaTable

from airflow_eod.core.audit.findings import Finding, finding
from airflow_eod.core.audit.live_files import LiveFile
from airflow_eod.core.audit.log_facts import LogFacts
from airflow_eod.core.audit.plan_log_facts import PlanLogFacts
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.table_ref import TableRef


@dataclass
class AuditedBatch:
    """One batch as the audit reads it: its records, its marker, and (once resolved) the
    generation the table holds with that generation's files and rows."""

    key: BatchKey
    records: dict[int, dict[str, Any]] = field(default_factory=dict)  # generation -> record body
    where: dict[int, str] = field(default_factory=dict)  # generation -> the record's path
    marker: int | None = None
    marker_ms: int | None = None
    generation: int | None = None  # committed, as the audit reads it
    version: int | None = None
    rows: int | None = None
    files: list[str] = field(default_factory=list)
    old_files: set[str] = field(default_factory=set)  # listed by records of other generations


class AuditState:
    """The facts of one table at one version, and what the audit found in them so far.

    :param ref: the table.
    :param now: the time ages are measured at (aware).
    :param stuck_after: a plan not committed this long after it was planned is reported.
    :param expiry_warning: the fraction of the retention window past which markers and
        uncommitted plans are reported.
    :param version: the table version audited.
    :param window: the table's transaction-retention window, if it sets one.
    :param live: the live files of the snapshot at ``version``.
    :param log: what the log holds up to ``version``.
    :param plan_log: the commit records and plans of the plan log.
    """

    def __init__(
        self,
        *,
        ref: TableRef,
        now: datetime,
        stuck_after: timedelta,
        expiry_warning: float,
        version: int,
        window: timedelta | None,
        live: dict[str, LiveFile],
        log: LogFacts,
        plan_log: PlanLogFacts,
    ) -> None:
        self.ref, self.path = ref, ref.path
        self.now, self.stuck_after, self.expiry_warning = now, stuck_after, expiry_warning
        self.findings: list[Finding] = []
        self.version, self.window = version, window
        self.live = live
        self.rows = {p: f.rows for p, f in self.live.items()}
        self.log = log
        self.plans = plan_log.plans
        for where, error in plan_log.unreadable:
            self.add("corrupt_plan_log_entry", None, [where], error=error)
        self.batches: dict[BatchKey, AuditedBatch] = {}
        for batch, gens in plan_log.records.items():
            for gen, (where, body) in gens.items():
                self._take_record(batch, gen, where, body)
        for app_id, (gen, ms) in self.log.markers.items():
            if (key := BatchKey.from_app_id(app_id)) is not None:
                self.batch(key).marker, self.batch(key).marker_ms = gen, ms
        self.role: dict[str, str] = {}  # live file -> whose it is, for messages
        # Rows of batch files removed by commits no longer in the log (None: not known).
        self.unseen_rows: list[int | None] = []
        # Merge batches -> their committed generation's ``extra["merge"]`` (``{}`` when only
        # another generation's manifest says merge), the versions of merge commits, and
        # the files of merge batches' older generations: see merge_batches.
        self.merge: dict[BatchKey, dict[str, Any]] = {}
        self.merge_commits: set[int] = set()
        self.merge_kept: set[str] = set()  # their older generations' files (still merged rows)

    def add(self, kind: str, batch: BatchKey | None, paths: list[str] | None = None, **say: Any) -> None:
        """Report a finding of ``kind`` (see :func:`~airflow_eod.core.audit.findings.finding`)."""
        self.findings.append(finding(kind, batch, paths, **say))

    def batch(self, key: BatchKey) -> AuditedBatch:
        return self.batches.setdefault(key, AuditedBatch(key))

    def committed(self) -> list[AuditedBatch]:
        found = [b for b in self.batches.values() if b.generation is not None]
        return sorted(found, key=lambda b: b.key.label)

    def _take_record(self, batch: BatchKey, gen: int, where: str, body: dict[str, Any]) -> None:
        if body["table_version"] > self.version:
            # A load that committed after the snapshot was read (verify runs beside loads):
            # not part of what is audited. A record past the table's newest version is corrupt.
            newest = DeltaTable(self.path, storage_options=self.ref.storage_options).version()
            if body["table_version"] <= newest:
                return
            why = f"says generation {gen} landed at version {body['table_version']}, past the table's"
            self.add("corrupt_record", batch, [where], record=where, why=f"{why} {self.version}")
        else:
            self.batch(batch).records[gen], self.batch(batch).where[gen] = body, where
