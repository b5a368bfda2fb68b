"""The quarantine table: does it hold the generation of each batch whose commit carried
malformed records for it (the outbox in the manifest's ``extra``)?"""

from __future__ import annotations

from deltalake import DeltaTable

from airflow_eod.core.audit.log_facts import read_log_facts
from airflow_eod.core.audit.plan_log_facts import read_plan_log_facts
from airflow_eod.core.audit.state import AuditState
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import EodError
from airflow_eod.core.table_ref import TableRef


def check_quarantine(audit: AuditState) -> None:
    """Each committed generation's outbox (``manifest.extra["quarantine"]``) delivered."""
    held: dict[str, dict[BatchKey, int] | None] = {}
    for b in audit.committed():
        record = b.records.get(b.generation) if b.generation is not None else None
        # The record's manifest, or, when its committer died before the record, the
        # manifest of the commit in the log: the outbox rides in both.
        extra = (record or {}).get("manifest", {}).get("extra")
        if extra is None and b.generation is not None:
            extra = audit.log.extras.get((b.key.app_id, b.generation))
        box = (extra or {}).get("quarantine")
        if not isinstance(box, dict):
            continue
        staged = (box.get("staged") or {}).get("files") or []
        if not staged and not box.get("replace_previous"):
            continue  # nothing to deliver: the delivery is skipped on purpose
        q = str(box.get("table_uri"))
        if q not in held:
            try:
                held[q] = _generations_held(audit.ref.neighbour(q, "the quarantine table"))
            except EodError:  # a manifest naming a table out of reach: nothing seen there
                held[q] = None
        there = held[q]
        got = None if there is None else there.get(b.key)
        # An empty outbox only has to remove earlier rejects: none there is in step too.
        if got == b.generation or (got is None and not staged):
            continue
        rejects = sum(int(f.get("num_records") or 0) for f in staged)
        what = "no generation" if got is None else f"generation {got}"
        audit.add("quarantine_behind", b.key, gen=b.generation, n=rejects, q=q, what=what)


def _generations_held(ref: TableRef) -> dict[BatchKey, int] | None:
    """The newest generation of each batch a (quarantine) table holds, by its markers and by
    its commit records (markers expire); ``None`` when there is no table there."""
    path = ref.path
    try:
        if open_table(ref) is None:
            return None
        dt = DeltaTable(path, storage_options=ref.storage_options)
    except (EodError, OSError):
        return None
    out: dict[BatchKey, int] = {}
    for app_id, (gen, _) in read_log_facts(ref, dt.version()).markers.items():
        if (key := BatchKey.from_app_id(app_id)) is not None:
            out[key] = gen
    for key, gens in read_plan_log_facts(ref, str(dt.metadata().id)).records.items():
        out[key] = max(out.get(key, -1), *gens)
    return out
