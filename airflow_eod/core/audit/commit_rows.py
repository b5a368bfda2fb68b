"""What another writer's commit did to rows, as far as its log entry and its files tell.

Its ``operationMetrics`` counts (Delta Spark's names and delta-rs's differ), the rows of the
files it read and wrote (net of deletion vectors), and whether an UPDATE or MERGE kept every
row it read. The per-batch checks and the table-wide row count ask these questions.
"""

from __future__ import annotations

from airflow_eod.core.audit.live_files import file_rows
from airflow_eod.core.audit.state import AuditState

# A MERGE's count of the target rows it deleted: Delta Spark's name, and delta-rs's.
_MERGE_DELETED = ("numTargetRowsDeleted", "num_target_rows_deleted")


def rows_deleted(audit: AuditState, version: int) -> int:
    """The rows another writer's DELETE or MERGE (commit ``version``) deleted: its
    ``operationMetrics``' count, else its input less its output (0 when not known)."""
    op = audit.log.operations.get(version)
    if op not in ("DELETE", "MERGE"):
        return 0
    said = metric_count(audit, version, "numDeletedRows", "num_deleted_rows", *_MERGE_DELETED)
    if said is not None:
        return said
    rows = io_rows(audit, version)
    return 0 if rows is None else max(0, rows[0] - rows[1])


def metric_count(audit: AuditState, version: int, *names: str) -> int | None:
    """A count of commit ``version``'s ``operationMetrics``, under the first of ``names``
    it has (Delta Spark's name and delta-rs's differ); ``None`` when it gives none."""
    metrics = audit.log.metrics.get(version, {})
    said = next((str(metrics[n]) for n in names if n in metrics), "")
    return int(said) if said.isdigit() else None


def rows_of(audit: AuditState, files: list[str]) -> int | None:
    """The rows ``files`` hold (live: their statistics; gone: their add in the log, or the
    footer while the file is on disk); ``None`` when one is not known."""
    total = 0
    for f in files:
        rows = audit.rows[f] if f in audit.live else None
        if rows is None:
            rows = file_rows(audit.ref, f, audit.log.adds[f][2] if f in audit.log.adds else None)
        if rows is None:
            return None
        total += rows
    return total


def io_rows(audit: AuditState, version: int) -> tuple[int, int] | None:
    """(rows in, rows out) of commit ``version``: the rows of the files it removed, net of
    the deletion vectors they carried, plus those it hid in place; the rows of the files
    it added, less those it added back in place. ``None`` when a count is not known."""
    added, removed = audit.log.changes.get(version, ([], []))
    in_place = audit.log.hidden.get(version, {})
    rows_in = rows_of(audit, [f for f in removed if f not in in_place])
    rows_out = rows_of(audit, [f for f in added if f not in in_place])
    if rows_in is None or rows_out is None:
        return None
    carried = sum(audit.log.removed_hidden.get(version, {}).values())
    return rows_in - carried + sum(in_place.values()), rows_out


def merge_inserts(audit: AuditState, version: int, added: list[str], removed: list[str]) -> int:
    """The rows a MERGE inserted in the files it wrote beside the batch rows it rewrote:
    the other writer's rows. Only a MERGE that counts its inserts, and no more than its
    output holds beyond its input: rows any other commit (an OPTIMIZE) added on top of
    what it removed stay unexplained, so a rewrite that doubled batch rows is found."""
    if audit.log.operations.get(version) != "MERGE":
        return 0
    count = metric_count(audit, version, "numTargetRowsInserted", "num_target_rows_inserted")
    if count is None:
        return 0  # no count of its inserts
    rows = io_rows(audit, version)
    if rows is None:
        return 0
    rows_in, rows_out = rows
    # What it wrote beyond what it read and kept: its inserts, plus the rows it deleted.
    deleted = metric_count(audit, version, *_MERGE_DELETED) or 0
    return max(0, min(count, rows_out - rows_in + deleted))


def kept_rows(audit: AuditState, version: int) -> bool:
    """Whether commit ``version`` is another writer's UPDATE or MERGE that kept every row
    of the files it removed: an UPDATE whose output holds as many rows as its input, a
    MERGE that says it deleted no row and whose output holds at least as many. Anything
    else that removed a batch file (a DELETE, an overwrite) may have dropped rows."""
    op = audit.log.operations.get(version)
    added = audit.log.changes.get(version, ([], []))[0]
    if op not in ("UPDATE", "MERGE") or not added:
        return False
    if op == "MERGE" and metric_count(audit, version, *_MERGE_DELETED) != 0:
        return False  # deleted rows, or no count of them
    # On a table with deletion vectors the files it read stay, with the rows it changed
    # hidden: those rows are its input, and the files it added back are not its output.
    rows = io_rows(audit, version)
    if rows is None:
        return False
    rows_in, rows_out = rows
    return rows_out == rows_in if op == "UPDATE" else rows_out >= rows_in


def kept_in_place(audit: AuditState, files: list[str]) -> dict[str, tuple[int, int]]:
    """Of the live ``files``, those in which another writer's UPDATE or MERGE (one that
    kept every row it read, see :func:`kept_rows`) hid rows with a deletion vector -> (the
    newest such commit, the rows they hid). A DELETE's hidden rows are not among them: the
    batch's live count stays short of its record, and that is reported."""
    out: dict[str, tuple[int, int]] = {}
    for v, in_place in sorted(audit.log.hidden.items()):
        mine = {f: rows for f, rows in in_place.items() if f in files and rows > 0}
        if mine and kept_rows(audit, v):
            for f, rows in mine.items():
                out[f] = (v, out.get(f, (v, 0))[1] + rows)
    return out
