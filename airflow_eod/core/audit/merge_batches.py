"""Which committed batches are merge batches, and which commits merged.

A merge commit (:mod:`airflow_eod.spark.merge_job`) removes the live files that may hold
the batch's keys and adds their rows back, folded with the batch's, in files under its own
attempt directory: a merge batch's files hold other batches' rows, later merges remove them
(``dataChange=true``), and a restated merge batch keeps the files of its older generations
that the restatement did not rewrite. So the checks of files and rows per batch
(:mod:`~airflow_eod.core.audit.batch_checks`, :mod:`~airflow_eod.core.audit.live_file_checks`,
:mod:`~airflow_eod.core.audit.row_total`) pass over merge batches, known by their manifest's
``extra["merge"]``, and :mod:`~airflow_eod.core.audit.merge_checks` judges their keys instead.
Append batches of other pipelines in the same table keep every check.
"""

from __future__ import annotations

from typing import Any

from airflow_eod.core.audit.state import AuditedBatch, AuditState
from airflow_eod.core.merge_rules import MANIFEST_ENTRY


def merge_entry(audit: AuditState, b: AuditedBatch, generation: int) -> dict[str, Any] | None:
    """The ``extra["merge"]`` of ``b``'s manifest at ``generation``: its commit's in the log
    (the table's word), else its commit record's; ``None`` for an append."""
    extra = audit.log.extras.get((b.key.app_id, generation))
    if extra is None and generation in b.records:
        manifest = b.records[generation].get("manifest")
        extra = manifest.get("extra") if isinstance(manifest, dict) else None
    entry = extra.get(MANIFEST_ENTRY) if isinstance(extra, dict) else None
    return entry if isinstance(entry, dict) else None


def mark_merge_batches(audit: AuditState) -> None:
    """Fill ``audit.merge`` (the committed merge batches), ``audit.merge_commits`` and
    ``audit.merge_kept`` (see :func:`_older_files`)."""
    gens: dict[str, set[int]] = {}
    for a, g in audit.log.owned:
        gens.setdefault(a, set()).add(g)
    for b in audit.batches.values():
        mine = {*b.records, *gens.get(b.key.app_id, ())}
        entries = {g: e for g in mine if (e := merge_entry(audit, b, g)) is not None}
        if entries and b.generation is not None:
            audit.merge[b.key] = entries.get(b.generation, {})
            audit.merge_kept |= _older_files(audit, b, mine)
        for g in entries:
            landed = audit.log.landed.get((b.key.app_id, g))
            if landed is not None:
                audit.merge_commits.add(landed[0])
            if g in b.records:
                audit.merge_commits.add(int(b.records[g]["table_version"]))


def _older_files(audit: AuditState, b: AuditedBatch, generations: set[int]) -> set[str]:
    """The files that commits of ``b``'s other ``generations`` added (their records', or
    their commits' in the log): a merge batch's older generation's files that are still
    live hold rows its restatement did not rewrite, not a replaced copy of the batch."""
    files = set(b.old_files)
    for g in generations - {b.generation}:
        if (b.key.app_id, g) in audit.log.landed and (b.key.app_id, g) in audit.log.owned:
            files.update(audit.log.landed[(b.key.app_id, g)][2])
    return files
