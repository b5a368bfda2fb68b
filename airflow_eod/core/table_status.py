"""A per-pipeline summary of what a table holds, for the ``airflow-eod status`` command."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from airflow_eod.core.ask import ask_table, open_table
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.plan_log import PlanLog
from airflow_eod.core.table_layout import META_DIR, local_path, under


@dataclass
class BatchSummary:
    """One batch as the table sees it."""

    batch_key: str
    generation: int | None
    table_version: int | None
    rows: int | None


@dataclass
class PipelineSummary:
    """Every batch of one pipeline that the plan log or the log's manifests know of."""

    pipeline_id: str
    batches: list[BatchSummary] = field(default_factory=list)

    @property
    def committed(self) -> list[BatchSummary]:
        return [b for b in self.batches if b.generation is not None]

    @property
    def pending(self) -> list[BatchSummary]:
        return [b for b in self.batches if b.generation is None]


def _known_keys(table_uri: str) -> dict[str, set[str]]:
    """Per pipeline, every batch key the plan log planned or recorded as committed."""
    root = os.path.join(local_path(table_uri), META_DIR, "pipelines")
    found: dict[str, set[str]] = {}
    for pipeline in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        log = PlanLog(table_uri, pipeline)
        newest = log.newest_offset_seq()
        keys = {log.get_offset_plan(s).batch_key for s in range(newest + 1 if newest is not None else 0)}
        idir = under(log.table_path, META_DIR, "pipelines", pipeline, "intervals")
        if os.path.isdir(idir):
            keys |= {n[:-5] for n in os.listdir(idir) if n.endswith(".json") and ".g" not in n}
        keys |= set(log.recorded_batches())
        found[pipeline] = keys
    return found


def table_status(table_uri: str) -> list[PipelineSummary]:
    """Summaries of every pipeline that has loaded, or planned, into ``table_uri``.

    Batches are found in the plan log and the commit records, and also in the commit infos
    still in the log (a table loaded by another copy of the plan log, or by Delta Spark).
    """
    table = open_table(table_uri)
    keys = _known_keys(table_uri)
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
        out.append(summary)
    return out
