"""Which generation each batch holds, as the table says it, and that generation's files.

The table is the truth: a batch's ``txn`` marker names its committed generation, and its
commit records are checked against the commits that carried them. A marker another writer
set (with the batch's app id, in a commit that carries no manifest of the batch) is reported,
and the batch's own newest commit counts instead.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from airflow_eod.core.audit.findings import age_words
from airflow_eod.core.audit.state import AuditedBatch, AuditState
from airflow_eod.core.planlog.retention import RETENTION_KEY
from airflow_eod.core.table_layout import DATA_DIR


def resolve(audit: AuditState) -> None:
    """Set each batch's committed generation, its table version, files and rows, reporting
    what breaks the records' or the markers' word on them."""
    for b in audit.batches.values():
        newest = max(b.records, default=None)
        set_back = _marker_set_back(audit, b, newest)
        if newest is not None:
            _check_record(audit, b, newest, set_back)
        b.generation = b.marker if b.marker is not None else newest  # the table is the truth
        foreign = None
        if b.generation is not None and b.generation not in b.records:
            foreign = audit.log.foreign.get((b.key.app_id, b.generation))
        # Another writer set the marker: the batch's own newest commit (its record, or its
        # commit in the log) is the table's word on its rows, not that marker.
        own = _own_newest(audit, b) if set_back is not None or foreign is not None else None
        _report_another_writers_marker(audit, b, set_back, foreign, own)
        if own is not None:
            b.generation = own
        if b.generation is None:
            continue
        record = _take_generation(audit, b, b.generation)
        if foreign is None and own is None and not _marker_expiring(audit, b) and record is None:
            audit.add("record_missing", b.key, gen=b.generation)


def _report_another_writers_marker(
    audit: AuditState, b: AuditedBatch, set_back: int | str | None, foreign: int | None, own: int | None
) -> None:
    """Report a marker of ``b`` that another writer set: back below the batch's own newest
    generation (``set_back``), or to a generation no record of the batch has (``foreign``)."""
    if set_back is not None:
        op = "no longer in the log"
        if isinstance(set_back, int):
            op = audit.log.operations.get(set_back, "no commitInfo")
        back = f"set it back below the batch's own newest generation, {own}"
        say_back: dict[str, Any] = {"gen": b.marker, "version": set_back, "op": op, "own": back}
        audit.add("marker_set_by_another_writer", b.key, **say_back)
    elif foreign is not None:
        op = audit.log.operations.get(foreign, "no commitInfo")
        said = "it was never loaded" if own is None else f"its own newest generation is {own}"
        say: dict[str, Any] = {"gen": b.generation, "version": foreign, "op": op, "own": said}
        audit.add("marker_set_by_another_writer", b.key, **say)


def _take_generation(audit: AuditState, b: AuditedBatch, gen: int) -> dict[str, Any] | None:
    """Set the table version, files and rows of ``b``'s committed generation ``gen`` from its
    record, else from its commit in the log, else from its attempt directories; return the
    record (``None``: it has none)."""
    b.old_files = {f for g, body in b.records.items() if g != gen for f in body["files"]}
    record, landed = b.records.get(gen), audit.log.landed.get((b.key.app_id, gen))
    if record is not None:
        b.version, b.files = record["table_version"], record["files"]
        b.rows = record["manifest"].get("rows")
    elif landed is not None:
        b.version, b.rows, b.files = landed
    else:  # no record, and its commit left the log: its directory is all there is to go on
        prefix = f"{DATA_DIR}/{b.key.pipeline_id}/{b.key.key}/g{gen}-"
        b.files = sorted(p for p in audit.live if p.startswith(prefix))
    return record


def _own_newest(audit: AuditState, b: AuditedBatch) -> int | None:
    """The newest generation of ``b`` that a commit of its own landed: its record, or its
    commit with the batch's manifest in the log."""
    return max({*b.records, *(g for a, g in audit.log.owned if a == b.key.app_id)}, default=None)


def _marker_set_back(audit: AuditState, b: AuditedBatch, newest: int | None) -> int | str | None:
    """The commit (``"?"``: no longer in the log) of another writer that set ``b``'s
    marker back below the generation of its newest record, whose own commit is the
    table's (in the log with the batch's manifest, or its files live); else ``None``."""
    if b.marker is None or newest is None or newest <= b.marker:
        return None
    files = b.records[newest].get("files") or []
    if (b.key.app_id, newest) not in audit.log.owned and not any(f in audit.live for f in files):
        return None
    setter = audit.log.set_by.get(b.key.app_id)
    if setter is not None and setter[1]:
        return None  # the batch's own commit set it last: the record is wrong
    return "?" if setter is None else setter[0]


def _check_record(audit: AuditState, b: AuditedBatch, gen: int, set_back: int | str | None = None) -> None:
    where, version = b.where[gen], int(b.records[gen]["table_version"])
    carried = audit.log.commits.get(version)
    # Only commits past the checkpoint are the table's word (see log_facts.read_log_facts).
    if carried is not None and version > audit.log.checkpoint and (b.key.app_id, gen) not in carried:
        found = [g for a, g in carried if a == b.key.app_id]
        say = {"record": where, "gen": gen, "version": version}
        said = f"marker generation(s) {found}" if found else "no marker of the batch"
        audit.add("record_without_marker_commit", b.key, [where], found=said, **say)
    if b.marker is not None and b.marker < gen and set_back is None:
        why = f"is of generation {gen}, but the table's marker is at generation {b.marker}"
        audit.add("corrupt_record", b.key, [where], record=where, why=why)
    landed = audit.log.landed.get((b.key.app_id, gen))
    if carried is not None and version > audit.log.checkpoint and landed and landed[0] == version:
        # The commit is the table's word on what the generation added: a record that
        # lists other files (a copy, say) or other rows would make them count as its own.
        body, files = b.records[gen], set(landed[2])
        extra = sorted(set(body["files"]) - files)
        if extra or set(body["files"]) < files:
            listed = len(body["files"])
            why = f"lists {listed} file(s), but its commit (version {version}) added {len(files)}"
            shown = f" (e.g. {extra[0]}, which it did not add)" if extra else ""
            audit.add("corrupt_record", b.key, [where, *extra], record=where, why=why + shown)
        elif landed[1] is not None and body["manifest"].get("rows") != landed[1]:
            rows = body["manifest"].get("rows")
            why = f"says {rows} rows, but its commit (version {version}) says {landed[1]}"
            audit.add("corrupt_record", b.key, [where], record=where, why=why)


def _marker_expiring(audit: AuditState, b: AuditedBatch) -> bool:
    """Report a marker older than ``expiry_warning`` of the window; True if it is."""
    if audit.window is None or b.marker_ms is None or b.marker is None:
        return False
    age = audit.now - datetime.fromtimestamp(b.marker_ms / 1000, UTC)
    if age <= audit.window * audit.expiry_warning:
        return False
    share = f"{age / audit.window:.0%} of the table's {RETENTION_KEY} ({age_words(audit.window)})"
    old = f"{age_words(age)} old, {share}"
    kind = "marker_near_expiry" if b.marker in b.records else "marker_without_record"
    audit.add(kind, b.key, gen=b.marker, age=old)
    return True
