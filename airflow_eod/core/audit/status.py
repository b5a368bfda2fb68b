"""A per-pipeline summary of what a table holds, for the ``airflow-eod status`` command.

The plan log is listed only through the table's storage (:meth:`PlanLog.names`): a
pipeline's folder, or a batch's, is a prefix with entries under it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from airflow_eod.core.ask import BatchStatus, ask_table
from airflow_eod.core.audit.plan_log_facts import is_folder
from airflow_eod.core.batch import BatchKey, validate_pipeline_id
from airflow_eod.core.delta.log import TableLog
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.records.record_files import RecordStore
from airflow_eod.core.table_ref import TableRef


@dataclass
class BatchSummary:
    """One batch as the table sees it."""

    batch_key: str
    generation: int | None
    table_version: int | None
    rows: int | None


@dataclass
class Gap:
    """Time no committed interval batch of a pipeline covers, between two that are.

    :param start: the end of the committed interval before it (ISO 8601, UTC).
    :param end: the start of the committed interval after it.
    :param after: the key of the batch before it.
    :param before: the key of the batch after it.
    :param pending: keys of batches planned inside it but not committed.
    """

    start: str
    end: str
    after: str
    before: str
    pending: list[str] = field(default_factory=list)


@dataclass
class PipelineSummary:
    """Every batch of one pipeline that the plan log or the log's manifests know of."""

    pipeline_id: str
    batches: list[BatchSummary] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)

    @property
    def committed(self) -> list[BatchSummary]:
        return [b for b in self.batches if b.generation is not None]

    @property
    def pending(self) -> list[BatchSummary]:
        return [b for b in self.batches if b.generation is None]


def _known_keys(ref: TableRef) -> dict[str, set[str]]:
    """Per pipeline, every batch key the plan log planned or recorded as committed."""
    store, found = ref.storage(), dict[str, set[str]]()
    for pipeline in store.list(ref.plan_logs_key):
        # A Finder .DS_Store, a directory copied aside ("old backup"): no pipeline of the
        # table, passed over as ask and verify pass over them.
        if not _is_pipeline_id(pipeline) or not is_folder(store, f"{ref.plan_logs_key}/{pipeline}"):
            continue
        log = PlanLog(ref, pipeline)
        newest = log.newest_offset_seq()
        keys = {log.get_offset_plan(s).batch_key for s in range(newest + 1 if newest is not None else 0)}
        keys |= {n[:-5] for n in log.names("intervals") if n.endswith(".json") and ".g" not in n}
        keys |= set(RecordStore(plan_log=log).recorded_batches())
        found[pipeline] = keys
    return found


def _is_pipeline_id(name: str) -> bool:
    try:
        validate_pipeline_id(name)
    except ConfigurationError:
        return False
    return True


_OFFSET_KEY = re.compile(r"^o-\d+-")
_INTERVAL_KEY = re.compile(r"^i-(\d{8}T\d{6}(?:\d{6})?Z)-(\d{8}T\d{6}(?:\d{6})?Z)$")


def _instant(text: str) -> datetime:
    fmt = "%Y%m%dT%H%M%S%fZ" if len(text) > 16 else "%Y%m%dT%H%M%SZ"
    return datetime.strptime(text, fmt).replace(tzinfo=UTC)


def interval_of(key: str) -> tuple[datetime, datetime] | None:
    """``[start, end)`` of an interval batch key (``i-<start>-<end>``); ``None`` for others."""
    m = _INTERVAL_KEY.match(key)
    return (_instant(m.group(1)), _instant(m.group(2))) if m else None


def find_gaps(batches: list[BatchSummary]) -> list[Gap]:
    """The gaps between the committed interval batches of one pipeline: ``[a, b)`` then
    ``[c, d)`` with ``b < c`` (sorted by start; an interval that reaches past the next one's
    start closes no gap). One pass over keys the summary holds: no further reads."""
    spans = sorted(
        (span, b.batch_key)
        for b in batches
        if b.generation is not None and (span := interval_of(b.batch_key)) is not None
    )
    planned = [
        (span, b.batch_key)
        for b in batches
        if b.generation is None and (span := interval_of(b.batch_key)) is not None
    ]
    gaps: list[Gap] = []
    if not spans:
        return gaps
    (_, reach), reach_key = spans[0]
    for (start, end), key in spans[1:]:
        if reach < start:
            pending = sorted(k for (s, e), k in planned if s < start and e > reach)
            gaps.append(Gap(reach.isoformat(), start.isoformat(), reach_key, key, pending))
        if end > reach:
            reach, reach_key = end, key
    return gaps


def batch_known(table: TableLog | None, batch: BatchKey, status: BatchStatus) -> tuple[bool, bool]:
    """``(pipeline known, batch known)``: whether the plan log (or the table) knows of the
    pipeline at all, and of the batch (planned, recorded or committed at any generation).

    Bounded: a look at the pipeline's plan-log directory, its first plan of the batch and
    its record directory; the ask (``status``) already read the marker.
    """
    if status.committed_generation is not None:
        return True, True
    ref = table.ref if table is not None else None
    if ref is None:
        return False, False
    log, folder = PlanLog(ref, batch.pipeline_id), ref.plan_log_key(batch.pipeline_id)
    if not is_folder(log.storage, folder):
        return False, False
    if is_folder(log.storage, f"{folder}/batches/{batch.key}"):
        return True, True
    if batch.key.startswith("o-") and not _OFFSET_KEY.match(batch.key):
        return True, False  # an offset key without its sequence number: never planned
    return True, log.get_plan(batch.key) is not None


def table_status(ref: TableRef) -> list[PipelineSummary]:
    """Summaries of every pipeline that has loaded, or planned, into ``ref``.

    Batches are found in the plan log and the commit records, and also in the commit infos
    still in the log (a table loaded by another copy of the plan log, or by Delta Spark).
    """
    table = open_table(ref)
    keys = _known_keys(ref)
    if table is not None:
        for info in table.snapshot().history():  # a report, not a hot path
            m = Manifest.from_user_metadata(info.get("userMetadata"))
            if m is not None:
                keys.setdefault(m.pipeline_id, set()).add(m.batch_key)
    out: list[PipelineSummary] = []
    for pipeline in sorted(keys):
        summary = PipelineSummary(pipeline)
        for key in sorted(keys[pipeline]):
            status = ask_table(table, BatchKey(pipeline, key))
            summary.batches.append(
                BatchSummary(
                    key,
                    status.committed_generation,
                    status.table_version,
                    status.manifest.rows if status.manifest else None,
                )
            )
        summary.gaps = find_gaps(summary.batches)
        out.append(summary)
    return out
