"""The live files, table-wide: whose each one is (a committed generation's, a replaced
generation's, no batch's, another writer's), whether it is on disk and in the table, and
which live files are copies of one another or of a replaced generation's file."""

from __future__ import annotations

from airflow_eod.core.audit.copies import same_bytes
from airflow_eod.core.audit.live_files import file_rows
from airflow_eod.core.audit.state import AuditedBatch, AuditState
from airflow_eod.core.table_layout import DATA_DIR


def check_files(audit: AuditState) -> None:
    """Give each live file its role and report files of two batches, missing or refused
    files, replaced generations' files, files of no committed batch, other writers' OPTIMIZE
    outputs and their other files."""
    owners: dict[str, list[AuditedBatch]] = {}
    for b in audit.committed():
        for f in b.files:
            owners.setdefault(f, []).append(b)
            audit.role[f] = f"batch {b.key.label} generation {b.generation}"
    for f, bs in sorted(owners.items()):
        if len(bs) > 1 and f in audit.live:
            names = " and ".join(b.key.label for b in bs)
            audit.add("file_in_two_batches", bs[0].key, [f], file=f, batches=names)
    replaced = {f: b for b in audit.committed() for f in b.old_files}
    optimized: dict[int, list[str]] = {}
    for f in sorted(audit.live):
        key, attempt = audit.live[f].batch, audit.live[f].generation
        if not audit.live[f].on_disk:
            audit.add("missing_data_file", key, [f], file=f, role=audit.role.get(f, "of no batch"))
        if audit.live[f].refused:
            why, role = audit.live[f].refused, audit.role.get(f, "of no batch")
            audit.add("file_not_in_table", key, [f], file=f, role=role, why=why)
        if f in owners:
            continue
        # A merge batch's older generations' files that its restatement did not rewrite hold
        # merged rows (of many batches), not a replaced copy of its own: see merge_batches.
        if f in audit.merge_kept and key is not None and key in audit.merge:
            audit.role[f] = f"an older generation's file of merge batch {key.label}"
            continue
        # A file an older record lists, or in an older generation's attempt directory.
        owner = replaced.get(f) or (audit.batches.get(key) if key else None)
        gen = owner.generation if owner else None
        older = attempt is not None and gen is not None and attempt < gen
        if owner and gen is not None and (f in owner.old_files or older):
            audit.role[f] = f"a replaced generation of batch {owner.key.label}"
            audit.add("stale_generation_live", owner.key, [f], file=f, rows=audit.rows[f], gen=gen)
        elif f.startswith(f"{DATA_DIR}/"):
            audit.role[f] = "of no committed batch"
            audit.add("file_outside_batch", key, [f], file=f, rows=audit.rows[f])
        elif f in audit.log.adds and not audit.log.adds[f][1]:
            audit.role[f] = f"OPTIMIZE output of commit {audit.log.adds[f][0]}"
            optimized.setdefault(audit.log.adds[f][0], []).append(f)
        else:
            audit.role[f] = "another writer's file"
            audit.add("foreign_file", None, [f], file=f, rows=audit.rows[f])
    for v, files in sorted(optimized.items()):
        audit.add("compacted_file", None, files, version=v, n=len(files), file=files[0])


def check_duplicates(audit: AuditState) -> None:
    """Report live files that hold the same bytes as another live file, or as a replaced
    generation's file still on disk, when one of them is ours."""
    owned = {f for b in audit.committed() for f in b.files}
    owned |= audit.merge_kept
    # Files of replaced generations still on disk (until VACUUM): a copy of one, live under
    # another name, puts the old rows back beside the new generation's.
    replaced = {f: b for b in audit.committed() for f in b.old_files if f not in audit.live}
    live = [f.path for f in audit.live.values() if f.on_disk and not f.refused]
    for same in same_bytes(audit.ref, live + sorted(replaced)):
        copies = [f for f in same if f in audit.live]
        if all(f in owned for f in copies):
            continue  # each is listed by its own batch's record: that is data, not a copy
        if not any(f in owned or f in replaced or f.startswith(f"{DATA_DIR}/") for f in same):
            # Every one is another writer's (two identical appends, say): their business,
            # counted as theirs; a copy of a file of ours is what breaks the guarantee.
            continue
        # A zero-row file shows no row twice (empty batches stage identical empty files);
        # the footer says so, not the statistics, which a copy may carry forged.
        if file_rows(audit.ref, same[0], None) == 0:
            continue
        who = "; ".join(f"{f} ({audit.role.get(f, 'of no batch')})" for f in copies)
        batch = next((b.key for b in audit.committed() if set(same) & set(b.files)), None)
        if len(copies) > 1:
            audit.add(
                "duplicate_file_content", batch, copies, n=len(copies), rows=audit.rows[copies[0]], who=who
            )
            continue
        old = replaced[next(f for f in same if f in replaced)]
        (copy,) = copies
        # It was a foreign file to check_files; it is a replaced generation's file.
        audit.findings = [f for f in audit.findings if not (f.kind == "foreign_file" and f.paths == [copy])]
        audit.role[copy] = f"a copy of a replaced generation's file of batch {old.key.label}"
        audit.add(
            "stale_generation_live", old.key, [copy], file=copy, rows=audit.rows[copy], gen=old.generation
        )
