"""Each committed batch on its own: are its files live, and do they hold the rows its
record says? Files another writer rewrote, compacted or removed are told apart."""

from __future__ import annotations

from typing import Any

from airflow_eod.core.audit.commit_rows import kept_in_place, kept_rows
from airflow_eod.core.audit.findings import BatchSummary
from airflow_eod.core.audit.state import AuditState


def check_batches(audit: AuditState) -> list[BatchSummary]:
    """Report each committed batch whose files are not all live as they were committed, or
    whose live files hold other rows than its record says; return each one as counted."""
    out = []
    for b in audit.committed():
        assert b.generation is not None
        live = [f for f in b.files if f in audit.live]
        known = [audit.rows[f] for f in live]
        live_rows = None if None in known else sum(r or 0 for r in known)
        key, gen = b.key, b.generation
        if key in audit.merge:
            # Its files hold other batches' rows too, and later merges remove them: its
            # keys are judged instead (merge_checks), its rows are not counted here.
            out.append(BatchSummary(key.pipeline_id, key.key, gen, b.version, b.rows, None, len(live)))
            continue
        out.append(BatchSummary(key.pipeline_id, key.key, gen, b.version, b.rows, live_rows, len(live)))
        # Rows an UPDATE or MERGE hid in a live file (deletion vectors) and kept in new files.
        moved = kept_in_place(audit, live)
        if live_rows is not None:
            live_rows += sum(rows for _, rows in moved.values())
        gone = [f for f in b.files if f not in audit.live]
        # A merge batch's commit rewrote the file: its rows are in the merge's files now,
        # those of keys the merge (or a later one) loaded newer rows of replaced.
        merged = [
            f for f in gone if f in audit.log.removes and audit.log.removes[f][0] in audit.merge_commits
        ]
        gone = [f for f in gone if f not in merged]
        # A file an OPTIMIZE rewrote (dataChange=false) moved its rows; any other removal lost them.
        # dataChange=false promises the rows moved: only a commit that added files can
        # have moved them (one that only removed files dropped them, whatever it says).
        compacted = [
            f
            for f in gone
            if f in audit.log.removes
            and not audit.log.removes[f][1]
            and audit.log.changes.get(audit.log.removes[f][0], ([], []))[0]
        ]
        # Removed by a commit a log cleanup took: whether it moved the rows (OPTIMIZE) or
        # dropped them (DELETE) is only told by the table-wide count (check_total).
        unseen = [f for f in gone if f not in audit.log.removes]
        # An UPDATE or MERGE rewrote the file and kept every row of it (in new files).
        rewritten = [
            f
            for f in gone
            if f not in compacted and f not in unseen and kept_rows(audit, audit.log.removes[f][0])
        ]
        lost = [f for f in gone if f not in compacted and f not in unseen and f not in rewritten]
        say: dict[str, Any] = {"gen": gen, "files": len(b.files)}
        if unseen:
            known = [audit.log.adds[f][2] if f in audit.log.adds else None for f in lost + compacted]
            rows_gone = None
            if b.rows is not None and live_rows is not None and None not in known:
                rows_gone = b.rows - live_rows - sum(r or 0 for r in known)
            audit.unseen_rows.append(rows_gone)
            shown = "?" if rows_gone is None else rows_gone
            audit.add(
                "batch_file_removed_unseen", key, unseen, n=len(unseen), file=unseen[0], rows=shown, **say
            )
        if lost:
            rows = [audit.log.adds[f][2] if f in audit.log.adds else None for f in lost]
            removed = audit.log.removes.get(lost[0])
            by = "a commit no longer in the log"
            if removed:
                by = f"commit {removed[0]} ({audit.log.operations.get(removed[0], 'no commitInfo')})"
            count = f"{sum(r or 0 for r in rows)}{'+' if None in rows else ''}"
            say.update(n=len(lost), file=lost[0], by=by, rows=count, recorded=b.rows)
            audit.add("batch_file_not_live", key, lost, **say)
        if rewritten or moved:
            first = rewritten[0] if rewritten else min(moved)
            v = audit.log.removes[first][0] if rewritten else moved[first][0]
            said = {"gen": gen, "files": len(b.files)}
            op, paths = audit.log.operations.get(v, ""), rewritten + sorted(moved)
            audit.add("batch_file_rewritten", key, paths, n=len(paths), op=op, version=v, **said)
        if merged:
            v = audit.log.removes[merged[0]][0]
            by = ", ".join(sorted(k.label for k in audit.merge if audit.batches[k].version == v))
            said = {"gen": gen, "files": len(b.files), "n": len(merged), "version": v}
            audit.add("batch_file_merged", key, merged, by=by or "a merge batch", **said)
        if compacted:
            say.update(n=len(compacted), version=audit.log.removes[compacted[0]][0])
            audit.add("batch_file_compacted", key, compacted, **say)
        elif (
            not merged
            and not lost
            and not rewritten
            and not unseen
            and b.rows is not None
            and live_rows is not None
            and live_rows != b.rows
        ):
            say.update(rows=b.rows, files=len(live), live=live_rows)
            audit.add("row_count_mismatch", key, live, **say)
    return out
