"""The table-wide row count: do the live rows equal what the committed batches recorded
plus what other writers' files hold?

Other writers' rewrites of files holding batch rows (OPTIMIZE, DELETE, MERGE, UPDATE) are
followed through the log: the rows they folded in count as theirs, the rows they deleted
from files that mixed batch rows with theirs cannot be attributed, and batch rows moved by a
commit no longer in the log are looked for only where they can be.
"""

from __future__ import annotations

from typing import Any

from airflow_eod.core.audit.commit_rows import merge_inserts, rows_deleted
from airflow_eod.core.audit.live_files import file_rows
from airflow_eod.core.audit.state import AuditState
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.table_layout import DATA_DIR


def check_total(audit: AuditState) -> None:
    """Report a table-wide row count that does not add up (or cannot be made to)."""
    ours = {v for v, txns in audit.log.commits.items() if any(BatchKey.from_app_id(a) for a, _ in txns)}
    # Merge rows are not counted (merge_checks judges their keys): neither the files that
    # hold them nor the merge batches, nor the append batches whose files a merge folded in.
    merged, absorbed, joined, unsplit = _merge_rows(audit, ours)
    if unsplit:
        what = "batch rows that another writer's rewrite had moved into files a merge then rewrote"
        audit.add("rows_unknown", None, what=what, scope="was not reconciled")
        return
    committed = [b for b in audit.committed() if b.key not in audit.merge and b.key not in absorbed]
    merged |= {f for b in audit.committed() if b.key in absorbed for f in b.files}
    carrier = {f for b in committed for f in b.files}  # the files that hold batch rows
    theirs = [f for f in audit.live if not f.startswith(f"{DATA_DIR}/") and f not in merged]
    folded: dict[str, int | None] = {}
    # Another writer's commit that rewrote files holding batch rows (OPTIMIZE, DELETE,
    # MERGE, or a rewrite of such a rewrite) holds their rows in its output, in place of
    # its inputs: only the other writers' rows it folded in count as theirs.
    inserted = 0
    # Rows another writer deleted from files that held batch rows and its own rows mixed
    # (an OPTIMIZE or MERGE put them together): whose rows they were, the log cannot tell.
    mixed_deletes: dict[int, int] = {}
    mixed: set[str] = set()  # files holding batch rows and another writer's rows
    theirs_mixed = 0  # other writers' rows that went into such files (rows folded in)
    for v, (added, removed) in sorted(audit.log.changes.items()):
        touched = carrier & set(removed)
        if v not in ours and v not in joined and touched:
            # Other writers' files it rewrote, counted before its output joins the carriers
            # (a file it added back in place with a deletion vector is one of them too).
            carried = audit.log.removed_hidden.get(v, {})
            theirs_in = [f for f in removed if f not in carrier and not f.startswith(f"{DATA_DIR}/")]
            for f in theirs_in:
                rows = file_rows(audit.ref, f, audit.log.adds.get(f, (0, True, None))[2])
                folded[f] = None if rows is None else rows - carried.get(f, 0)
            carrier.update(f for f in added if not f.startswith(f"{DATA_DIR}/"))
            inserts = merge_inserts(audit, v, added, removed)
            inserted += inserts
            # Only when every batch-row file it rewrote also held another writer's rows
            # can the rows it deleted have been theirs (Delta rewrites only files in which
            # it deletes a row: a file of batch rows alone lost one of them).
            if touched <= mixed and (gone := rows_deleted(audit, v)):
                mixed_deletes[v] = gone
            outputs, into = _mixing(audit, v, added, touched, theirs_in, mixed, everywhere=bool(inserts))
            mixed.update(outputs)
            theirs_mixed += sum(folded[f] or 0 for f in into)
    others = [audit.rows[f] for f in theirs if f not in carrier]
    unknown = [b for b in committed if b.rows is None]
    # A batch without a recorded count whose files are all live is left out of the count
    # (its files with it); one whose files moved has rows in files the count cannot split.
    moved = any(f not in audit.live for b in unknown for f in b.files)
    left_out = {f for b in unknown for f in b.files}
    if (
        None in [r for f, r in audit.rows.items() if f not in merged]
        or None in folded.values()
        or None in others
        or None in audit.unseen_rows
        or moved
    ):
        what = ", ".join(b.key.label for b in unknown) or "a file with neither statistics nor a footer"
        audit.add("rows_unknown", None, what=what, scope="was not reconciled")
        return
    if unknown:
        what = ", ".join(b.key.label for b in unknown)
        audit.add("rows_unknown", None, what=what, scope="leaves them and their files out")
    total = sum(r or 0 for f, r in audit.rows.items() if f not in left_out and f not in merged)
    recorded = sum(b.rows or 0 for b in committed)
    other = sum(r or 0 for r in [*others, *folded.values()]) + inserted
    # Batch rows whose files a commit no longer in the log removed are, if that commit was
    # a compaction, in files that are counted as other writers' now: only in those whose
    # origin the log no longer shows, or in the output of a later rewrite of such files.
    # Only as many as those can hold are counted there; the rest left the table.
    unseen = sum(r or 0 for r in audit.unseen_rows)
    if unseen:
        cap = _unseen_capacity(audit, ours, list(folded))
        held = sum(cap.get(f, 0) for f in theirs if f not in carrier) + sum(cap.get(f, 0) for f in folded)
        other -= min(unseen, held)
    say: dict[str, Any] = dict(total=total, batches=len(committed), recorded=recorded, others=other)
    diff = total - recorded - other
    # Rows a DELETE took from mixed files may have been the other writers' rows, but no
    # more of them than other writers ever put into such files.
    if diff < 0 and -diff <= min(sum(mixed_deletes.values()), theirs_mixed + inserted):
        versions = ", ".join(str(v) for v in mixed_deletes)
        audit.add("rows_deleted_unattributed", None, diff=-diff, versions=versions, **say)
    elif diff:
        audit.add("row_total_mismatch", None, diff=abs(diff), more=("fewer", "more")[diff > 0], **say)


def _merge_rows(audit: AuditState, ours: set[int]) -> tuple[set[str], set[BatchKey], set[int], bool]:
    """Where merge rows are: the files that hold them (merge batches' files, any merge
    commit's output, and the output of another writer's rewrite of such files), the append
    batches whose own files went into them, the commits whose output did, and whether
    other writers' files that held batch rows went into them too (then whose rows the
    merge files hold beyond the merges' cannot be told, and nothing is counted)."""
    if not audit.merge:
        return set(), set(), set(), False
    held = {f for f, live in audit.live.items() if live.batch in audit.merge}
    held |= {f for b in audit.committed() if b.key in audit.merge for f in b.files}
    owner = {f: b.key for b in audit.committed() if b.key not in audit.merge for f in b.files}
    carrier, absorbed, joined, unsplit = set(owner), set[BatchKey](), set[int](), False
    for v, (added, removed) in sorted(audit.log.changes.items()):
        if v in audit.merge_commits or (v not in ours and held & set(removed)):
            joined.add(v)
            held.update(added)
            absorbed.update(owner[f] for f in removed if f in owner)
            unsplit |= any(f in carrier and f not in owner for f in removed)
        elif v not in ours and carrier & set(removed):
            # Another writer's rewrite of batch files: its output holds batch rows.
            carrier.update(f for f in added if not f.startswith(f"{DATA_DIR}/"))
    return held, absorbed, joined, unsplit


def _mixing(
    audit: AuditState,
    version: int,
    added: list[str],
    touched: set[str],
    theirs_in: list[str],
    mixed: set[str],
    *,
    everywhere: bool,
) -> tuple[list[str], list[str]]:
    """What another writer's rewrite of batch-row files (commit ``version``) mixed: the
    files it ``added`` that may hold batch rows and another writer's rows together, and
    which of the other writers' files it rewrote (``theirs_in``) went into them.
    ``mixed``: the files found mixed so far.

    An OPTIMIZE or a DELETE keeps every row in its partition: only outputs in a partition
    where both batch rows (``touched``, which includes mixed files) and another writer's
    rows came in are mixed. An UPDATE may move rows to another partition and a MERGE
    (``everywhere``: it inserted rows) may put them anywhere, as may a partition that is
    not known: then every output is."""
    outputs = [f for f in added if not f.startswith(f"{DATA_DIR}/")]
    came_in = theirs_in + [f for f in touched if f in mixed]
    if not came_in and not everywhere:
        return [], []
    part = audit.log.partitions.get
    if (
        everywhere
        or audit.log.operations.get(version) not in ("OPTIMIZE", "DELETE")
        or any(part(f) is None for f in [*touched, *theirs_in, *outputs])
    ):
        return outputs, theirs_in
    both = {part(f) for f in touched} & {part(f) for f in came_in}
    return [f for f in outputs if part(f) in both], [f for f in theirs_in if part(f) in both]


def _unseen_capacity(audit: AuditState, ours: set[int], folded: list[str]) -> dict[str, int]:
    """Other writers' files -> how many of their rows may be batch rows that a commit no
    longer in the log moved there: all rows of a file whose add has left the log, and, for
    a later rewrite in the log, as many as its inputs could hold (at most its output)."""

    def rows_of(f: str) -> int | None:
        if f in audit.live:
            return audit.rows[f]
        return file_rows(audit.ref, f, audit.log.adds[f][2] if f in audit.log.adds else None)

    def capacity(f: str) -> int:
        if f in cap:
            return cap[f]
        if f.startswith(f"{DATA_DIR}/") or f in audit.log.adds:
            return 0
        rows = rows_of(f)
        return -1 if rows is None else rows  # -1: unknown, bounded by the output below

    cap: dict[str, int] = {}
    for v, (added, removed) in sorted(audit.log.changes.items()):
        outs = [f for f in added if not f.startswith(f"{DATA_DIR}/")]
        inputs = [capacity(f) for f in removed]
        if v in ours or not outs or not any(inputs):
            continue
        counts = [rows_of(f) for f in outs]
        out_rows = sum(r or 0 for r in counts)
        held = out_rows if -1 in inputs or None in counts else min(out_rows, sum(inputs))
        cap.update(dict.fromkeys(outs, 0))
        cap[outs[0]] = held  # the outputs together; which one holds them does not matter
    for f in [*audit.live, *folded]:
        if f not in cap:
            cap[f] = max(capacity(f), 0)
    return cap
