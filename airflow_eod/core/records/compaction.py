"""Compaction of the plan log: settled batches' entries move into segments.

What is compacted: the plans (every generation), the claims (offset batches: a DAG run's
claim on its sequence number), the file claims (interval batches: which batch owns a landing
file) and the commit records of **settled** batches: a commit record the table bears out
(:func:`~airflow_eod.core.records.store.newest_record`, which judges it by the Delta log), the
batch's marker in the table at that generation (or expired: then the record is the table's
only memory of the batch, and it is kept, in a segment), and no generation planned beyond the
recorded one (no restatement or re-freeze in flight). Of those, the newest ``window`` batches
(by the table version that landed them) stay as they are, so an ask, a commit or a plan of a
recent batch costs what it did. Never compacted: uncommitted plans, the loaded index of
offset pipelines (one entry per 100 batches), restatement chains and interval spans.

How: an entry's exact stored bytes go into its bucket's next segment generation
(:mod:`airflow_eod.core.planlog.segments`; here, one room above the plan log, because
settling a batch needs its commit record), written with put-if-absent and read back; only
then are the entries deleted, and then the older generation. A crash between leaves both
copies (the same bytes: every reader gets the same answer from either) and the next
compaction finishes the deletes. Two compactors racing write the same next generation: one
wins, the loser stops and deletes nothing; a compactor whose generation is not the newest
when it looks again (it was overtaken) deletes nothing either.

When: :func:`maybe_compact` runs after a successful commit whose table version is a multiple
of ``every`` (best effort: a failure is a warning, never a failed load), and
:func:`compact` is there for maintenance code.

The trade-off: at most :data:`~airflow_eod.core.planlog.segments.BUCKETS` segment objects
(plus, briefly, the generation being replaced) stand for every settled batch beyond the
window, so objects stay bounded; bytes do not. A read or a write of an entry, and a listing
of one batch's records, costs one more listing and one segment read (its bytes grow with the
history: about 1.7 KB per compacted entry spread over the buckets); a listing of a whole
folder (the audit, a status report) reads every bucket.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from airflow_eod.core import bounded_json
from airflow_eod.core.batch import BatchKey, fingerprint
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import EodError, UnsafePathError
from airflow_eod.core.faults import fault_point
from airflow_eod.core.planlog.plan import PLAN_FORMAT
from airflow_eod.core.planlog.segments import bucket_of
from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.records.store import newest_record
from airflow_eod.core.table_layout import path_part
from airflow_eod.core.table_ref import TableRef

log = logging.getLogger(__name__)

DEFAULT_WINDOW = 100
DEFAULT_EVERY = 50


@dataclass
class CompactionReport:
    """What one compaction did.

    :param settled: how many batches beyond the window were settled.
    :param compacted: entries newly written into segments.
    :param deleted: entries deleted (held by a segment).
    :param segments: segment generations written.
    :param stopped: why it stopped early (another compactor won), or ``None``.
    """

    settled: int = 0
    compacted: int = 0
    deleted: int = 0
    segments: int = 0
    stopped: str | None = None


def _settled(plan_log: PlanLog, window: int) -> dict[str, tuple[int, list[str]]]:
    """batch key -> (committed generation, stored record names) of the settled batches
    beyond the newest ``window``."""
    table = open_table(plan_log.ref)
    if table is None:
        return {}
    rows: list[tuple[int, str, int, list[str]]] = []
    for key in plan_log.storage.list(f"{plan_log.segments.root}/batches"):
        try:
            path_part(key)
            # A local folder stays when its records are compacted: nothing stored, nothing to do.
            if not (names := plan_log.storage.list(f"{plan_log.segments.root}/batches/{key}")):
                continue
            batch = BatchKey(plan_log.pipeline_id, key)
            record = newest_record(plan_log, table, batch)
            if record is None or plan_log.newest_generation(key) > record.generation:
                continue  # not committed, or a restatement in flight
        except (EodError, UnsafePathError) as exc:
            log.debug("compaction passes over batch %s: %s", key, exc)
            continue
        marker = table.transaction_version(batch.app_id)
        if marker is None or marker == record.generation:
            rows.append((record.table_version, key, record.generation, names))
    rows.sort()
    return {key: (gen, names) for _, key, gen, names in rows[: max(0, len(rows) - max(1, window))]}


def _verified(data: bytes) -> dict[str, Any] | None:
    """The body of a stored entry that verifies (its checksum), or ``None``: an entry that
    does not read stays where it is, for the audit to report."""
    try:
        payload: dict[str, Any] = bounded_json.loads(data)
        checksum = payload.pop("checksum")
    except (ValueError, KeyError, AttributeError, TypeError):
        return None
    if fingerprint(payload) != checksum or payload.get("format") != PLAN_FORMAT:
        return None
    return payload


def _entries(plan_log: PlanLog, settled: dict[str, tuple[int, list[str]]]) -> dict[str, str]:
    """Key below the plan log -> stored text of every entry of the ``settled`` batches."""
    store, root = plan_log.storage, plan_log.segments.root
    wanted: list[str] = []
    seqs: set[int] = set()
    for key, (gen, names) in settled.items():
        wanted += [f"batches/{key}/{n}" for n in names]
        offset = key.startswith("o-") and key.split("-")[1].isdigit()
        if offset:
            seqs.add(int(key.split("-")[1]))
        for g in range(gen + 1):
            suffix = f".g{g}.json" if g else ".json"
            wanted.append(
                f"offsets/{int(key.split('-')[1]):08d}{suffix}" if offset else f"intervals/{key}{suffix}"
            )
    out: dict[str, str] = {}
    for rel in wanted:
        try:
            data = store.get(f"{root}/{rel}", limit=bounded_json.MAX_PLAN_LOG_ENTRY)
        except (FileNotFoundError, bounded_json.JsonBoundError):
            continue  # compacted already, or not a plain entry
        if _verified(data) is not None:
            out[rel] = data.decode()
    # Claims name their batch inside: each stored one is read (those beyond the window go).
    for folder in ("claims", "files"):
        for name in store.list(f"{root}/{folder}"):
            rel = f"{folder}/{name}"
            try:
                data = store.get(f"{root}/{rel}", limit=bounded_json.MAX_PLAN_LOG_ENTRY)
            except (FileNotFoundError, bounded_json.JsonBoundError):
                continue
            body = _verified(data)
            if body is None:
                continue
            if (folder == "claims" and body.get("seq") in seqs) or (
                folder == "files" and body.get("batch_key") in settled
            ):
                out[rel] = data.decode()
    return out


def _compact_buckets(
    plan_log: PlanLog, by_bucket: dict[str, dict[str, str]], report: CompactionReport
) -> bool:
    """Move ``by_bucket``'s entries into their buckets' next generations; ``False`` when
    another compactor won (this one stops, and deletes nothing more)."""
    segs = plan_log.segments
    for bucket, group in sorted(by_bucket.items()):
        gen, held = segs.newest(bucket)
        new = {rel: text for rel, text in group.items() if rel not in held}
        if new:
            if not segs.write(bucket, gen + 1, {**held, **new}):
                report.stopped = f"another compactor wrote generation {gen + 1} of bucket {bucket} first"
                return False
            if segs.generations(bucket)[-1] != gen + 1:
                report.stopped = f"generation {gen + 1} of bucket {bucket} was overtaken"
                return False
            gen, report.compacted, report.segments = gen + 1, report.compacted + len(new), report.segments + 1
            fault_point("compaction_after_segment")
        for folder in sorted({rel.split("/")[0] for rel in group}):
            segs.mark(folder)  # before any of its entries goes: boundary_kinds reads the mark
        for rel in group:
            # The segment holds it (a zombie's other bytes included: the segment's wins).
            report.deleted += plan_log.storage.delete(f"{segs.root}/{rel}")
        fault_point("compaction_after_deletes")
        for older in segs.generations(bucket):
            if older < gen:
                segs.drop(bucket, older)
    return True


def compact(ref: TableRef, pipeline_id: str, *, window: int = DEFAULT_WINDOW) -> CompactionReport:
    """Compact the settled entries of ``pipeline_id``'s plan log beyond the newest ``window``
    batches (see the module's docstring); safe to run at any time, by any number of
    processes at once.

    :param ref: the table.
    :param pipeline_id: the pipeline.
    :param window: how many of the newest settled batches keep their entries as they are.
    """
    plan_log = PlanLog(ref, pipeline_id)
    segs, report = plan_log.segments, CompactionReport()
    settled = _settled(plan_log, window)
    report.settled = len(settled)
    entries = _entries(plan_log, settled)
    # The commit records go last: a batch is found again by its stored records, so a crash
    # before they are compacted leaves the rest of the batch to the next run.
    for records in (False, True):
        by_bucket: dict[str, dict[str, str]] = {}
        for rel, text in entries.items():
            if rel.startswith("batches/") == records:
                by_bucket.setdefault(bucket_of(rel, segs.buckets), {})[rel] = text
        if not _compact_buckets(plan_log, by_bucket, report):
            return report
    log.info("plan log %s: compaction %s", pipeline_id, json.dumps(report.__dict__))
    return report


def maybe_compact(
    ref: TableRef, pipeline_id: str, version: int, *, every: int | None = None, window: int | None = None
) -> CompactionReport | None:
    """Compact after the commit of table version ``version`` when it is a multiple of
    ``every`` (default :data:`DEFAULT_EVERY`); best effort: a failure is logged as a
    warning, and the load stands."""
    every = DEFAULT_EVERY if every is None else every
    if version <= 0 or every <= 0 or version % every:
        return None
    try:
        return compact(ref, pipeline_id, window=DEFAULT_WINDOW if window is None else window)
    except Exception as exc:
        log.warning(
            "plan log %s: compaction after version %d failed (it runs again later): %s",
            pipeline_id,
            version,
            exc,
        )
        return None
